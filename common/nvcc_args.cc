// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc_args.h"

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/files.h"

namespace distcc_cuda {
namespace {

struct OptionSpec {
  NvccValueKind kind;
  bool allows_joined;    // -Ifoo, -DNAME, -O3: single-dash short options
  const char* why = "";  // for kForbidden
};

// nvcc options with a value or a special meaning. Options not listed here are
// switches; nvcc spells most options both short and long.
const std::map<std::string, OptionSpec>& OptionTable() {
  static const auto* table = new std::map<std::string, OptionSpec>{
      {"-o", {NvccValueKind::kOutputPath, false}},
      {"--output-file", {NvccValueKind::kOutputPath, false}},
      {"-I", {NvccValueKind::kInputPath, true}},
      {"--include-path", {NvccValueKind::kInputPath, false}},
      {"-isystem", {NvccValueKind::kInputPath, true}},
      {"--system-include", {NvccValueKind::kInputPath, false}},
      {"-include", {NvccValueKind::kInputPath, false}},
      {"--pre-include", {NvccValueKind::kInputPath, false}},
      {"-D", {NvccValueKind::kText, true}},
      {"--define-macro", {NvccValueKind::kText, false}},
      {"-U", {NvccValueKind::kText, true}},
      {"--undefine-macro", {NvccValueKind::kText, false}},
      {"-O", {NvccValueKind::kText, true}},
      {"--optimize", {NvccValueKind::kText, false}},
      {"-std", {NvccValueKind::kText, false}},
      {"--std", {NvccValueKind::kText, false}},
      {"-x", {NvccValueKind::kText, false}},
      {"--x", {NvccValueKind::kText, false}},
      {"-gencode", {NvccValueKind::kText, false}},
      {"--generate-code", {NvccValueKind::kText, false}},
      {"-arch", {NvccValueKind::kText, false}},
      {"--gpu-architecture", {NvccValueKind::kText, false}},
      {"-code", {NvccValueKind::kText, false}},
      {"--gpu-code", {NvccValueKind::kText, false}},
      {"-Xcompiler", {NvccValueKind::kText, false}},
      {"--compiler-options", {NvccValueKind::kText, false}},
      {"-Xptxas", {NvccValueKind::kText, false}},
      {"--ptxas-options", {NvccValueKind::kText, false}},
      {"-Xcudafe", {NvccValueKind::kText, false}},
      {"-Xfatbin", {NvccValueKind::kText, false}},
      {"-Xnvlink", {NvccValueKind::kText, false}},
      {"-Xlinker", {NvccValueKind::kText, false}},
      {"-t", {NvccValueKind::kText, false}},
      {"--threads", {NvccValueKind::kText, false}},
      {"--split-compile", {NvccValueKind::kText, false}},
      {"-split-compile", {NvccValueKind::kText, false}},
      {"-maxrregcount", {NvccValueKind::kText, false}},
      {"--maxrregcount", {NvccValueKind::kText, false}},
      {"-rdc", {NvccValueKind::kText, false}},
      {"--relocatable-device-code", {NvccValueKind::kText, false}},
      {"--default-stream", {NvccValueKind::kText, false}},
      {"-default-stream", {NvccValueKind::kText, false}},
      {"-diag-suppress", {NvccValueKind::kText, false}},
      {"--diag-suppress", {NvccValueKind::kText, false}},
      {"--diag-error", {NvccValueKind::kText, false}},
      {"--diag-warn", {NvccValueKind::kText, false}},
      {"-Werror", {NvccValueKind::kText, false}},
      {"--Werror", {NvccValueKind::kText, false}},
      {"-compress-mode", {NvccValueKind::kText, false}},
      {"--compress-mode", {NvccValueKind::kText, false}},
      {"-M", {NvccValueKind::kDependency, false}},
      {"-MM", {NvccValueKind::kDependency, false}},
      {"-MD", {NvccValueKind::kDependency, false}},
      {"-MMD", {NvccValueKind::kDependency, false}},
      {"-MP", {NvccValueKind::kDependency, false}},
      {"-MF", {NvccValueKind::kDependency, false}},
      {"-MT", {NvccValueKind::kDependency, false}},
      {"--generate-dependencies", {NvccValueKind::kDependency, false}},
      {"--generate-nonsystem-dependencies", {NvccValueKind::kDependency, false}},
      {"--generate-dependencies-with-compile", {NvccValueKind::kDependency, false}},
      {"--generate-nonsystem-dependencies-with-compile", {NvccValueKind::kDependency, false}},
      {"--dependency-output", {NvccValueKind::kDependency, false}},
      {"--dependency-target-name", {NvccValueKind::kDependency, false}},
      {"-ccbin",
       {NvccValueKind::kForbidden, false,
        "substitutes the host compiler; workers use their pinned one"}},
      {"--compiler-bindir",
       {NvccValueKind::kForbidden, false,
        "substitutes the host compiler; workers use their pinned one"}},
      {"-optf",
       {NvccValueKind::kForbidden, false,
        "reads options from an unchecked file; expand it into the command"}},
      {"--options-file",
       {NvccValueKind::kForbidden, false,
        "reads options from an unchecked file; expand it into the command"}},
      {"-odir", {NvccValueKind::kForbidden, false, "writes outside the declared output"}},
      {"--output-directory",
       {NvccValueKind::kForbidden, false, "writes outside the declared output"}},
      {"--keep-dir", {NvccValueKind::kForbidden, false, "writes intermediate files elsewhere"}},
      {"-keep-dir", {NvccValueKind::kForbidden, false, "writes intermediate files elsewhere"}},
      {"-run", {NvccValueKind::kForbidden, false, "runs the compiled program"}},
      {"--run", {NvccValueKind::kForbidden, false, "runs the compiled program"}},
  };
  return *table;
}

// Dependency options that take a value as the next argument.
bool DependencyTakesValue(const std::string& option) {
  return option == "-MF" || option == "-MT" || option == "--dependency-output" ||
         option == "--dependency-target-name";
}

bool ValueSeparate(const OptionSpec& spec, const std::string& option) {
  switch (spec.kind) {
    case NvccValueKind::kNone:
      return false;
    case NvccValueKind::kDependency:
      return DependencyTakesValue(option);
    default:
      return true;
  }
}

// Host compiler flags that would load code or write elsewhere.
absl::Status CheckHostCompilerFlags(const std::string& value) {
  for (absl::string_view flag : absl::StrSplit(value, ',')) {
    for (const char* bad :
         {"-fplugin", "-B", "-wrapper", "-specs", "--specs", "-o", "-save-temps", "@"}) {
      if (absl::StartsWith(flag, bad)) {
        return absl::InvalidArgumentError(
            absl::StrCat("host compiler flag '", flag,
                         "' is not allowed on a worker: it loads code or writes files "
                         "outside the sandbox"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> NvccArgument::Render() const {
  switch (form) {
    case Form::kPositional:
      return {value};
    case Form::kJoined:
      return {option + value};
    case Form::kEquals:
      return {option + "=" + value};
    case Form::kSeparate:
      return value.empty() && kind == NvccValueKind::kNone
                 ? std::vector<std::string>{option}
                 : std::vector<std::string>{option, value};
  }
  return {};
}

std::vector<std::string> NvccCommand::FlagArguments() const {
  std::vector<std::string> out;
  for (const NvccArgument& flag : flags) {
    for (std::string& piece : flag.Render()) out.push_back(std::move(piece));
  }
  return out;
}

absl::StatusOr<NvccCommand> ParseNvccCommand(const std::vector<std::string>& arguments) {
  const auto& table = OptionTable();
  NvccCommand command;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const std::string& arg = arguments[i];
    if (arg.empty() || arg[0] != '-') {
      if (absl::StartsWith(arg, "@")) {
        return absl::InvalidArgumentError(
            absl::StrCat("response file '", arg, "' is not supported; expand it into the command"));
      }
      command.sources.push_back(arg);
      continue;
    }
    if (arg == "-c" || arg == "--compile") {
      command.compile_only = true;
      continue;
    }
    NvccArgument parsed;
    parsed.form = NvccArgument::Form::kSeparate;
    parsed.option = arg;
    const OptionSpec* spec = nullptr;
    size_t equals = arg.find('=');
    if (auto it = table.find(arg); it != table.end()) {
      spec = &it->second;
    } else if (equals != std::string::npos && table.count(arg.substr(0, equals))) {
      parsed.option = arg.substr(0, equals);
      parsed.value = arg.substr(equals + 1);
      parsed.form = NvccArgument::Form::kEquals;
      spec = &table.at(parsed.option);
    } else {
      // A short option with its value joined on: -Ifoo, -DX=1, -O3.
      for (const auto& [name, candidate] : table) {
        if (candidate.allows_joined && absl::StartsWith(arg, name) && arg.size() > name.size()) {
          parsed.option = name;
          parsed.value = arg.substr(name.size());
          parsed.form = NvccArgument::Form::kJoined;
          spec = &candidate;
          break;
        }
      }
    }
    if (spec == nullptr) {
      // An unlisted switch (-G, -lineinfo, --use_fast_math, -w...), or an
      // unlisted option written with '=' (kept whole).
      parsed.kind = NvccValueKind::kNone;
      command.flags.push_back(parsed);
      continue;
    }
    parsed.kind = spec->kind;
    if (parsed.form == NvccArgument::Form::kSeparate && ValueSeparate(*spec, parsed.option)) {
      if (i + 1 >= arguments.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("nvcc option ", arg, " is missing its value"));
      }
      parsed.value = arguments[++i];
    }
    switch (spec->kind) {
      case NvccValueKind::kForbidden:
        return absl::InvalidArgumentError(
            absl::StrCat("nvcc option ", parsed.option, " is not allowed: ", spec->why));
      case NvccValueKind::kDependency:
        command.dependency_flags_dropped = true;
        break;
      case NvccValueKind::kOutputPath:
        if (!command.output.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("more than one output file: ", command.output, " and ", parsed.value));
        }
        command.output = parsed.value;
        break;
      default:
        command.flags.push_back(parsed);
    }
  }
  return command;
}

absl::Status ValidateSandboxedArguments(const std::vector<std::string>& arguments,
                                        const std::string& working_directory) {
  absl::StatusOr<NvccCommand> command = ParseNvccCommand(arguments);
  if (!command.ok()) return command.status();
  if (command->dependency_flags_dropped) {
    return absl::InvalidArgumentError("dependency output options are not run on workers");
  }
  auto inside = [&](const std::string& path, const char* what) {
    std::string from_root = working_directory.empty() || path.empty() || path[0] == '/'
                                ? path
                                : working_directory + "/" + path;
    if (!StaysInside(from_root)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " '", path,
                                                     "' leaves the sandbox; use a path relative to "
                                                     "the unit's working directory"));
    }
    return absl::OkStatus();
  };
  if (command->output.empty()) {
    return absl::InvalidArgumentError("the command names no output file (-o)");
  }
  if (absl::Status s = inside(command->output, "output"); !s.ok()) return s;
  for (const std::string& source : command->sources) {
    if (absl::Status s = inside(source, "source"); !s.ok()) return s;
  }
  for (const NvccArgument& flag : command->flags) {
    if (flag.kind == NvccValueKind::kInputPath && !flag.value.empty() && flag.value[0] != '/') {
      if (absl::Status s = inside(flag.value, flag.option.c_str()); !s.ok()) {
        return s;
      }
    }
    if (flag.option == "-Xcompiler" || flag.option == "--compiler-options") {
      if (absl::Status s = CheckHostCompilerFlags(flag.value); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateCompileUnit(const v1::CompileUnit& unit) {
  std::string where = absl::StrCat("unit ", unit.name());
  if (unit.name().empty()) return absl::InvalidArgumentError("a compile unit has no name");
  const std::string& cwd = unit.working_directory();
  if (!cwd.empty() && !StaysInside(cwd)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": working directory '", cwd, "' leaves the workspace"));
  }
  absl::Status arguments =
      ValidateSandboxedArguments({unit.arguments().begin(), unit.arguments().end()}, cwd);
  if (!arguments.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", arguments.message()));
  }
  if (unit.output_paths().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " declares no output"));
  }
  for (const std::string& output : unit.output_paths()) {
    if (output.empty() || !StaysInside(cwd.empty() ? output : cwd + "/" + output)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": output '", output, "' leaves the sandbox"));
    }
  }
  for (const auto& input : unit.inputs()) {
    if (input.path().empty() || !StaysInside(input.path())) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": input '", input.path(), "' leaves the workspace"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> GencodeFlags(const std::vector<std::string>& archs) {
  std::vector<std::string> flags;
  for (const std::string& arch : archs) {
    std::string number;
    bool ptx = false;
    if (absl::StartsWith(arch, "sm_")) {
      number = arch.substr(3);
    } else if (absl::StartsWith(arch, "compute_")) {
      number = arch.substr(8);
      ptx = true;
    }
    // Accept family/arch-specific suffixes such as sm_100a and sm_100f.
    std::string digits = number;
    while (!digits.empty() && std::isalpha(static_cast<unsigned char>(digits.back()))) {
      digits.pop_back();
    }
    if (digits.empty() ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return absl::InvalidArgumentError(
          absl::StrCat("architecture '", arch, "' is not of the form sm_100 or compute_100"));
    }
    flags.push_back("-gencode");
    flags.push_back(ptx ? absl::StrCat("arch=compute_", number, ",code=compute_", number)
                        : absl::StrCat("arch=compute_", number, ",code=sm_", number));
  }
  return flags;
}

}  // namespace distcc_cuda
