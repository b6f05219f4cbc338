// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/forwarded_flags.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/base/status.h"

namespace distcc_cuda {
namespace {

bool InertChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ',' ||
         c == ':' || c == '=' || c == '+' || c == '/' || c == '@' || c == '%' || c == '-';
}

bool AllOf(absl::string_view text, bool (*pred)(char)) {
  return !text.empty() && std::all_of(text.begin(), text.end(), pred);
}
bool Lower(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }
bool Digit(char c) { return c >= '0' && c <= '9'; }
// A macro definition safe to paste unquoted: NAME or NAME=VALUE with an
// inert value.
bool IsPlainDefinition(absl::string_view text) {
  size_t equals = text.find('=');
  return IsCIdentifier(text.substr(0, equals));
}

absl::Status Refuse(absl::string_view option, absl::string_view piece, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(option, " '", piece, "' is not allowed on a worker: ", why));
}

// -f options that load code, read a file the compile was not given, or write
// files beside the object (checked with any "no-" taken off).
constexpr const char* kRefusedMachineIndependent[] = {
    "plugin",
    "dump",
    "profile",
    "auto-profile",
    "save-optimization-record",
    "stack-usage",
    "callgraph-info",
    "sanitize-blacklist",
    "sanitize-ignorelist",
    "sanitize-coverage-",
    "use-ld",
    "module",
    "deps",
    "compare-debug",
    "test-coverage",
    "branch-probabilities",
    "self-test",
    "create-profile",
    "record-marker",
};

absl::Status CheckHostCompilerPiece(absl::string_view option, absl::string_view piece) {
  constexpr absl::string_view kFamilies =
      "the host compiler accepts only -f, -W, -O, -g, -std, -D, -U, -m and --param options "
      "that name no file or plugin";
  if (piece == "-pthread" || piece == "-w" || piece == "-pedantic" || piece == "-pedantic-errors" ||
      piece == "-pipe" || piece == "-ansi" || piece == "-nostdinc" || piece == "-nostdinc++") {
    return absl::OkStatus();
  }
  if (piece == "-O" || piece == "-Os" || piece == "-Ofast" || piece == "-Og" || piece == "-Oz" ||
      (piece.size() == 3 && absl::StartsWith(piece, "-O") && piece[2] >= '0' && piece[2] <= '3')) {
    return absl::OkStatus();
  }
  if (absl::StartsWith(piece, "-g")) {
    if (piece == "-gsplit-dwarf") return Refuse(option, piece, "it writes a .dwo file");
    if (AllOf(piece.substr(1), Lower)) return absl::OkStatus();
    return Refuse(option, piece, kFamilies);
  }
  if (absl::ConsumePrefix(&piece, "-std=")) {
    absl::string_view std = piece;
    if ((absl::ConsumePrefix(&std, "c") || absl::ConsumePrefix(&std, "gnu")) &&
        (absl::ConsumePrefix(&std, "++") || true) && std.size() == 2 && AllOf(std, Lower)) {
      return absl::OkStatus();
    }
    return Refuse(option, absl::StrCat("-std=", piece), "not a C or C++ standard");
  }
  if (absl::StartsWith(piece, "-D")) {
    if (IsPlainDefinition(piece.substr(2))) return absl::OkStatus();
    return Refuse(option, piece, "a definition is NAME or NAME=VALUE");
  }
  if (absl::StartsWith(piece, "-U")) {
    if (IsCIdentifier(piece.substr(2))) return absl::OkStatus();
    return Refuse(option, piece, "-U takes a macro name");
  }
  if (absl::StartsWith(piece, "-W")) {
    absl::string_view name = piece.substr(2);
    if (name == "l" || name == "a" || name == "p" || absl::StartsWith(name, "l,") ||
        absl::StartsWith(name, "a,") || absl::StartsWith(name, "p,")) {
      return Refuse(option, piece,
                    "it passes options on to the linker, assembler or preprocessor unchecked");
    }
    size_t equals = name.find('=');
    if (AllOf(name.substr(0, equals), Lower) &&
        (equals == absl::string_view::npos || AllOf(name.substr(equals + 1), [](char c) {
           return IsIdentifierChar(c) || c == '-' || c == '+';
         }))) {
      return absl::OkStatus();
    }
    return Refuse(option, piece, kFamilies);
  }
  if (absl::StartsWith(piece, "-m")) {
    absl::string_view name = piece.substr(2);
    if (absl::EndsWith(name, "=native")) {
      return Refuse(option, piece,
                    "it compiles for the worker's own CPU; name the architecture instead");
    }
    size_t equals = name.find('=');
    if (AllOf(name.substr(0, equals), Lower) &&
        (equals == absl::string_view::npos || AllOf(name.substr(equals + 1), [](char c) {
           return IsIdentifierChar(c) || c == '-' || c == '.' || c == '+';
         }))) {
      return absl::OkStatus();
    }
    return Refuse(option, piece, kFamilies);
  }
  if (absl::StartsWith(piece, "--param=")) {
    absl::string_view rest = piece.substr(8);
    size_t equals = rest.find('=');
    if (equals != absl::string_view::npos && AllOf(rest.substr(0, equals), Lower) &&
        AllOf(rest.substr(equals + 1), Digit)) {
      return absl::OkStatus();
    }
    return Refuse(option, piece, "--param takes NAME=NUMBER");
  }
  if (absl::StartsWith(piece, "-f")) {
    absl::string_view name = piece.substr(2);
    absl::ConsumePrefix(&name, "no-");
    for (const char* refused : kRefusedMachineIndependent) {
      if (absl::StartsWith(name, refused)) {
        return Refuse(option, piece,
                      "it loads code, reads a file or writes files beside the object");
      }
    }
    size_t equals = name.find('=');
    absl::string_view flag = name.substr(0, equals);
    if (flag == "opt-info" || absl::StartsWith(flag, "opt-info-")) {
      if (equals != absl::string_view::npos) {
        return Refuse(option, piece, "-fopt-info=FILE writes a file");
      }
      return absl::OkStatus();
    }
    // Values are inert already (CheckShellInert); they may hold paths only
    // as text, e.g. -ffile-prefix-map=OLD=NEW.
    if (AllOf(flag, [](char c) { return IsIdentifierChar(c) || c == '-' || c == '+'; })) {
      return absl::OkStatus();
    }
    return Refuse(option, piece, kFamilies);
  }
  return Refuse(option, piece, kFamilies);
}

absl::Status CheckPtxasPiece(absl::string_view option, absl::string_view piece) {
  absl::string_view name = piece;
  if (!absl::ConsumePrefix(&name, "--")) absl::ConsumePrefix(&name, "-");
  static constexpr const char* kSwitches[] = {"v",
                                              "verbose",
                                              "w",
                                              "disable-warnings",
                                              "Werror",
                                              "warning-as-error",
                                              "lineinfo",
                                              "generate-line-info",
                                              "g",
                                              "device-debug",
                                              "sp-bounds-check",
                                              "disable-optimizer-constants",
                                              "allow-expensive-optimizations",
                                              "O0",
                                              "O1",
                                              "O2",
                                              "O3",
                                              "warn-spills",
                                              "warn-lmem-usage",
                                              "warn-double-usage"};
  for (const char* ok : kSwitches) {
    if (name == ok) return absl::OkStatus();
  }
  if (absl::StartsWith(name, "warn-on-") || absl::StartsWith(name, "suppress-")) {
    if (AllOf(name, Lower)) return absl::OkStatus();
  }
  size_t equals = name.find('=');
  if (equals != absl::string_view::npos) {
    absl::string_view key = name.substr(0, equals);
    absl::string_view value = name.substr(equals + 1);
    int number;
    if ((key == "maxrregcount" || key == "register-usage-level" || key == "opt-level" ||
         key == "split-compile") &&
        absl::SimpleAtoi(value, &number) && number >= 0 && number <= 1024) {
      return absl::OkStatus();
    }
    if ((key == "fmad" || key == "allow-expensive-optimizations" ||
         key == "extensible-whole-program" || key == "position-independent-code") &&
        (value == "true" || value == "false")) {
      return absl::OkStatus();
    }
    if ((key == "def-load-cache" || key == "def-store-cache" || key == "dlcm" || key == "dscm" ||
         key == "Ofast-compile") &&
        AllOf(value, Lower)) {
      return absl::OkStatus();
    }
  }
  return Refuse(option, piece,
                "ptxas accepts only -v, -O, -w, --warn-*, --suppress-*, register limits, cache "
                "defaults, --fmad and line/debug info");
}

absl::Status CheckNvlinkPiece(absl::string_view option, absl::string_view piece) {
  absl::string_view name = piece;
  if (!absl::ConsumePrefix(&name, "--")) absl::ConsumePrefix(&name, "-");
  if (name == "v" || name == "verbose" || name == "w" || name == "disable-warnings" ||
      name == "Werror" || name == "warning-as-error" || name == "suppress-stack-size-warning") {
    return absl::OkStatus();
  }
  return Refuse(option, piece,
                "nvlink accepts only -v, -w, -Werror and --suppress-stack-size-warning");
}

absl::Status CheckCudafePiece(absl::string_view option, absl::string_view piece) {
  absl::string_view name = piece;
  if (!absl::ConsumePrefix(&name, "--")) absl::ConsumePrefix(&name, "-");
  if (name == "display_error_number" || name == "no_display_error_number" ||
      name == "brief_diagnostics") {
    return absl::OkStatus();
  }
  for (absl::string_view kind :
       {"diag_suppress=", "diag-suppress=", "diag_error=", "diag-error=", "diag_warning=",
        "diag-warning=", "diag_remark=", "diag-remark="}) {
    if (absl::StartsWith(name, kind) && AllOf(name.substr(kind.size()), IsIdentifierChar)) {
      return absl::OkStatus();
    }
  }
  return Refuse(option, piece,
                "cudafe++ accepts only --diag_suppress/--diag_error/--diag_warning=NAME and "
                "--display_error_number");
}

absl::Status CheckFatbinaryPiece(absl::string_view option, absl::string_view piece) {
  absl::string_view name = piece;
  if (!absl::ConsumePrefix(&name, "--")) absl::ConsumePrefix(&name, "-");
  if (name == "compress-all" || name == "compress=true" || name == "compress=false") {
    return absl::OkStatus();
  }
  return Refuse(option, piece, "fatbinary accepts only -compress-all and -compress=true|false");
}

}  // namespace

std::vector<std::string> SplitNvccList(absl::string_view value) {
  std::vector<std::string> pieces(1);
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '\\' && i + 1 < value.size() && value[i + 1] == ',') {
      pieces.back() += ',';
      ++i;
    } else if (value[i] == ',') {
      pieces.emplace_back();
    } else {
      pieces.back() += value[i];
    }
  }
  return pieces;
}

absl::Status CheckShellInert(absl::string_view piece, absl::string_view what) {
  for (char c : piece) {
    if (InertChar(c)) continue;
    std::string shown = absl::ascii_isprint(static_cast<unsigned char>(c)) && c != ' '
                            ? absl::StrCat("'", std::string(1, c), "'")
                            : absl::StrFormat("byte 0x%02x", static_cast<unsigned char>(c));
    return absl::InvalidArgumentError(absl::StrCat(
        what, " '", absl::CHexEscape(piece), "' holds ", shown,
        ": nvcc passes it to a shell, so only letters, digits and _ . , : = + / @ % - are "
        "allowed (no spaces, quotes or shell metacharacters)"));
  }
  return absl::OkStatus();
}

absl::Status CheckHostCompilerFlag(absl::string_view option, absl::string_view flag) {
  RETURN_IF_ERROR(CheckShellInert(flag, absl::StrCat(option, " '", flag, "'")));
  return CheckHostCompilerPiece(option, flag);
}

absl::Status CheckForwardedFlags(ForwardedTool tool, absl::string_view option,
                                 absl::string_view value) {
  if (tool == ForwardedTool::kHostLinker || tool == ForwardedTool::kArchiver) {
    return absl::InvalidArgumentError(absl::StrCat(
        option, " '", absl::CHexEscape(value),
        "' is not allowed on a worker: a compile unit runs no linker or archiver (the link runs "
        "on the client)"));
  }
  for (const std::string& written : SplitNvccList(value)) {
    // nvcc hands the piece to a shell, which takes one pair of quotes around
    // inert text away: PyTorch's cpp_extension writes '-fPIC'.
    std::string piece = written;
    if (piece.size() >= 2 && (piece.front() == '\'' || piece.front() == '"') &&
        piece.back() == piece.front()) {
      piece = piece.substr(1, piece.size() - 2);
    }
    if (piece.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(option, " '", absl::CHexEscape(value), "' has an empty piece"));
    }
    if (absl::Status inert = CheckShellInert(piece, absl::StrCat(option, " piece")); !inert.ok()) {
      return inert;
    }
    absl::Status status;
    switch (tool) {
      case ForwardedTool::kHostCompiler:
        status = CheckHostCompilerPiece(option, piece);
        break;
      case ForwardedTool::kPtxas:
        status = CheckPtxasPiece(option, piece);
        break;
      case ForwardedTool::kNvlink:
        status = CheckNvlinkPiece(option, piece);
        break;
      case ForwardedTool::kCudafe:
        status = CheckCudafePiece(option, piece);
        break;
      case ForwardedTool::kFatbinary:
        status = CheckFatbinaryPiece(option, piece);
        break;
      case ForwardedTool::kHostLinker:
      case ForwardedTool::kArchiver:
        break;
    }
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

bool IsIdentifierChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
}

bool IsCIdentifier(absl::string_view text) {
  return !text.empty() && !absl::ascii_isdigit(static_cast<unsigned char>(text[0])) &&
         std::all_of(text.begin(), text.end(), IsIdentifierChar);
}

}  // namespace distcc_cuda
