// SPDX-License-Identifier: Apache-2.0
// Headers that a dependency scan leaves out because GCC's `#pragma once`
// took them for another: two files with the same size, modification time
// and bytes are one header to GCC, so the second `#include` is skipped and
// never listed (torch 2.15 ships torch/csrc/utils/python_stub.h and
// c10/util/python_stub.h so). A worker given only the first fails to find
// the second before any pragma is read: the unit's inputs need both.
#pragma once

#include <string>
#include <vector>

namespace distcc_cuda::client {

// The include folders a compile's flags name (-I, -isystem, -iquote,
// -idirafter, nvcc's --include-path and --system-include, joined or not,
// and those inside -Xcompiler), absolute against `directory`.
std::vector<std::string> IncludeFoldersOf(const std::vector<std::string>& flags,
                                          const std::string& directory);

// The files that the `#include "NAME"` and `#include <NAME>` lines of the
// `closure`'s files (absolute paths, as a scan lists them) find in the
// including file's folder, in `include_folders` or in a folder the closure
// shows NAME found in, that are not in the closure but have the size,
// modification time and bytes of a closure file: the twins GCC skipped.
// Files that cannot be read are left out (the scan found what it needed).
std::vector<std::string> PragmaOnceTwins(const std::vector<std::string>& closure,
                                         const std::vector<std::string>& include_folders);

}  // namespace distcc_cuda::client
