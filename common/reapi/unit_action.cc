// SPDX-License-Identifier: Apache-2.0
#include "common/reapi/unit_action.h"

#include <algorithm>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/store/digest.h"

namespace distcc_cuda {
namespace {

// The unit's files as folders, before they are written as REAPI Directory
// blobs.
struct Folder {
  std::map<std::string, const v1::InputFile*> files;
  std::map<std::string, Folder> folders;
};

absl::Status AddFile(Folder& root, const v1::InputFile& input) {
  std::vector<std::string> parts = absl::StrSplit(input.path(), '/');
  Folder* folder = &root;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if (part.empty() || part == "." || part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", TerminalSafe(input.path()), "' is not a clean relative path"));
    }
    const bool last = i + 1 == parts.size();
    if (last && folder->files.count(part) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", TerminalSafe(input.path()), "' is listed twice"));
    }
    if (last ? folder->folders.count(part) > 0 : folder->files.count(part) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", TerminalSafe(input.path()), "': '", TerminalSafe(part),
                       "' is both a file and a folder among the unit's inputs"));
    }
    if (last) {
      folder->files[part] = &input;
    } else {
      folder = &folder->folders[part];
    }
  }
  return absl::OkStatus();
}

// Writes `folder` and the folders under it as Directory blobs into `blobs`
// and returns its digest.
reapi::Digest WriteFolder(const Folder& folder, std::vector<BlobSource>& blobs) {
  reapi::Directory directory;
  for (const auto& [name, input] : folder.files) {
    reapi::FileNode* file = directory.add_files();
    file->set_name(name);
    *file->mutable_digest() = ToReapi(FromProto(input->digest()));
    file->set_is_executable(input->is_executable());
  }
  for (const auto& [name, below] : folder.folders) {
    reapi::DirectoryNode* node = directory.add_directories();
    node->set_name(name);
    *node->mutable_digest() = WriteFolder(below, blobs);
  }
  std::string bytes = directory.SerializeAsString();
  Digest digest = DigestOf(bytes);
  blobs.push_back({digest, "", std::move(bytes)});
  return ToReapi(digest);
}

// Adds `message`'s bytes to `blobs` and returns their digest.
reapi::Digest AddMessage(const google::protobuf::Message& message, std::vector<BlobSource>& blobs) {
  std::string bytes = message.SerializeAsString();
  Digest digest = DigestOf(bytes);
  blobs.push_back({digest, "", std::move(bytes)});
  return ToReapi(digest);
}

}  // namespace

absl::StatusOr<MemoryProperty> ParseMemoryProperty(const std::string& text) {
  MemoryProperty property;
  std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits(':', 1));
  property.name = parts[0];
  if (parts.size() == 1) return property;
  static const std::pair<const char*, int64_t> kUnits[] = {
      {"B", 1},     {"KiB", 1 << 10}, {"MiB", 1 << 20},    {"GiB", int64_t{1} << 30},
      {"KB", 1000}, {"kB", 1000},     {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}};
  for (const auto& [name, bytes] : kUnits) {
    if (parts[1] == name) {
      property.unit_bytes = bytes;
      return property;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--remote-memory-property '", TerminalSafe(text.substr(0, 200)),
      "': the unit after ':' must be B, KiB, MiB, GiB, KB, MB or GB (NativeLink: memory_kb:KiB; "
      "Buildfarm: min-mem; BuildBuddy: EstimatedMemory; BuildGrid with distcc-cuda bots: memory)"));
}

std::string MemoryPropertyValue(const MemoryProperty& property, int64_t bytes) {
  const int64_t unit = std::max<int64_t>(property.unit_bytes, 1);
  bytes = std::max<int64_t>(bytes, 0);
  const int64_t units = bytes / unit + (bytes % unit != 0 ? 1 : 0);
  if (units == 0) return "0";
  // The next of 1, 2, 3, 4, 6, 8, 12, 16, ...: a prediction that moves a
  // little keeps its value, and so its Action and the engine's cached result.
  for (int64_t step = 1; step > 0 && step < (int64_t{1} << 61); step *= 2) {
    if (step >= units) return absl::StrCat(step);
    if (step >= 2 && step / 2 * 3 >= units) return absl::StrCat(step / 2 * 3);
  }
  return absl::StrCat(units);
}

std::vector<std::string> MemoryPropertyValues(const MemoryProperty& property, int64_t lowest,
                                              int64_t highest, size_t most) {
  std::vector<std::string> values;
  int64_t first = 0;
  int64_t last = 0;
  if (!absl::SimpleAtoi(MemoryPropertyValue(property, lowest), &first) ||
      !absl::SimpleAtoi(MemoryPropertyValue(property, highest), &last)) {
    return values;
  }
  // The steps MemoryPropertyValue rounds to, in order: 1, 2, 3, 4, 6, 8, ...
  for (int64_t step = 1; step > 0 && step < (int64_t{1} << 61) && values.size() < most; step *= 2) {
    for (const int64_t value : {step, step >= 2 ? step / 2 * 3 : int64_t{0}}) {
      if (value >= first && value <= last && value > 0 && values.size() < most) {
        values.push_back(absl::StrCat(value));
      }
    }
  }
  if (values.empty() && first == 0) values.push_back("0");
  return values;
}

absl::StatusOr<UnitAction> ActionOfUnit(const v1::CompileUnit& unit, const ActionSettings& settings,
                                        const std::function<std::string(const Digest&)>& path_of) {
  UnitAction out;
  Folder root;
  std::map<Digest, BlobSource> files;
  for (const v1::InputFile& input : unit.inputs()) {
    RETURN_IF_ERROR(AddFile(root, input));
    const Digest digest = FromProto(input.digest());
    if (files.count(digest)) continue;
    files[digest] = input.has_content() ? BlobSource{digest, "", input.content()}
                                        : BlobSource{digest, path_of(digest), ""};
  }
  for (auto& [digest, source] : files) out.blobs.push_back(std::move(source));
  reapi::Command command;
  command.add_arguments(settings.compiler);
  for (const std::string& argument : unit.arguments()) command.add_arguments(argument);
  // nvcc finds its host compiler in PATH.
  reapi::Command::EnvironmentVariable* path = command.add_environment_variables();
  path->set_name("PATH");
  path->set_value("/usr/bin:/bin");
  for (const std::string& output : unit.output_paths()) command.add_output_files(output);
  command.set_working_directory(unit.working_directory());
  std::vector<std::pair<std::string, std::string>> platform = settings.platform;
  std::sort(platform.begin(), platform.end());
  for (const auto& [name, value] : platform) {
    reapi::Platform::Property* property = command.mutable_platform()->add_properties();
    property->set_name(name);
    property->set_value(value);
  }
  // The platform goes in the Action too (REAPI 2.2), where newer engines
  // read it first.
  *out.action.mutable_platform() = command.platform();
  *out.action.mutable_command_digest() = AddMessage(command, out.blobs);
  out.command = std::move(command);
  *out.action.mutable_input_root_digest() = WriteFolder(root, out.blobs);
  if (settings.timeout > absl::ZeroDuration()) {
    out.action.mutable_timeout()->set_seconds(absl::ToInt64Seconds(settings.timeout));
  }
  out.action_digest = AddMessage(out.action, out.blobs);
  return out;
}

reapi::Digest ActionDigestWithProperty(const UnitAction& action, const std::string& name,
                                       const std::string& value) {
  reapi::Command command = action.command;
  bool found = false;
  for (reapi::Platform::Property& property : *command.mutable_platform()->mutable_properties()) {
    if (property.name() != name) continue;
    property.set_value(value);
    found = true;
  }
  if (!found) return action.action_digest;
  std::vector<BlobSource> unused;
  reapi::Action changed = action.action;
  *changed.mutable_platform() = command.platform();
  *changed.mutable_command_digest() = AddMessage(command, unused);
  return AddMessage(changed, unused);
}

}  // namespace distcc_cuda
