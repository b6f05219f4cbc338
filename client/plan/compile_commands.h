// SPDX-License-Identifier: Apache-2.0
// compile_commands.json (CMake's CMAKE_EXPORT_COMPILE_COMMANDS, `ninja -t
// compdb`): every nvcc entry is one compile unit, as given.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace distcc_cuda::client {

// One entry: nvcc run in `directory` on `file`.
struct CompileCommand {
  std::string directory;               // absolute
  std::string file;                    // absolute source path
  std::vector<std::string> arguments;  // including the compiler, argv[0]
  std::string output;                  // absolute object path from -o
};

// Reads the database at `path`. INVALID_ARGUMENT naming the entry index for
// malformed JSON or entries; entries whose compiler is not nvcc are refused
// with a message naming them.
absl::StatusOr<std::vector<CompileCommand>> LoadCompileCommands(const std::string& path);

// Same as LoadCompileCommands on the database's `text`; `path` names it in
// messages. Relative directories are taken from the current directory, as
// LoadCompileCommands does.
absl::StatusOr<std::vector<CompileCommand>> ParseCompileCommands(const std::string& text,
                                                                 const std::string& path);

// Splits a shell command line the way a POSIX shell does for words: single
// and double quotes, backslash escapes. INVALID_ARGUMENT for an open quote.
absl::StatusOr<std::vector<std::string>> SplitCommandLine(const std::string& command);

}  // namespace distcc_cuda::client
