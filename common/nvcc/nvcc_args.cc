// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/nvcc_args.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/canonical_paths.h"
#include "common/nvcc/forwarded_flags.h"
#include "common/nvcc/host_compiler_args.h"

namespace distcc_cuda {
namespace {

absl::Status UnknownOption(const std::string& arg) {
  return absl::InvalidArgumentError(absl::StrCat(
      "nvcc option ", arg,
      " is not in distcc-cuda's argument model, so it is not sent to workers (only options "
      "known to be safe are; see common/nvcc/nvcc_options.cc); remove it, or file an issue if a "
      "real build needs it"));
}

// Where the value of `spec` comes from when written as `arg` with no '=' and
// not joined: a switch has none, others take the next argument.
bool ValueSeparate(const NvccOptionSpec& spec) {
  return spec.takes_value && spec.kind != NvccValueKind::kForbidden;
}

}  // namespace

absl::StatusOr<NvccCommand> ParseNvccCommand(const std::vector<std::string>& arguments) {
  NvccCommand command;
  command.flags.reserve(arguments.size());
  for (size_t i = 0; i < arguments.size(); ++i) {
    const std::string& arg = arguments[i];
    if (arg.empty() || arg[0] != '-') {
      if (absl::StartsWith(arg, "@")) {
        return absl::InvalidArgumentError(
            absl::StrCat("response file '", arg, "' is not supported; expand it into the command"));
      }
      if (arg.empty()) return absl::InvalidArgumentError("an argument of the command is empty");
      RETURN_IF_ERROR(CheckShellInert(arg, "source"));
      command.sources.push_back(arg);
      continue;
    }
    if (arg == "-c" || arg == "--compile") {
      // "-c -c" (PyTorch's cpp_extension writes it) is one compile.
      if (!command.compile_only) command.actions.push_back(arg);
      command.compile_only = true;
      continue;
    }
    NvccArgument parsed;
    parsed.form = NvccArgument::Form::kSeparate;
    parsed.option = arg;
    const NvccOptionSpec* spec = FindNvccOption(arg);
    size_t equals = arg.find('=');
    if (spec == nullptr && equals != std::string::npos) {
      parsed.option = arg.substr(0, equals);
      spec = FindNvccOption(parsed.option);
      if (spec != nullptr && spec->kind != NvccValueKind::kForbidden) {
        if (!spec->takes_value) {
          return absl::InvalidArgumentError(
              absl::StrCat("nvcc option ", parsed.option, " takes no value (in '", arg, "')"));
        }
        parsed.value = arg.substr(equals + 1);
        parsed.form = NvccArgument::Form::kEquals;
      }
    }
    if (spec == nullptr) {
      std::string name;
      spec = FindJoinedNvccOption(arg, &name);
      if (spec != nullptr) {
        parsed.option = name;
        parsed.value = arg.substr(name.size());
        parsed.form = NvccArgument::Form::kJoined;
      }
    }
    if (spec == nullptr) return UnknownOption(equals == std::string::npos ? arg : parsed.option);
    parsed.kind = spec->kind;
    if (spec->kind == NvccValueKind::kForbidden) {
      return absl::InvalidArgumentError(
          absl::StrCat("nvcc option ", parsed.option, " is not allowed: it ", spec->why));
    }
    if (parsed.form == NvccArgument::Form::kSeparate && ValueSeparate(*spec)) {
      if (i + 1 >= arguments.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("nvcc option ", arg, " is missing its value"));
      }
      parsed.value = arguments[++i];
    }
    if (spec->kind == NvccValueKind::kDependency) {
      command.dependency_flags_dropped = true;
      command.dependency_flags.push_back(std::move(parsed));
      continue;
    }
    if (spec->check != nullptr) RETURN_IF_ERROR(spec->check(parsed.option, parsed.value));
    if (spec->compile_action) command.actions.push_back(parsed.option);
    if (spec->kind == NvccValueKind::kOutputPath) {
      if (!command.output.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("more than one output file: ", command.output, " and ", parsed.value));
      }
      command.output = parsed.value;
      continue;
    }
    command.flags.push_back(std::move(parsed));
  }
  return command;
}

std::vector<std::string> SystemIncludePrefixes(const std::string& toolkit_root) {
  std::vector<std::string> prefixes = {"/usr/include/",
                                       "/usr/lib/",
                                       "/usr/lib64/",
                                       "/usr/local/include/",
                                       "/usr/local/cuda/",
                                       "/usr/local/cuda-",
                                       std::string(kCanonicalToolkitRoot) + "/"};
  if (!toolkit_root.empty()) {
    std::string root = toolkit_root;
    if (root.back() != '/') root += '/';
    prefixes.push_back(root);
  }
  return prefixes;
}

std::vector<std::string> ToolchainFolders(const std::string& toolkit_root) {
  std::vector<std::string> folders = {"/usr/bin/",
                                      "/usr/sbin/",
                                      "/usr/lib/",
                                      "/usr/lib32/",
                                      "/usr/lib64/",
                                      "/usr/libx32/",
                                      "/usr/libexec/",
                                      "/usr/include/",
                                      "/usr/share/",
                                      "/usr/local/include/",
                                      "/usr/local/cuda/",
                                      "/usr/local/cuda-",
                                      "/bin/",
                                      "/sbin/",
                                      "/lib/",
                                      "/lib32/",
                                      "/lib64/",
                                      "/libx32/",
                                      "/etc/",
                                      std::string(kCanonicalToolkitRoot) + "/"};
  if (!toolkit_root.empty()) {
    folders.push_back(toolkit_root.back() == '/' ? toolkit_root : toolkit_root + "/");
  }
  return folders;
}

bool IsHostPrivatePath(absl::string_view path) {
  const std::string normal = LexicallyNormal(path);
  for (absl::string_view folder :
       {"/etc", "/proc", "/sys", "/dev", "/boot", "/run", "/var/log", "/var/run", "/var/spool",
        "/var/mail", "/var/lib/private", "/var/lib/distcc-cuda", "/var/lib/distcc-cuda-worker"}) {
    if (absl::StartsWith(normal, folder) &&
        (normal.size() == folder.size() || normal[folder.size()] == '/')) {
      return true;
    }
  }
  // Tokens of common tools that keep them under ~/.config.
  for (const char* tool :
       {"/.config/gh/", "/.config/gcloud/", "/.config/hub", "/.config/distcc-cuda/"}) {
    if (normal.find(tool) != std::string::npos) return true;
  }
  static const absl::flat_hash_set<absl::string_view>* const kSecrets =
      new absl::flat_hash_set<absl::string_view>({".ssh",
                                                  ".gnupg",
                                                  ".aws",
                                                  ".azure",
                                                  ".kube",
                                                  ".docker",
                                                  ".netrc",
                                                  ".git-credentials",
                                                  ".pypirc",
                                                  ".password-store",
                                                  ".npmrc",
                                                  ".pgpass",
                                                  ".vault-token",
                                                  ".bash_history",
                                                  ".zsh_history",
                                                  ".python_history",
                                                  ".psql_history",
                                                  ".mysql_history",
                                                  "credentials",
                                                  "credentials.json",
                                                  "credentials.toml",
                                                  "id_rsa",
                                                  "id_ecdsa",
                                                  "id_ed25519"});
  for (absl::string_view part : absl::StrSplit(normal, '/')) {
    if (kSecrets->contains(part)) return true;
  }
  return false;
}

namespace {

// `path` as the compile sees it: absolute paths as they are, relative ones
// from the working directory, both normalised; "" if it climbs above the
// root (or above the working directory when the root is not known).
std::string Resolve(const std::string& path, const PathPolicy& policy) {
  if (!path.empty() && path[0] == '/') return LexicallyNormal(path);
  std::string from_root =
      policy.working_directory.empty() ? path : policy.working_directory + "/" + path;
  if (!StaysInside(from_root)) return "";
  return NormalJoin(policy.workspace_root.empty() ? "/" : policy.workspace_root, from_root);
}

// Whether `path` is `folder` or lies below it.
bool Under(absl::string_view path, absl::string_view folder) {
  if (!folder.empty() && folder.back() == '/') folder.remove_suffix(1);
  return absl::StartsWith(path, folder) &&
         (path.size() == folder.size() || path[folder.size()] == '/');
}

// Whether `path` matches one of `prefixes`: one ending in '/' is a folder
// (Under), another a plain string prefix ("/usr/local/cuda-" for every
// versioned toolkit folder).
bool UnderAny(const std::string& path, const std::vector<std::string>& prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& prefix) {
    return !prefix.empty() &&
           (prefix.back() == '/' ? Under(path, prefix) : absl::StartsWith(path, prefix));
  });
}

}  // namespace

namespace {

// ValidateCompileArguments of a parsed command. The paths its flags name
// are checked only when `checked` (may be null) does not hold them yet.
absl::Status CheckCompileCommand(const NvccCommand& command, const PathPolicy& policy,
                                 std::unordered_set<std::string>* checked) {
  if (command.dependency_flags_dropped) {
    return absl::InvalidArgumentError(
        "dependency output options (-M, -MD, -MF...) are not run on workers; the client writes "
        "dependency files itself");
  }
  if (command.actions.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a remote compile makes exactly one thing (-c, -dc, -cubin, -ptx or -fatbin), not ",
        command.actions.empty() ? "none" : absl::StrJoin(command.actions, " and ")));
  }
  if (command.sources.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a remote compile has exactly one source, not ", command.sources.size()));
  }
  if (command.output.empty()) {
    return absl::InvalidArgumentError("the command names no output file (-o)");
  }
  auto relative_inside = [&](const std::string& path, const char* what) -> absl::Status {
    std::string resolved = path.empty() || path[0] == '/' ? "" : Resolve(path, policy);
    if (resolved.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " '", path,
          "' leaves the sandbox; use a path relative to the unit's working directory that stays "
          "inside the workspace"));
    }
    if (IsHostPrivatePath(resolved)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", path, "' is in a private folder of the host (", resolved, ")"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(relative_inside(command.output, "output"));
  RETURN_IF_ERROR(relative_inside(command.sources[0], "source"));
  // What the path checks below depend on, length-prefixed.
  std::string key;
  if (checked != nullptr) {
    for (const std::string* part : {&policy.workspace_root, &policy.working_directory}) {
      absl::StrAppend(&key, part->size(), ":", *part);
    }
    for (const NvccArgument& flag : command.flags) {
      if (flag.kind != NvccValueKind::kInputPath) continue;
      absl::StrAppend(&key, flag.option.size(), ":", flag.option, flag.value.size(), ":",
                      flag.value);
    }
    if (checked->count(key) != 0) return absl::OkStatus();
  }
  for (const NvccArgument& flag : command.flags) {
    if (flag.kind != NvccValueKind::kInputPath) continue;
    for (const std::string& path : SplitNvccList(flag.value)) {
      std::string resolved = Resolve(path, policy);
      bool allowed = !resolved.empty() && !IsHostPrivatePath(resolved);
      if (allowed && path[0] == '/' && !policy.workspace_root.empty()) {
        // Known root: an absolute path must be inside it or a system folder.
        allowed =
            Under(resolved, policy.workspace_root) || UnderAny(resolved, policy.system_prefixes);
      }
      if (!allowed) {
        return absl::InvalidArgumentError(absl::StrCat(
            flag.option, " '", path,
            "' names a folder outside the workspace and the toolkit's and system's include "
            "folders; a compile may read only its inputs and the toolchain"));
      }
    }
  }
  if (checked != nullptr) checked->insert(std::move(key));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NvccCommand> ParseCompileArguments(v1::UnitCompiler compiler,
                                                  const std::vector<std::string>& arguments) {
  if (compiler == v1::UNIT_COMPILER_HOST_CXX) return ParseHostCompileCommand(arguments);
  if (compiler != v1::UNIT_COMPILER_NVCC) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown compiler ", static_cast<int>(compiler),
                     " (a client newer than this worker or coordinator?)"));
  }
  return ParseNvccCommand(arguments);
}

absl::Status ValidateCompileArguments(const std::vector<std::string>& arguments,
                                      const PathPolicy& policy) {
  ASSIGN_OR_RETURN(NvccCommand command, ParseNvccCommand(arguments));
  return CheckCompileCommand(command, policy, nullptr);
}

absl::Status ValidateUnitName(absl::string_view name) {
  bool ok = !name.empty() && name.size() <= 200 && name[0] != '.' &&
            std::all_of(name.begin(), name.end(), [](char c) {
              return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
                     c == '+' || c == '@' || c == '=' || c == '-';
            });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("unit name '",
                                                 absl::CHexEscape(name.substr(0, 200)),
                                                 "' is not a plain name (1 to 200 of letters, "
                                                 "digits and _ . + @ = -, not starting with '.')"));
}

namespace {

// ValidateInputPath, with the toolchain's and the system's folders given.
absl::Status CheckInputPath(const std::string& root, const std::string& path,
                            const std::vector<std::string>& reserved) {
  const std::string mount = root.empty() ? "/" : root;
  if (path.empty() || path[0] == '/' || !StaysInside(path) || !CheckShellInert(path, "").ok() ||
      LexicallyNormal(path) != path || IsHostPrivatePath(NormalJoin(mount, path))) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", absl::CHexEscape(path),
                     "' is not a plain normalised path inside the workspace"));
  }
  std::string absolute = NormalJoin(mount, path);
  if (UnderAny(absolute, reserved)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input ", absolute,
        " would lie among the toolchain's own files on the worker; the toolkit's and the "
        "system's files are never inputs"));
  }
  return absl::OkStatus();
}

std::vector<std::string> ReservedFolders(const std::vector<std::string>& system_prefixes) {
  std::vector<std::string> reserved = ToolchainFolders();
  reserved.insert(reserved.end(), system_prefixes.begin(), system_prefixes.end());
  return reserved;
}

}  // namespace

absl::Status ValidateInputPath(const std::string& workspace_root, const std::string& path,
                               const std::vector<std::string>& system_prefixes) {
  return CheckInputPath(workspace_root, path, ReservedFolders(system_prefixes));
}

absl::Status ValidateCompileUnit(const v1::CompileUnit& unit) {
  return ValidateCompileUnit(unit, SystemIncludePrefixes());
}

absl::Status ValidateCompileUnit(const v1::CompileUnit& unit,
                                 const std::vector<std::string>& system_prefixes) {
  return ValidateCompileUnit(unit, system_prefixes, nullptr);
}

absl::Status ValidateCompileUnit(const v1::CompileUnit& unit,
                                 const std::vector<std::string>& system_prefixes,
                                 CheckedUnitParts* checked, NvccCommand* parsed) {
  RETURN_IF_ERROR(ValidateUnitName(unit.name()));
  std::string where = absl::StrCat("unit ", unit.name());
  const std::string& root = unit.workspace_root();
  if (!root.empty() && (root[0] != '/' || LexicallyNormal(root) != root ||
                        (root.size() > 1 && root.back() == '/') || IsHostPrivatePath(root))) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": workspace root '", absl::CHexEscape(root),
                     "' is not a normalised absolute path outside the host's private folders"));
  }
  const std::string& cwd = unit.working_directory();
  if (!cwd.empty() && (!StaysInside(cwd) || !CheckShellInert(cwd, "").ok())) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": working directory '", absl::CHexEscape(cwd), "' leaves the workspace"));
  }
  PathPolicy policy{root, cwd, system_prefixes};
  absl::StatusOr<NvccCommand> parsed_here =
      ParseCompileArguments(unit.compiler(), {unit.arguments().begin(), unit.arguments().end()});
  absl::Status arguments = parsed_here.status();
  if (arguments.ok()) {
    arguments = CheckCompileCommand(*parsed_here, policy,
                                    checked != nullptr ? &checked->path_flags : nullptr);
  }
  if (!arguments.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", arguments.message()));
  }
  const NvccCommand& command = *parsed_here;
  if (unit.output_paths_size() != 1 || unit.output_paths(0) != command.output) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": its declared outputs must be exactly the -o file '", command.output, "'"));
  }
  auto in_root = [&](const std::string& relative) {
    return LexicallyNormal(cwd.empty() ? relative : cwd + "/" + relative);
  };
  std::string output = in_root(command.output);
  // Where the unit's files land on a worker: never among the toolchain's.
  std::vector<std::string> reserved_here;
  if (checked == nullptr) {
    reserved_here = ReservedFolders(system_prefixes);
  } else if (checked->reserved_folders.empty()) {
    checked->reserved_folders = ReservedFolders(system_prefixes);
  }
  const std::vector<std::string>& reserved =
      checked == nullptr ? reserved_here : checked->reserved_folders;
  auto reserved_place = [&](const std::string& relative) {
    std::string absolute = NormalJoin(root.empty() ? "/" : root, relative);
    return UnderAny(absolute, reserved) ? absolute : "";
  };
  for (const std::string& place : {cwd, output}) {
    if (std::string at = reserved_place(place); !at.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", at,
                       " is in the toolchain's own folders; a unit's working directory and "
                       "output lie in its workspace"));
    }
  }
  // Views of the unit's own strings: no copy of each path per unit.
  absl::flat_hash_set<absl::string_view> inputs;
  inputs.reserve(unit.inputs_size());
  std::unordered_set<std::string>* known =
      checked != nullptr ? &checked->input_paths[root] : nullptr;
  for (const auto& input : unit.inputs()) {
    const std::string& path = input.path();
    if (!inputs.insert(path).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": input '", absl::CHexEscape(path), "' is listed twice"));
    }
    if (path == output) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": its output '", command.output,
                       "' is also one of its inputs; write the object "
                       "elsewhere"));
    }
    if (known != nullptr && known->count(path) != 0) continue;
    if (absl::Status valid = CheckInputPath(root, path, reserved); !valid.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", valid.message()));
    }
    if (known != nullptr) known->insert(path);
  }
  if (parsed != nullptr) *parsed = *std::move(parsed_here);
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
  return SplitByArchitecture(command);
}

absl::StatusOr<std::vector<ArchitecturePart>> SplitByArchitecture(const NvccCommand& command) {
  auto cannot = [](const std::string& why) { return absl::FailedPreconditionError(why); };
  if (command.host_compiler) return cannot("a host compiler's unit has no GPU targets");
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
    std::string value = ptx ? absl::StrCat("arch=compute_", number, ",code=compute_", number)
                            : absl::StrCat("arch=compute_", number, ",code=sm_", number);
    // What the argument model accepts from anyone else, it accepts here.
    if (!FindNvccOption("-gencode")->check("-gencode", value).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("architecture '", arch,
                       "' is not of the form sm_100 or compute_100 (sm_NN, NN from 10)"));
    }
    flags.push_back("-gencode");
    flags.push_back(std::move(value));
  }
  return flags;
}

}  // namespace distcc_cuda
