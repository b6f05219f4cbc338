// SPDX-License-Identifier: Apache-2.0
#include "coordinator/reapi_action.h"

#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/byte_size.h"
#include "common/base/status.h"
#include "coordinator/request_cost.h"
#include "distcc_cuda/v1/cas.pb.h"

namespace distcc_cuda::coordinator {
namespace {

// An Action, a Command or a Directory is a few kilobytes; nothing that
// large is one (the coordinator's own trees allow a folder as much).
constexpr int64_t kMaxMessageBlobBytes = int64_t{4} << 20;
// Folders below an input root, and distinct folders in one tree.
constexpr int kMaxTreeDepth = 64;
constexpr int64_t kMaxTreeFolders = 100000;
// What a memory kill looks like to a REAPI client: a SIGKILL's exit code.
constexpr int kKilledExitCode = 128 + 9;

std::string Subject(const reapi::Digest& digest) {
  return absl::StrCat("blobs/", digest.hash(), "/", digest.size_bytes());
}

bool IsPathComponent(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string("/\0", 2)) == std::string::npos;
}

// Converts the REAPI folders of one tree into the store's, each once.
class TreeConverter {
 public:
  TreeConverter(CasStore& cas, const BuildLimits& limits, CasPin& pin)
      : cas_(cas), limits_(limits), pin_(pin) {}

  absl::StatusOr<Digest> Convert(const reapi::Digest& folder, int depth) {
    if (depth > kMaxTreeDepth) {
      return absl::InvalidArgumentError(absl::StrCat("the input root is more than ", kMaxTreeDepth,
                                                     " folders deep; a compile needs less"));
    }
    if (auto done = converted_.find(folder.hash()); done != converted_.end()) return done->second;
    if (static_cast<int64_t>(converted_.size()) >= kMaxTreeFolders) {
      return absl::InvalidArgumentError(
          absl::StrCat("the input root has more than ", kMaxTreeFolders, " distinct folders"));
    }
    reapi::Directory theirs;
    RETURN_IF_ERROR(ReadMessageBlob(cas_, folder, "a folder of the input root", theirs));
    ASSIGN_OR_RETURN(v1::Directory ours, ConvertFolder(theirs, depth));
    ASSIGN_OR_RETURN(Digest stored, cas_.PutBytes(ours.SerializeAsString()));
    pin_.Add({stored});
    converted_[folder.hash()] = stored;
    return stored;
  }

 private:
  absl::StatusOr<v1::Directory> ConvertFolder(const reapi::Directory& theirs, int depth) {
    if (theirs.symlinks_size() > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the input root holds a symlink ('", absl::CHexEscape(theirs.symlinks(0).name()),
          "'); distcc-cuda runs compiles on plain files only: have the build tool resolve "
          "symlinks in inputs"));
    }
    std::set<std::string> names;
    auto check_name = [&names](const std::string& name) -> absl::Status {
      if (!IsPathComponent(name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a name in the input root, '", absl::CHexEscape(name), "', is not one path component"));
      }
      if (!names.insert(name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("the input root names '", absl::CHexEscape(name), "' twice in a folder"));
      }
      return absl::OkStatus();
    };
    v1::Directory ours;
    for (const reapi::FileNode& file : theirs.files()) {
      RETURN_IF_ERROR(check_name(file.name()));
      if (++files_ > limits_.max_inputs_per_unit) {
        return absl::InvalidArgumentError(
            absl::StrCat("the input root has more than ", limits_.max_inputs_per_unit,
                         " files (--max-inputs-per-unit of distcc-cuda-coordinator)"));
      }
      RETURN_IF_ERROR(ValidateDigest(FromReapi(file.digest())));
      v1::FileNode* node = ours.add_files();
      node->set_name(file.name());
      *node->mutable_digest() = ToProto(FromReapi(file.digest()));
      node->set_is_executable(file.is_executable());
    }
    for (const reapi::DirectoryNode& child : theirs.directories()) {
      RETURN_IF_ERROR(check_name(child.name()));
      ASSIGN_OR_RETURN(Digest converted, Convert(child.digest(), depth + 1));
      v1::DirectoryNode* node = ours.add_directories();
      node->set_name(child.name());
      *node->mutable_digest() = ToProto(converted);
    }
    return ours;
  }

  CasStore& cas_;
  const BuildLimits& limits_;
  CasPin& pin_;
  std::map<std::string, Digest> converted_;  // by REAPI folder hash
  int64_t files_ = 0;
};

// The unit's name: its output's file name, in the letters a unit name has.
std::string UnitNameOf(const std::string& output) {
  std::string name = output.substr(output.rfind('/') + 1);
  for (char& c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && !absl::StrContains("_.+@=-", c)) {
      c = '_';
    }
  }
  if (name.empty() || name[0] == '.') name = "action" + name;
  return name.substr(0, 200);
}

absl::StatusOr<v1::UnitCompiler> CompilerOf(const std::string& argv0) {
  const std::string program = argv0.substr(argv0.rfind('/') + 1);
  if (program == "nvcc") return v1::UNIT_COMPILER_NVCC;
  if (program == "g++" || program == "c++") return v1::UNIT_COMPILER_HOST_CXX;
  return absl::InvalidArgumentError(absl::StrCat(
      "the action runs '", absl::CHexEscape(argv0.substr(0, 200)),
      "': distcc-cuda runs only nvcc and the host C++ compiler (g++, c++) of its workers' "
      "toolchain; run other actions on another executor (Bazel: --strategy=MNEMONIC=local)"));
}

std::string Describe(const v1::ToolchainFingerprint& toolchain) {
  return absl::StrCat("nvcc ", toolchain.nvcc_release(), " (", toolchain.digest().substr(0, 12),
                      ")");
}

}  // namespace

Digest FromReapi(const reapi::Digest& digest) { return Digest{digest.hash(), digest.size_bytes()}; }

reapi::Digest ToReapi(const Digest& digest) {
  reapi::Digest out;
  out.set_hash(digest.hash);
  out.set_size_bytes(digest.size_bytes);
  return out;
}

absl::Status ReadMessageBlob(const CasStore& cas, const reapi::Digest& digest,
                             absl::string_view what, google::protobuf::Message& message) {
  RETURN_IF_ERROR(
      Annotate(ValidateDigest(FromReapi(digest)), absl::StrCat("the digest of ", what)));
  if (digest.size_bytes() > kMaxMessageBlobBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", digest.size_bytes(),
                                                   " bytes; the most one may be is ",
                                                   kMaxMessageBlobBytes));
  }
  absl::StatusOr<std::string> bytes = cas.Get(FromReapi(digest));
  if (absl::IsNotFound(bytes.status())) {
    return MissingBlobsError(absl::StrCat("the store lacks ", what, " (", Subject(digest),
                                          "): upload it and execute again"),
                             {Subject(digest)});
  }
  if (!bytes.ok()) return bytes.status();
  return ParseRequest(*bytes, nullptr, absl::StrCat(what, " (", Subject(digest), ")"), message);
}

absl::StatusOr<Digest> ConvertInputRoot(CasStore& cas, const reapi::Digest& root,
                                        const BuildLimits& limits, CasPin& pin) {
  TreeConverter converter(cas, limits, pin);
  return converter.Convert(root, 0);
}

absl::StatusOr<std::optional<int64_t>> MemoryHint(const reapi::Platform& platform) {
  for (const reapi::Platform::Property& property : platform.properties()) {
    for (const char* name : kMemoryProperties) {
      if (property.name() != name) continue;
      absl::StatusOr<int64_t> bytes = ParseByteSize(property.value());
      if (!bytes.ok() || *bytes <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("the platform property '", name, "' is '",
                         absl::CHexEscape(property.value().substr(0, 80)),
                         "', not a memory size such as 6GiB or 512M"));
      }
      return *bytes;
    }
  }
  return std::nullopt;
}

absl::StatusOr<v1::ToolchainFingerprint> ChooseToolchain(
    const reapi::Platform& platform, const std::vector<v1::ToolchainFingerprint>& served) {
  std::map<std::string, v1::ToolchainFingerprint> distinct;  // by digest
  for (const v1::ToolchainFingerprint& toolchain : served) distinct[toolchain.digest()] = toolchain;
  std::vector<std::string> names;
  for (const auto& [digest, toolchain] : distinct) names.push_back(Describe(toolchain));
  if (distinct.empty()) {
    return PreconditionError(
        "no distcc-cuda worker is connected to this coordinator, so no compile can run; start "
        "one (distcc-cuda-worker --coordinator ADDRESS) and execute again",
        kToolchainUnserved, {"toolchain"});
  }
  const reapi::Platform::Property* asked = nullptr;
  for (const reapi::Platform::Property& property : platform.properties()) {
    if (property.name() == kToolchainProperty) asked = &property;
  }
  if (asked == nullptr) {
    if (distinct.size() == 1) return distinct.begin()->second;
    return PreconditionError(
        absl::StrCat("the workers have ", distinct.size(), " toolchains (",
                     absl::StrJoin(names, ", "),
                     "); say which the action needs with the platform "
                     "property '",
                     kToolchainProperty,
                     "' (a digest's first 12 hex digits or an nvcc release; Bazel: "
                     "--remote_default_exec_properties=toolchain=VALUE)"),
        kToolchainUnserved, {"toolchain"});
  }
  const std::string& value = asked->value();
  for (const auto& [digest, toolchain] : distinct) {
    bool by_digest = value.size() >= 12 && absl::StartsWith(digest, value);
    if (by_digest || value == toolchain.nvcc_release()) return toolchain;
  }
  return PreconditionError(
      absl::StrCat("no connected worker has the toolchain '", absl::CHexEscape(value.substr(0, 80)),
                   "' that the action asks for; the workers have ", absl::StrJoin(names, ", ")),
      kToolchainUnserved, {"toolchain"});
}

absl::StatusOr<v1::SubmitBuildRequest> UnitBuildOf(const reapi::Command& command,
                                                   const Digest& input_root,
                                                   const v1::ToolchainFingerprint& toolchain) {
  if (command.arguments_size() == 0) {
    return absl::InvalidArgumentError("the action's command has no arguments");
  }
  ASSIGN_OR_RETURN(v1::UnitCompiler compiler, CompilerOf(command.arguments(0)));
  if (command.output_directories_size() > 0) {
    return absl::InvalidArgumentError(
        "the action declares output directories; a compile's one output is its -o file");
  }
  const auto& outputs =
      command.output_paths_size() > 0 ? command.output_paths() : command.output_files();
  if (outputs.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the action declares ", outputs.size(),
                     " outputs; a compile that distcc-cuda runs has exactly one, its -o file"));
  }
  v1::SubmitBuildRequest request;
  v1::CompileUnit* unit = request.add_units();
  unit->set_name(UnitNameOf(outputs[0]));
  unit->mutable_arguments()->CopyFrom({command.arguments().begin() + 1, command.arguments().end()});
  unit->set_working_directory(command.working_directory());
  unit->add_output_paths(outputs[0]);
  *unit->mutable_input_root() = ToProto(input_root);
  unit->set_compiler(compiler);
  request.set_build_name(unit->name());
  *request.mutable_toolchain() = toolchain;
  // The parts of a split unit are merged by distcc-cuda's client, which a
  // REAPI client is not.
  request.set_architecture_split(v1::ARCHITECTURE_SPLIT_NEVER);
  return request;
}

absl::StatusOr<reapi::ActionResult> ActionResultOf(const v1::TaskResult& result,
                                                   const v1::CompileUnit& unit, CasStore& cas) {
  reapi::ActionResult out;
  for (const v1::OutputFile& output : result.outputs()) {
    reapi::OutputFile* file = out.add_output_files();
    file->set_path(output.path());
    *file->mutable_digest() = ToReapi(FromProto(output.digest()));
  }
  std::string stderr_text = result.stderr_text();
  if (result.outcome() == v1::TASK_KILLED_FOR_MEMORY) {
    out.set_exit_code(kKilledExitCode);
    absl::StrAppend(&stderr_text, "distcc-cuda: ", unit.name(),
                    " was killed for memory: ", result.error_message(), "\n");
  } else {
    out.set_exit_code(result.exit_code());
  }
  if (!result.stdout_text().empty()) {
    ASSIGN_OR_RETURN(Digest stored, cas.PutBytes(result.stdout_text()));
    *out.mutable_stdout_digest() = ToReapi(stored);
  }
  if (!stderr_text.empty()) {
    ASSIGN_OR_RETURN(Digest stored, cas.PutBytes(stderr_text));
    *out.mutable_stderr_digest() = ToReapi(stored);
  }
  out.mutable_execution_metadata()->set_worker(result.worker_name());
  return out;
}

absl::StatusOr<reapi::ExecuteResponse> ExecuteResponseOf(const v1::TaskResult& result,
                                                         const v1::CompileUnit& unit, bool cached,
                                                         CasStore& cas) {
  reapi::ExecuteResponse response;
  response.set_cached_result(cached);
  absl::StatusCode code = absl::StatusCode::kOk;
  switch (result.outcome()) {
    case v1::TASK_COMPLETED:
    case v1::TASK_KILLED_FOR_MEMORY:
      break;
    case v1::TASK_REJECTED:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case v1::TASK_TIMED_OUT:
      code = absl::StatusCode::kDeadlineExceeded;
      break;
    case v1::TASK_CANCELLED:
      code = absl::StatusCode::kCancelled;
      break;
    default:
      code = absl::StatusCode::kInternal;
  }
  if (code != absl::StatusCode::kOk) {
    response.mutable_status()->set_code(static_cast<int>(code));
    response.mutable_status()->set_message(
        absl::StrCat(unit.name(), " did not run to the end: ", result.error_message()));
    return response;
  }
  ASSIGN_OR_RETURN(*response.mutable_result(), ActionResultOf(result, unit, cas));
  if (result.outcome() == v1::TASK_KILLED_FOR_MEMORY) response.set_message(result.error_message());
  return response;
}

}  // namespace distcc_cuda::coordinator
