// SPDX-License-Identifier: Apache-2.0
// The options nvcc hands on to the programs it runs (-Xcompiler to the host
// compiler, -Xptxas to ptxas, ...). nvcc pastes these values into shell
// command lines without quoting them, so each piece is checked against an
// allowlist of its own: nothing that runs a command, loads code, or names a
// file to read or write gets through.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace distcc_cuda {

// The program an -X… option speaks to.
enum class ForwardedTool {
  kHostCompiler,  // -Xcompiler, --compiler-options
  kPtxas,         // -Xptxas, --ptxas-options
  kNvlink,        // -Xnvlink, --nvlink-options
  kHostLinker,    // -Xlinker, --linker-options
  kArchiver,      // -Xarchive, --archive-options
  kCudafe,        // -Xcudafe
  kFatbinary,     // -Xfatbin
};

// Splits an nvcc list value the way nvcc does: at every comma not escaped
// with a backslash ("a\,b" stays one piece, "a\,b" unescaped to "a,b").
std::vector<std::string> SplitNvccList(absl::string_view value);

// OK if `piece` holds no shell metacharacter, quote, whitespace or control
// character (only letters, digits and _ . , : = + / @ % -). INVALID_ARGUMENT
// naming `what` and the character otherwise.
absl::Status CheckShellInert(absl::string_view piece, absl::string_view what);

// Checks every piece of the value of `option` (spelled as the user wrote it,
// for messages) for `tool`. INVALID_ARGUMENT naming the option, the piece and
// why it is refused.
absl::Status CheckForwardedFlags(ForwardedTool tool, absl::string_view option,
                                 absl::string_view value);

// Checks one flag of the host C++ compiler against the allowlist -Xcompiler
// pieces meet (-f, -W, -O, -g, -std, -D, -U, -m, --param that name no file,
// plugin or program), as a compile of its own passes it. INVALID_ARGUMENT
// naming `option` (how the caller names the flag's source) and why.
absl::Status CheckHostCompilerFlag(absl::string_view option, absl::string_view flag);

// A character of a C identifier ([A-Za-z0-9_]), and a whole C identifier
// (a macro or function name): what -D, -U and the forwarded flags accept.
bool IsIdentifierChar(char c);
bool IsCIdentifier(absl::string_view text);

}  // namespace distcc_cuda
