// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/nvcc_options.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/status.h"
#include "common/nvcc/forwarded_flags.h"

namespace distcc_cuda {
namespace {

absl::Status Bad(absl::string_view option, absl::string_view value, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("nvcc option ", option, " '", absl::CHexEscape(value), "': ", expected));
}

bool IsNumber(absl::string_view text, int low, int high) {
  int value;
  return !text.empty() && std::all_of(text.begin(), text.end(), absl::ascii_isdigit) &&
         absl::SimpleAtoi(text, &value) && value >= low && value <= high;
}

// sm_100, compute_90a, lto_100f: a target name with its number.
bool IsTarget(absl::string_view text, std::initializer_list<absl::string_view> kinds) {
  for (absl::string_view kind : kinds) {
    absl::string_view rest = text;
    if (!absl::ConsumePrefix(&rest, kind)) continue;
    if (!rest.empty() && (rest.back() == 'a' || rest.back() == 'f')) rest.remove_suffix(1);
    if (IsNumber(rest, 10, 9999)) return true;
  }
  return false;
}

template <int kLow, int kHigh>
absl::Status CheckInteger(absl::string_view option, absl::string_view value) {
  if (IsNumber(value, kLow, kHigh)) return absl::OkStatus();
  return Bad(option, value, absl::StrCat("expected a whole number from ", kLow, " to ", kHigh));
}

absl::Status OneOf(absl::string_view option, absl::string_view value,
                   std::initializer_list<absl::string_view> allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return absl::OkStatus();
  return Bad(option, value, absl::StrCat("expected one of ", absl::StrJoin(allowed, ", ")));
}

absl::Status CheckBool(absl::string_view option, absl::string_view value) {
  return OneOf(option, value, {"true", "false"});
}
absl::Status CheckOptLevel(absl::string_view option, absl::string_view value) {
  return OneOf(option, value, {"0", "1", "2", "3"});
}
absl::Status CheckFastCompile(absl::string_view option, absl::string_view value) {
  return OneOf(option, value, {"0", "min", "mid", "max"});
}
absl::Status CheckOnOff(absl::string_view option, absl::string_view value) {
  return OneOf(option, value, {"on", "off"});
}
absl::Status CheckLanguage(absl::string_view option, absl::string_view value) {
  return OneOf(option, value, {"c", "c++", "cu"});
}
absl::Status CheckMachine(absl::string_view option, absl::string_view value) {
  return OneOf(option, value, {"64"});
}
absl::Status CheckDefaultStream(absl::string_view option, absl::string_view value) {
  return OneOf(option, value, {"legacy", "null", "per-thread"});
}
absl::Status CheckCompressMode(absl::string_view option, absl::string_view value) {
  return OneOf(option, value, {"default", "size", "speed", "balance", "none"});
}
absl::Status CheckCudart(absl::string_view option, absl::string_view value) {
  return OneOf(option, value, {"none", "shared", "static"});
}
absl::Status CheckCudadevrt(absl::string_view option, absl::string_view value) {
  return OneOf(option, value, {"none", "static"});
}

absl::Status CheckStandard(absl::string_view option, absl::string_view value) {
  absl::string_view year = value;
  if (absl::ConsumePrefix(&year, "c++") && year.size() == 2 &&
      std::all_of(year.begin(), year.end(), [](char c) { return absl::ascii_isalnum(c); })) {
    return absl::OkStatus();
  }
  return Bad(option, value, "expected a C++ standard such as c++17");
}

// "arch=compute_90a,code=sm_90a" or "arch=compute_90,code=[sm_90,compute_90]".
absl::Status CheckGencode(absl::string_view option, absl::string_view value) {
  auto bad = [&] {
    return Bad(option, value,
               "expected arch=compute_NN,code=sm_NN or code=[sm_NN,compute_NN] (targets sm_, "
               "compute_ or lto_ with an optional a or f)");
  };
  absl::string_view rest = value;
  if (!absl::ConsumePrefix(&rest, "arch=")) return bad();
  size_t comma = rest.find(",code=");
  if (comma == absl::string_view::npos) return bad();
  if (!IsTarget(rest.substr(0, comma), {"compute_", "sm_"})) return bad();
  absl::string_view codes = rest.substr(comma + 6);
  if (absl::ConsumePrefix(&codes, "[") && !absl::ConsumeSuffix(&codes, "]")) return bad();
  for (absl::string_view code : absl::StrSplit(codes, ',')) {
    if (!IsTarget(code, {"sm_", "compute_", "lto_"})) return bad();
  }
  return absl::OkStatus();
}

absl::Status CheckArch(absl::string_view option, absl::string_view value) {
  if (value == "native") {
    return Bad(option, value,
               "-arch=native compiles for the GPU of whichever machine runs nvcc; name the "
               "architecture (e.g. sm_100)");
  }
  if (value == "all" || value == "all-major" || IsTarget(value, {"sm_", "compute_", "lto_"})) {
    return absl::OkStatus();
  }
  return Bad(option, value, "expected sm_NN, compute_NN, lto_NN, all or all-major");
}

absl::Status CheckCodes(absl::string_view option, absl::string_view value) {
  for (const std::string& code : SplitNvccList(value)) {
    if (!IsTarget(code, {"sm_", "compute_", "lto_"})) {
      return Bad(option, value, "expected a list of sm_NN, compute_NN or lto_NN");
    }
  }
  return absl::OkStatus();
}

// Diagnostic numbers or names: 177,20012 or esa_on_defaulted_function_ignored.
absl::Status CheckWordList(absl::string_view option, absl::string_view value) {
  for (const std::string& piece : SplitNvccList(value)) {
    if (piece.empty() || !std::all_of(piece.begin(), piece.end(),
                                      [](char c) { return IsIdentifierChar(c) || c == '-'; })) {
      return Bad(option, value, "expected a comma-separated list of numbers or names");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckIdentifiers(absl::string_view option, absl::string_view value) {
  for (const std::string& piece : SplitNvccList(value)) {
    if (!IsCIdentifier(piece)) return Bad(option, value, "expected macro or function names");
  }
  return absl::OkStatus();
}

absl::Status CheckWord(absl::string_view option, absl::string_view value) {
  if (!value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
        return IsIdentifierChar(c) || c == '-' || c == '.' || c == '+';
      })) {
    return absl::OkStatus();
  }
  return Bad(option, value, "expected letters, digits, _ . + or -");
}

absl::Status CheckOutputPath(absl::string_view option, absl::string_view value) {
  if (value.empty()) return Bad(option, value, "the output path is empty");
  return CheckNvccPath(option, value);
}

template <ForwardedTool kTool>
absl::Status CheckForwarded(absl::string_view option, absl::string_view value) {
  return CheckForwardedFlags(kTool, option, value);
}

struct Entry {
  std::vector<const char*> names;
  NvccOptionSpec spec;
};

NvccOptionSpec Switch() { return {}; }
NvccOptionSpec Action() {
  NvccOptionSpec spec;
  spec.compile_action = true;
  return spec;
}
NvccOptionSpec Value(NvccValueCheck check, NvccValueKind kind = NvccValueKind::kText,
                     bool joined = false) {
  NvccOptionSpec spec;
  spec.kind = kind;
  spec.takes_value = true;
  spec.allows_joined = joined;
  spec.check = check;
  return spec;
}
NvccOptionSpec Dependency(bool takes_value) {
  NvccOptionSpec spec;
  spec.kind = NvccValueKind::kDependency;
  spec.takes_value = takes_value;
  return spec;
}
NvccOptionSpec Forbidden(const char* why, bool local_only = false) {
  NvccOptionSpec spec;
  spec.kind = NvccValueKind::kForbidden;
  spec.why = why;
  spec.local_only = local_only;
  return spec;
}

constexpr const char kLinks[] = "links and archives run on the client, not on workers";

// Every option of nvcc 12.8 and 13.0 (nvcc --help) that a compile may carry,
// plus the ones refused with a reason. Anything else is refused as unknown.
const std::vector<Entry>& Entries() {
  static const auto* entries = new std::vector<Entry>{
      // What the compile makes. -c is taken apart by the parser.
      {{"-dc", "--device-c"}, Action()},
      {{"-dw", "--device-w"}, Action()},
      {{"-cubin", "--cubin"}, Action()},
      {{"-ptx", "--ptx"}, Action()},
      {{"-fatbin", "--fatbin"}, Action()},
      // Files.
      {{"-o", "--output-file"}, Value(CheckOutputPath, NvccValueKind::kOutputPath)},
      {{"-I"}, Value(CheckNvccPathList, NvccValueKind::kInputPath, true)},
      {{"--include-path"}, Value(CheckNvccPathList, NvccValueKind::kInputPath)},
      {{"-isystem"}, Value(CheckNvccPathList, NvccValueKind::kInputPath, true)},
      {{"--system-include"}, Value(CheckNvccPathList, NvccValueKind::kInputPath)},
      {{"-include", "--pre-include"}, Value(CheckNvccPathList, NvccValueKind::kInputPath)},
      // Preprocessor.
      {{"-D"}, Value(CheckNvccDefinitions, NvccValueKind::kText, true)},
      {{"--define-macro"}, Value(CheckNvccDefinitions)},
      {{"-U"}, Value(CheckIdentifiers, NvccValueKind::kText, true)},
      {{"--undefine-macro"}, Value(CheckIdentifiers)},
      // Language and code generation.
      {{"-O"}, Value(CheckOptLevel, NvccValueKind::kText, true)},
      {{"--optimize"}, Value(CheckOptLevel)},
      {{"-Ofc", "--Ofast-compile"}, Value(CheckFastCompile)},
      {{"-dopt", "--dopt"}, Value(CheckOnOff)},
      {{"-opt-info", "--optimization-info"}, Value(CheckWordList)},
      {{"-std", "--std"}, Value(CheckStandard)},
      {{"-x", "--x"}, Value(CheckLanguage)},
      {{"-m", "--machine"}, Value(CheckMachine)},
      {{"-gencode", "--generate-code"}, Value(CheckGencode)},
      {{"-arch", "--gpu-architecture"}, Value(CheckArch)},
      {{"-code", "--gpu-code"}, Value(CheckCodes)},
      {{"-rdc", "--relocatable-device-code"}, Value(CheckBool)},
      {{"-t", "--threads"}, Value(CheckInteger<0, 256>)},
      {{"-split-compile", "--split-compile"}, Value(CheckInteger<0, 256>)},
      {{"-split-compile-extended", "--split-compile-extended"}, Value(CheckInteger<0, 256>)},
      {{"-maxrregcount", "--maxrregcount"}, Value(CheckInteger<1, 1024>)},
      {{"-ftz", "--ftz"}, Value(CheckBool)},
      {{"-prec-div", "--prec-div"}, Value(CheckBool)},
      {{"-prec-sqrt", "--prec-sqrt"}, Value(CheckBool)},
      {{"-fmad", "--fmad"}, Value(CheckBool)},
      {{"-default-stream", "--default-stream"}, Value(CheckDefaultStream)},
      {{"-static-global-template-stub", "--static-global-template-stub"}, Value(CheckBool)},
      {{"-device-entity-has-hidden-visibility", "--device-entity-has-hidden-visibility"},
       Value(CheckBool)},
      {{"-brief-diag", "--brief-diagnostics"}, Value(CheckBool)},
      {{"-device-stack-protector", "--device-stack-protector"}, Value(CheckBool)},
      {{"-jtd", "--jump-table-density"}, Value(CheckInteger<0, 100>)},
      {{"-ftemplate-backtrace-limit", "--ftemplate-backtrace-limit"},
       Value(CheckInteger<0, 100000>)},
      {{"-ftemplate-depth", "--ftemplate-depth"}, Value(CheckInteger<0, 100000>)},
      {{"-frandom-seed", "--frandom-seed"}, Value(CheckWord)},
      {{"-sanitize", "--sanitize"}, Value(CheckWord)},
      {{"-e", "--entries"}, Value(CheckIdentifiers)},
      {{"-cudart", "--cudart"}, Value(CheckCudart)},
      {{"-cudadevrt", "--cudadevrt"}, Value(CheckCudadevrt)},
      {{"-compress-mode", "--compress-mode"}, Value(CheckCompressMode)},
      // Diagnostics.
      {{"-diag-suppress", "--diag-suppress"}, Value(CheckWordList)},
      {{"-diag-error", "--diag-error"}, Value(CheckWordList)},
      {{"-diag-warn", "--diag-warn"}, Value(CheckWordList)},
      {{"-Werror", "--Werror"}, Value(CheckWordList)},
      // Options for the programs nvcc runs: each piece has an allowlist.
      {{"-Xcompiler", "--compiler-options"}, Value(CheckForwarded<ForwardedTool::kHostCompiler>)},
      {{"-Xptxas", "--ptxas-options"}, Value(CheckForwarded<ForwardedTool::kPtxas>)},
      {{"-Xnvlink", "--nvlink-options"}, Value(CheckForwarded<ForwardedTool::kNvlink>)},
      {{"-Xlinker", "--linker-options"}, Value(CheckForwarded<ForwardedTool::kHostLinker>)},
      {{"-Xarchive", "--archive-options"}, Value(CheckForwarded<ForwardedTool::kArchiver>)},
      {{"-Xcudafe"}, Value(CheckForwarded<ForwardedTool::kCudafe>)},
      {{"-Xfatbin", "--fatbin-options"}, Value(CheckForwarded<ForwardedTool::kFatbinary>)},
      // Switches.
      {{"-lineinfo", "--generate-line-info"}, Switch()},
      {{"-G", "--device-debug"}, Switch()},
      {{"-g", "--debug"}, Switch()},
      {{"-pg", "--profile"}, Switch()},
      {{"-w", "--disable-warnings"}, Switch()},
      {{"-use_fast_math", "--use_fast_math"}, Switch()},
      {{"-expt-relaxed-constexpr", "--expt-relaxed-constexpr"}, Switch()},
      {{"-extended-lambda", "--extended-lambda"}, Switch()},
      {{"-expt-extended-lambda", "--expt-extended-lambda"}, Switch()},
      {{"-noeh", "--no-exceptions"}, Switch()},
      {{"-nohdinitlist", "--no-host-device-initializer-list"}, Switch()},
      {{"-nohdmoveforward", "--no-host-device-move-forward"}, Switch()},
      {{"-m64", "--m64"}, Switch()},
      {{"-restrict", "--restrict"}, Switch()},
      {{"-Wreorder", "--Wreorder"}, Switch()},
      {{"-Wdefault-stream-launch", "--Wdefault-stream-launch"}, Switch()},
      {{"-Wmissing-launch-bounds", "--Wmissing-launch-bounds"}, Switch()},
      {{"-Wext-lambda-captures-this", "--Wext-lambda-captures-this"}, Switch()},
      {{"-Wno-deprecated-declarations", "--Wno-deprecated-declarations"}, Switch()},
      {{"-Wno-deprecated-gpu-targets", "--Wno-deprecated-gpu-targets"}, Switch()},
      {{"-res-usage", "--resource-usage"}, Switch()},
      {{"-extra-device-vectorization", "--extra-device-vectorization"}, Switch()},
      {{"-keep-device-functions", "--keep-device-functions"}, Switch()},
      {{"-src-in-ptx", "--source-in-ptx"}, Switch()},
      {{"-err-no", "--display-error-number"}, Switch()},
      {{"-no-err-no", "--no-display-error-number"}, Switch()},
      {{"-ewp", "--extensible-whole-program"}, Switch()},
      {{"-no-compress", "--no-compress"}, Switch()},
      {{"-allow-unsupported-compiler", "--allow-unsupported-compiler"}, Switch()},
      // Harmless here: unknown options never get past this table.
      {{"-forward-unknown-to-host-compiler", "--forward-unknown-to-host-compiler"}, Switch()},
      {{"-forward-unknown-opts", "--forward-unknown-opts"}, Switch()},
      {{"--no-align-double"}, Switch()},
      {{"-nodlink", "--no-device-link"}, Switch()},
      {{"-dlto", "--dlink-time-opt"}, Switch()},
      {{"-lto", "--lto"}, Switch()},
      {{"-gen-opt-lto", "--gen-opt-lto"}, Switch()},
      {{"-reloc-ptx", "--relocatable-ptx"}, Switch()},
      {{"-fdevice-syntax-only", "--fdevice-syntax-only"}, Switch()},
      {{"-v", "--verbose"}, Switch()},
      // Dependency output: the client writes dependency files itself.
      {{"-M", "--generate-dependencies", "-MM", "--generate-nonsystem-dependencies", "-MD",
        "--generate-dependencies-with-compile", "-MMD",
        "--generate-nonsystem-dependencies-with-compile", "-MP", "--generate-dependency-targets"},
       Dependency(false)},
      {{"-MF", "--dependency-output", "-MT", "--dependency-target-name"}, Dependency(true)},
      // Never on a worker.
      {{"-ccbin", "--compiler-bindir"},
       Forbidden("substitutes the host compiler; workers use their pinned one")},
      {{"-arbin", "--archiver-binary"}, Forbidden("substitutes the archiver")},
      {{"-optf", "--options-file"},
       Forbidden("reads options from an unchecked file; expand it into the command")},
      {{"-odir", "--output-directory"}, Forbidden("writes outside the declared output")},
      {{"-keep-dir", "--keep-dir"}, Forbidden("writes intermediate files elsewhere")},
      {{"-keep", "--keep", "-save-temps", "--save-temps"},
       Forbidden("keeps intermediate files beside the output")},
      {{"-objtemp", "--objdir-as-tempdir"},
       Forbidden("writes intermediate files beside the output")},
      {{"-clean", "--clean-targets"}, Forbidden("deletes files instead of compiling")},
      {{"-run", "--run", "-run-args", "--run-args"}, Forbidden("runs the compiled program")},
      {{"-time", "--time", "-fdevice-time-trace", "--fdevice-time-trace"},
       Forbidden("writes a timing file at a path of its own")},
      {{"-ldir", "--libdevice-directory", "-target-dir", "--target-directory"},
       Forbidden("reads the toolkit's files from another folder")},
      {{"-noprof", "--dont-use-profile"}, Forbidden("ignores the toolkit's nvcc.profile")},
      {{"-use-local-env", "--use-local-env", "-force-cl-env-setup", "--force-cl-env-setup", "-idp",
        "--input-drive-prefix", "-ddp", "--dependency-drive-prefix", "-dp", "--drive-prefix"},
       Forbidden("is for Windows hosts only")},
      {{"-jobserver", "--jobserver"}, Forbidden("talks to a make jobserver of the caller")},
      {{"-dryrun", "--dryrun"}, Forbidden("prints the commands instead of compiling", true)},
      {{"-qpp-config", "--qpp-config", "-astoolspatch", "--compile-as-tools-patch"},
       Forbidden("is not a compile distcc-cuda can send")},
      {{"-cuda", "--cuda", "-optix-ir", "--optix-ir", "-ltoir", "--ltoir"},
       Forbidden("makes an output distcc-cuda does not send to workers", true)},
      {{"-E", "--preprocess"}, Forbidden("preprocesses instead of compiling", true)},
      {{"-code-ls", "--list-gpu-code", "-arch-ls", "--list-gpu-arch", "-h", "--help", "-V",
        "--version"},
       Forbidden("asks nvcc about itself instead of compiling", true)},
      {{"-link", "--link", "-lib", "--lib", "-dlink", "--device-link", "-shared", "--shared", "-r",
        "--relocatable-link", "-l", "--library", "-L", "--library-path", "-hls",
        "--host-linker-script", "-aug-hls", "--augment-host-linker-script"},
       Forbidden(kLinks, true)},
  };
  return *entries;
}

// Looked up for every argument of every unit: hashed, not ordered.
const absl::flat_hash_map<std::string, const NvccOptionSpec*>& Table() {
  static const auto* table = [] {
    auto* map = new absl::flat_hash_map<std::string, const NvccOptionSpec*>;
    for (const Entry& entry : Entries()) {
      for (const char* name : entry.names) (*map)[name] = &entry.spec;
    }
    return map;
  }();
  return *table;
}

}  // namespace

absl::Status CheckNvccPath(absl::string_view option, absl::string_view path) {
  RETURN_IF_ERROR(CheckShellInert(path, absl::StrCat("nvcc option ", option, " path")));
  // nvcc hands -isystem, -include and -o values to the host compiler as
  // arguments of their own, and gcc reads any argument that starts with '@'
  // as a file of more options (-wrapper, -B, ...). A path starting with '-'
  // would be read as an option.
  if (path.empty() || path[0] == '@' || path[0] == '-') {
    return Bad(option, path,
               "a path must not be empty or start with '@' or '-' (the host compiler would "
               "read it as a response file or an option); write ./PATH");
  }
  return absl::OkStatus();
}

absl::Status CheckNvccPathList(absl::string_view option, absl::string_view value) {
  for (const std::string& path : SplitNvccList(value)) {
    if (path.empty()) return Bad(option, value, "a path is empty");
    RETURN_IF_ERROR(CheckNvccPath(option, path));
  }
  return absl::OkStatus();
}

// NAME or NAME=VALUE. nvcc quotes -D values with "..." and escapes '"', so
// quotes and spaces are safe inside a value; '$', '`' and '\' would still be
// expanded inside the quotes, and nothing else is needed.
absl::Status CheckNvccDefinitions(absl::string_view option, absl::string_view value) {
  for (const std::string& definition : SplitNvccList(value)) {
    size_t equals = definition.find('=');
    if (!IsCIdentifier(absl::string_view(definition).substr(0, equals))) {
      return Bad(option, value, "a definition is NAME or NAME=VALUE with NAME an identifier");
    }
    if (equals == std::string::npos) continue;
    std::string unquoted = definition.substr(equals + 1);
    unquoted.erase(std::remove_if(unquoted.begin(), unquoted.end(),
                                  [](char c) { return c == '"' || c == ' '; }),
                   unquoted.end());
    if (absl::Status inert =
            CheckShellInert(unquoted, absl::StrCat("nvcc option ", option, " value"));
        !inert.ok()) {
      return inert;
    }
  }
  return absl::OkStatus();
}

const NvccOptionSpec* FindNvccOption(absl::string_view name) {
  auto it = Table().find(name);
  return it == Table().end() ? nullptr : it->second;
}

const NvccOptionSpec* FindJoinedNvccOption(absl::string_view argument, std::string* name) {
  for (const char* prefix : {"-isystem", "-I", "-D", "-U", "-O"}) {
    if (absl::StartsWith(argument, prefix) && argument.size() > strlen(prefix)) {
      const NvccOptionSpec* spec = FindNvccOption(prefix);
      if (spec != nullptr && spec->allows_joined) {
        *name = prefix;
        return spec;
      }
    }
  }
  return nullptr;
}

}  // namespace distcc_cuda
