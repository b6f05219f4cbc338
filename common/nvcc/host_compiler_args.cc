// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/host_compiler_args.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/nvcc/forwarded_flags.h"

namespace distcc_cuda {
namespace {

// An option that takes a value, joined (-Iinc) or as the next argument.
struct ValueOption {
  const char* name;
  NvccValueKind kind;
};

// Longest names first, so that "-isystem" is not read as "-i" + "system".
constexpr ValueOption kValueOptions[] = {
    {"-idirafter", NvccValueKind::kInputPath},
    {"-isystem", NvccValueKind::kInputPath},
    {"-include", NvccValueKind::kInputPath},
    {"-imacros", NvccValueKind::kInputPath},
    {"-iquote", NvccValueKind::kInputPath},
    {"--param", NvccValueKind::kText},
    {"-MF", NvccValueKind::kDependency},
    {"-MT", NvccValueKind::kDependency},
    {"-MQ", NvccValueKind::kDependency},
    {"-I", NvccValueKind::kInputPath},
    {"-D", NvccValueKind::kText},
    {"-U", NvccValueKind::kText},
    {"-o", NvccValueKind::kOutputPath},
    {"-x", NvccValueKind::kText},
};

constexpr const char* kDependencySwitches[] = {"-M", "-MM", "-MD", "-MMD", "-MP"};

// Options refused with the reason, matched as the whole argument or, unless
// `whole`, its start ("-B/usr/bin", "--sysroot=/").
struct Refused {
  const char* prefix;
  const char* why;
  bool whole = false;
};
constexpr Refused kRefused[] = {
    {"-B", "replaces the compiler's own programs"},
    {"-specs", "rewrites the compiler driver's rules"},
    {"--specs", "rewrites the compiler driver's rules"},
    {"-wrapper", "runs another program around each of the compiler's"},
    {"--sysroot", "reads headers from a system root outside the workspace"},
    {"-isysroot", "reads headers from a system root outside the workspace"},
    {"-iprefix", "builds include paths that are not checked"},
    {"-iwithprefix", "builds include paths that are not checked"},
    {"-save-temps", "writes files beside the object"},
    {"-dump", "writes files beside the object"},
    {"-aux-info", "writes a file beside the object"},
    {"-Xpreprocessor", "passes options on to the preprocessor unchecked"},
    {"-Xassembler", "passes options on to the assembler unchecked"},
    {"-Xlinker", "passes options on to the linker unchecked"},
    {"-Xclang", "passes options on to the compiler's front end unchecked"},
    {"-E", "preprocesses: no object", true},
    {"-S", "makes assembly: no object", true},
    {"-fsyntax-only", "makes no object"},
    {"-MG", "takes missing headers for generated files"},
    {"-L", "is a link option"},
    {"-l", "is a link option"},
    {"-print", "is a query, not a compile"},
};

absl::Status RefuseHostOption(absl::string_view option, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("host compiler option ", option, " is not allowed: it ", why));
}

absl::Status CheckPath(absl::string_view option, absl::string_view path) {
  if (path.empty() || path[0] == '-' || path[0] == '@') {
    return absl::InvalidArgumentError(
        absl::StrCat("host compiler option ", option, " needs a path, not '", path, "'"));
  }
  return CheckShellInert(path, absl::StrCat("host compiler option ", option, " path"));
}

// Checks the value of one of kValueOptions.
absl::Status CheckValue(absl::string_view option, NvccValueKind kind, absl::string_view value) {
  if (kind == NvccValueKind::kInputPath || kind == NvccValueKind::kOutputPath ||
      kind == NvccValueKind::kDependency) {
    // A dependency target (-MT) is text in a make rule; it is only ever
    // written here, by the client's own scan.
    if (kind == NvccValueKind::kDependency && option != "-MF") return absl::OkStatus();
    return CheckPath(option, value);
  }
  if (option == "-x") {
    if (value == "c++" || value == "c") return absl::OkStatus();
    return RefuseHostOption(absl::StrCat("-x ", value), "is not C or C++");
  }
  if (option == "--param") return CheckHostCompilerFlag(option, absl::StrCat("--param=", value));
  // -D and -U: the same allowlist as a -Xcompiler piece, with the value's
  // quotes kept (no shell reads a worker's arguments).
  const size_t equals = value.find('=');
  if (!IsCIdentifier(value.substr(0, equals)) || (option == "-U" && equals != value.npos)) {
    return absl::InvalidArgumentError(
        absl::StrCat("host compiler option ", option, " '", value, "' is not NAME or NAME=VALUE"));
  }
  if (value.find_first_of(std::string("\n\r\0", 3)) != value.npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("host compiler option ", option, " has a control character in its value"));
  }
  return absl::OkStatus();
}

// The option of kValueOptions `argument` starts with, or nullptr.
const ValueOption* FindValueOption(const std::string& argument) {
  for (const ValueOption& option : kValueOptions) {
    if (absl::StartsWith(argument, option.name)) return &option;
  }
  return nullptr;
}

// Adds `argument` (at `i`, its value perhaps the next) to `command`.
absl::Status AddOption(const std::vector<std::string>& arguments, size_t& i, NvccCommand& command) {
  const std::string& argument = arguments[i];
  for (const Refused& refused : kRefused) {
    if (refused.whole ? argument == refused.prefix : absl::StartsWith(argument, refused.prefix)) {
      return RefuseHostOption(argument, refused.why);
    }
  }
  for (const char* name : kDependencySwitches) {
    if (argument != name) continue;
    command.dependency_flags_dropped = true;
    command.dependency_flags.push_back(
        {argument, "", NvccValueKind::kDependency, NvccArgument::Form::kSeparate});
    return absl::OkStatus();
  }
  const ValueOption* option = FindValueOption(argument);
  if (option == nullptr && absl::StartsWith(argument, "--")) {
    return RefuseHostOption(argument,
                            "is not in the host compiler's model (of long options, only --param)");
  }
  if (option == nullptr) {
    // -f, -W, -O, -g, -m, -std=, -pthread...: the -Xcompiler allowlist.
    RETURN_IF_ERROR(CheckHostCompilerFlag("host compiler option", argument));
    command.flags.push_back({argument, "", NvccValueKind::kNone, NvccArgument::Form::kSeparate});
    return absl::OkStatus();
  }
  NvccArgument parsed{option->name, "", option->kind, NvccArgument::Form::kJoined};
  if (argument.size() > parsed.option.size()) {
    parsed.value = argument.substr(parsed.option.size());
    if (parsed.option == "--param") {
      if (parsed.value[0] != '=') return RefuseHostOption(argument, "is not --param NAME=VALUE");
      parsed.value = parsed.value.substr(1);
      parsed.form = NvccArgument::Form::kEquals;
    }
  } else {
    if (i + 1 >= arguments.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("host compiler option ", argument, " is missing its value"));
    }
    parsed.value = arguments[++i];
    parsed.form = NvccArgument::Form::kSeparate;
  }
  RETURN_IF_ERROR(CheckValue(parsed.option, parsed.kind, parsed.value));
  if (parsed.kind == NvccValueKind::kDependency) {
    command.dependency_flags_dropped = true;
    command.dependency_flags.push_back(std::move(parsed));
  } else if (parsed.kind == NvccValueKind::kOutputPath) {
    if (!command.output.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("more than one output file: ", command.output, " and ", parsed.value));
    }
    command.output = parsed.value;
  } else {
    command.flags.push_back(std::move(parsed));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NvccCommand> ParseHostCompileCommand(const std::vector<std::string>& arguments) {
  NvccCommand command;
  command.host_compiler = true;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    if (argument.empty()) return absl::InvalidArgumentError("an argument of the command is empty");
    if (argument[0] == '@') {
      return absl::InvalidArgumentError(absl::StrCat(
          "response file '", argument, "' is not supported; expand it into the command"));
    }
    if (argument[0] != '-') {
      RETURN_IF_ERROR(CheckShellInert(argument, "source"));
      command.sources.push_back(argument);
      continue;
    }
    if (argument == "-c") {
      if (!command.compile_only) command.actions.push_back(argument);
      command.compile_only = true;
      continue;
    }
    RETURN_IF_ERROR(AddOption(arguments, i, command));
  }
  return command;
}

bool IsHostSource(absl::string_view path) {
  const std::string extension = std::filesystem::path(std::string(path)).extension().string();
  return extension == ".cpp" || extension == ".cc" || extension == ".cxx" || extension == ".c++" ||
         extension == ".C" || extension == ".c";
}

bool LooksLikeHostCompiler(absl::string_view word) {
  std::string name = std::filesystem::path(std::string(word)).filename().string();
  // A version suffix (g++-12, clang++-18), then a target prefix
  // (x86_64-linux-gnu-g++).
  size_t plus = name.rfind("++");
  if (plus == std::string::npos) return false;
  absl::string_view suffix = absl::string_view(name).substr(plus + 2);
  if (!suffix.empty() && (suffix[0] != '-' || suffix.size() == 1 ||
                          !std::all_of(suffix.begin() + 1, suffix.end(),
                                       [](char c) { return c >= '0' && c <= '9'; }))) {
    return false;
  }
  absl::string_view stem = absl::string_view(name).substr(0, plus + 2);
  for (absl::string_view compiler : {"c++", "g++", "clang++"}) {
    if (stem == compiler) return true;
    if (absl::EndsWith(stem, absl::StrCat("-", compiler)) &&
        absl::StrContains(stem.substr(0, stem.size() - compiler.size()), "linux")) {
      return true;
    }
  }
  return false;
}

}  // namespace distcc_cuda
