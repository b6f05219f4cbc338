// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc_args.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/files.h"
#include "common/status.h"

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

namespace {

// The targets of one -gencode value: "arch=compute_90,code=[sm_90,compute_90]"
// gives the virtual architecture number 90 and the label "sm_90+compute_90".
struct GencodeTarget {
  int virtual_arch = 0;
  std::string label;
  bool lto = false;
};

absl::StatusOr<GencodeTarget> ParseGencode(const std::string& value) {
  auto malformed = [&]() {
    return absl::InvalidArgumentError(absl::StrCat(
        "-gencode '", value, "' is not of the form arch=compute_90,code=sm_90 or code=[...]"));
  };
  if (!absl::StartsWith(value, "arch=")) return malformed();
  size_t comma = value.find(",code=");
  if (comma == std::string::npos) return malformed();
  std::string arch = value.substr(5, comma - 5);
  std::string code = value.substr(comma + 6);
  if (absl::StartsWith(code, "[") && absl::EndsWith(code, "]")) {
    code = code.substr(1, code.size() - 2);
  }
  if (!absl::StartsWith(arch, "compute_") || code.empty()) return malformed();
  std::string digits = arch.substr(8);
  while (!digits.empty() && std::isalpha(static_cast<unsigned char>(digits.back()))) {
    digits.pop_back();
  }
  GencodeTarget target;
  if (!absl::SimpleAtoi(digits, &target.virtual_arch) || target.virtual_arch <= 0) {
    return malformed();
  }
  std::vector<std::string> codes = absl::StrSplit(code, ',');
  for (const std::string& one : codes) {
    if (absl::StartsWith(one, "lto_")) target.lto = true;
  }
  target.label = absl::StrJoin(codes, "+");
  return target;
}

}  // namespace

absl::StatusOr<std::vector<ArchitecturePart>> SplitByArchitecture(
    const std::vector<std::string>& arguments) {
  ASSIGN_OR_RETURN(NvccCommand command, ParseNvccCommand(arguments));
  auto cannot = [](const std::string& why) { return absl::FailedPreconditionError(why); };
  if (!command.compile_only || command.output.empty()) {
    return cannot("only a compile to an object (-c ... -o FILE) can be split by architecture");
  }
  std::vector<size_t> gencode_flags;
  std::vector<GencodeTarget> targets;
  std::set<int> virtual_archs;
  for (size_t i = 0; i < command.flags.size(); ++i) {
    const NvccArgument& flag = command.flags[i];
    const std::string& o = flag.option;
    if (o == "-gencode" || o == "--generate-code") {
      // A value this model does not read is nvcc's to judge: the unit then
      // compiles whole rather than failing here.
      absl::StatusOr<GencodeTarget> parsed = ParseGencode(flag.value);
      if (!parsed.ok()) return cannot(std::string(parsed.status().message()));
      GencodeTarget target = *std::move(parsed);
      if (target.lto) return cannot("LTO targets (code=lto_*) are linked later, not merged");
      virtual_archs.insert(target.virtual_arch);
      targets.push_back(std::move(target));
      gencode_flags.push_back(i);
    } else if (o == "-arch" || o == "--gpu-architecture" || o == "-code" || o == "--gpu-code") {
      return cannot(absl::StrCat("targets named with ", o, "; only -gencode targets are split"));
    } else if (((o == "-rdc" || o == "--relocatable-device-code") && flag.value == "true") ||
               o == "-dc" || o == "--device-c" || o == "-dw" || o == "--device-w" || o == "-dlto" ||
               o == "--dlink-time-opt") {
      return cannot(absl::StrCat(o,
                                 ": relocatable or LTO device code is linked later, "
                                 "not merged"));
    } else if ((o == "-D" || o == "--define-macro" || o == "-U" || o == "--undefine-macro") &&
               absl::StartsWith(flag.value, "__CUDA_ARCH_LIST__")) {
      return cannot("the command sets __CUDA_ARCH_LIST__ itself");
    }
  }
  if (targets.size() < 2) {
    return cannot(absl::StrCat("the compile has ", targets.size(),
                               " -gencode target(s); splitting needs two or more"));
  }
  // What nvcc defines for the whole compile: the virtual architectures,
  // ascending, times ten. nvcc splits option values at commas unless escaped.
  std::vector<std::string> list;
  for (int arch : virtual_archs) list.push_back(absl::StrCat(arch * 10));
  std::string arch_list = absl::StrCat("-D__CUDA_ARCH_LIST__=", absl::StrJoin(list, "\\,"));
  std::string stem = absl::EndsWith(command.output, ".o")
                         ? command.output.substr(0, command.output.size() - 2)
                         : command.output;
  std::vector<ArchitecturePart> parts;
  for (size_t t = 0; t < targets.size(); ++t) {
    ArchitecturePart part;
    part.label = targets[t].label;
    part.output = absl::StrCat(stem, ".", part.label, ".o");
    for (size_t i = 0; i < command.flags.size(); ++i) {
      bool other_target =
          std::find(gencode_flags.begin(), gencode_flags.end(), i) != gencode_flags.end() &&
          i != gencode_flags[t];
      if (other_target) continue;
      for (std::string& argument : command.flags[i].Render()) {
        part.arguments.push_back(std::move(argument));
      }
    }
    part.arguments.push_back("-U__CUDA_ARCH_LIST__");
    part.arguments.push_back(arch_list);
    part.arguments.push_back("-c");
    part.arguments.insert(part.arguments.end(), command.sources.begin(), command.sources.end());
    part.arguments.push_back("-o");
    part.arguments.push_back(part.output);
    parts.push_back(std::move(part));
  }
  return parts;
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
