// SPDX-License-Identifier: Apache-2.0
// Finds a unit's input closure with the local nvcc's dependency output,
// leaving out the toolkit's and the system's headers: those belong to the
// worker's own pinned toolchain.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/scan/scan_cache.h"

namespace distcc_cuda::client {

// The root of the toolkit that `nvcc` runs (the folder above its bin/), as
// named and, where that is a link, as it is on disk; each ends with '/'.
std::vector<std::string> ToolkitRoots(const std::string& nvcc);

// Folders whose headers are never shipped: the toolkit of `nvcc`
// (ToolkitRoots) and the system's include and compiler folders.
std::vector<std::string> ExcludedPrefixes(const std::string& nvcc);

// Parses make-style dependency output ("obj: a.cu b.h \\\n c.h") into the
// listed files, in order, with backslash-escaped spaces undone.
std::vector<std::string> ParseMakeDependencies(const std::string& text);

// Runs `nvcc FLAGS -M SOURCE` in `directory` (with `-x cu` when the source is
// a header; `nvcc` may be a host C++ compiler, LooksLikeHostCompiler, whose
// own flags then scan its .cpp source) and returns the absolute paths it reads outside `excluded`.
// INVALID_ARGUMENT carrying nvcc's own message when the scan fails (a
// missing header, a syntax error in an #if). With `cache`, an answer it
// holds for the same question with nothing changed is used and no nvcc
// runs; a fresh answer is remembered there. The environment's variables
// that nvcc reads (NVCC_CCBIN, ...) are the cache's; without one, none.
// `workspace` is the compile's (ScanQuestion's): the cache's entry is
// found from the same tree in another folder.
absl::StatusOr<std::vector<std::string>> ScanInputClosure(
    const std::string& nvcc, const std::string& directory, const std::vector<std::string>& flags,
    const std::string& source, const std::vector<std::string>& excluded, ScanCache* cache = nullptr,
    const std::string& workspace = "");

// Runs `nvcc FLAGS DEPENDENCY_ARGUMENTS SOURCE` in `directory`, where the
// dependency arguments write a make rule to `dependency_file` (relative to
// `directory` or absolute) as the caller's compile would have (-M or -MM,
// -MT, -MF, -MP), and returns the files of that rule's first target outside
// `excluded`, as ScanInputClosure does. The file is nvcc's own, byte for
// byte (from `cache`, the one nvcc wrote for the same question).
absl::StatusOr<std::vector<std::string>> ScanWritingDependencyFile(
    const std::string& nvcc, const std::string& directory, const std::vector<std::string>& flags,
    const std::string& source, const std::vector<std::string>& dependency_arguments,
    const std::string& dependency_file, const std::vector<std::string>& excluded,
    ScanCache* cache = nullptr, const std::string& workspace = "");

}  // namespace distcc_cuda::client
