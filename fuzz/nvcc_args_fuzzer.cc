// SPDX-License-Identifier: Apache-2.0
// The nvcc argument model: ParseNvccCommand, ValidateCompileUnit,
// SplitByArchitecture and GencodeFlags on one argument per input line.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/nvcc/nvcc_args.h"
#include "distcc_cuda/v1/build.pb.h"
#include "fuzz/fuzz_check.h"

namespace distcc_cuda::fuzz {
namespace {

// One argument per line keeps the seeds readable; an argument holding a
// newline is not worth unreadable seeds.
std::vector<std::string> Arguments(const std::string& text) {
  if (text.empty()) return {};
  std::vector<std::string> arguments = absl::StrSplit(text, '\n');
  if (text.back() == '\n') arguments.pop_back();
  return arguments;
}

// The whole command rendered back: flags, -c, sources, -o.
std::vector<std::string> Render(const NvccCommand& command) {
  std::vector<std::string> out = command.FlagArguments();
  if (command.compile_only) out.push_back("-c");
  out.insert(out.end(), command.sources.begin(), command.sources.end());
  if (!command.output.empty()) out.insert(out.end(), {"-o", command.output});
  return out;
}

void CheckRendersBack(const NvccCommand& command) {
  const std::vector<std::string> flags = command.FlagArguments();
  absl::StatusOr<NvccCommand> again = ParseNvccCommand(flags);
  Check(again.ok(), "rendered flags do not parse again");
  Check(again->FlagArguments() == flags, "rendered flags parse to other flags");
  Check(again->sources.empty() && again->output.empty() && !again->compile_only,
        "rendered flags parse to sources, an output or -c");

  absl::StatusOr<NvccCommand> whole = ParseNvccCommand(Render(command));
  Check(whole.ok(), "rendered command does not parse again");
  Check(whole->FlagArguments() == flags, "rendered command parses to other flags");
  Check(whole->sources == command.sources, "rendered command parses to other sources");
  Check(whole->output == command.output, "rendered command parses to another output");
  Check(whole->compile_only == command.compile_only, "rendered command loses or gains -c");
}

constexpr char kWorkspaceRoot[] = "/workspace";
constexpr char kWorkspaceFolder[] = "/workspace/";

// `path` with "." and ".." resolved by hand; "" if a relative path climbs
// out. An oracle for the model's own std::filesystem normalisation.
std::string Normal(const std::string& path) {
  const bool absolute = !path.empty() && path[0] == '/';
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == ".") continue;
    if (part != "..") {
      parts.push_back(std::string(part));
    } else if (!parts.empty()) {
      parts.pop_back();
    } else if (!absolute) {
      return "";
    }
  }
  return (absolute ? "/" : "") + absl::StrJoin(parts, "/");
}

// `folder` ends with '/'; so does each of SystemIncludePrefixes() but
// "/usr/local/cuda-", which the model also takes as a prefix.
bool Under(const std::string& path, const std::string& folder) {
  return absl::StartsWith(path + "/", folder);
}

// A unit ValidateCompileUnit accepts must keep every path it names inside the
// workspace (or, for include folders, the system's), whatever the model's
// own path handling thinks.
void CheckCompileUnit(const std::vector<std::string>& arguments,
                      const std::string& working_directory) {
  absl::StatusOr<NvccCommand> command = ParseNvccCommand(arguments);
  v1::CompileUnit unit;
  unit.set_name("fuzz_unit");
  unit.set_workspace_root(kWorkspaceRoot);
  unit.set_working_directory(working_directory);
  for (const std::string& argument : arguments) unit.add_arguments(argument);
  if (command.ok()) {
    unit.add_output_paths(command->output);
    // Inputs are named from the workspace root, as the client sends them.
    const std::string from = working_directory.empty() ? "" : working_directory + "/";
    for (const std::string& source : command->sources) {
      const std::string input = Normal(from + source);
      if (!input.empty() && input[0] != '/') unit.add_inputs()->set_path(input);
    }
  }
  if (!ValidateCompileUnit(unit).ok()) return;

  Check(command.ok(), "a unit whose arguments do not parse was accepted");
  Check(!command->dependency_flags_dropped, "a unit with dependency flags was accepted");
  Check(command->sources.size() == 1, "a unit without exactly one source was accepted");
  const std::string cwd = absl::StrCat(kWorkspaceRoot, "/", working_directory);
  auto inside = [&](const std::string& relative) {
    const std::string path = Normal(cwd + "/" + relative);
    return !relative.empty() && relative[0] != '/' && Under(path, kWorkspaceFolder);
  };
  Check(Under(Normal(cwd), kWorkspaceFolder), "a working directory outside the workspace");
  Check(inside(command->output), "an output outside the workspace was accepted");
  Check(inside(command->sources[0]), "a source outside the workspace was accepted");
  static const std::vector<std::string>* system = new auto(SystemIncludePrefixes());
  for (const NvccArgument& flag : command->flags) {
    // Lists ("-Ia,b") are the model's to split; single paths are checked here.
    if (flag.kind != NvccValueKind::kInputPath || flag.value.empty() ||
        flag.value.find(',') != std::string::npos) {
      continue;
    }
    if (flag.value[0] != '/') {
      Check(inside(flag.value), "a relative include path outside the workspace was accepted");
      continue;
    }
    const std::string path = Normal(flag.value);
    Check(Under(path, kWorkspaceFolder) ||
              std::any_of(system->begin(), system->end(),
                          [&](const std::string& prefix) { return Under(path, prefix); }),
          "an absolute include path outside the workspace and the system's was accepted");
  }
}

void CheckSplit(const std::vector<std::string>& arguments) {
  absl::StatusOr<std::vector<ArchitecturePart>> parts = SplitByArchitecture(arguments);
  if (!parts.ok()) return;
  Check(parts->size() >= 2, "a split into fewer than two parts");
  for (const ArchitecturePart& part : *parts) {
    absl::StatusOr<NvccCommand> command = ParseNvccCommand(part.arguments);
    Check(command.ok(), "a part's arguments do not parse");
    Check(command->compile_only, "a part is not a compile (-c)");
    Check(command->output == part.output, "a part writes another output than it says");
    int gencode = 0;
    for (const NvccArgument& flag : command->flags) {
      gencode += flag.option == "-gencode" || flag.option == "--generate-code";
    }
    Check(gencode == 1, "a part keeps other than one -gencode target");
    Check(!SplitByArchitecture(part.arguments).ok(), "a part splits again");
  }
}

void CheckGencodeFlags(const std::vector<std::string>& archs) {
  absl::StatusOr<std::vector<std::string>> flags = GencodeFlags(archs);
  if (!flags.ok()) return;
  Check(flags->size() == 2 * archs.size(), "not one -gencode flag per architecture");
  absl::StatusOr<NvccCommand> command = ParseNvccCommand(*flags);
  Check(command.ok(), "-gencode flags made from architectures do not parse");
  Check(command->FlagArguments() == *flags, "-gencode flags parse to other flags");
}

void TestOneInput(const std::string& text) {
  const std::vector<std::string> arguments = Arguments(text);
  absl::StatusOr<NvccCommand> command = ParseNvccCommand(arguments);
  if (command.ok()) CheckRendersBack(*command);
  CheckCompileUnit(arguments, "");
  CheckCompileUnit(arguments, "build/kernels");
  CheckSplit(arguments);
  CheckGencodeFlags(arguments);
}

}  // namespace
}  // namespace distcc_cuda::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  distcc_cuda::fuzz::TestOneInput(distcc_cuda::fuzz::InputText(data, size));
  return 0;
}
