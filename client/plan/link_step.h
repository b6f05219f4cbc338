// SPDX-License-Identifier: Apache-2.0
// The final link, done the way the build the plan came from would do it:
// PyTorch's cpp_extension links an extension with the host compiler
// (`g++ -shared OBJECTS -L$CUDA_HOME/lib64 -lcudart`), CMake a CUDA shared
// library the same way with a SONAME. Both use the shared CUDA runtime that
// torch itself loads: `nvcc -shared` would link the runtime statically (and
// its own sm_75 image with it), and two runtimes in one process is a classic
// source of subtle failures.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace distcc_cuda::client {

enum class CudaRuntime { kShared, kStatic, kNone };

// How to link; a kernel manifest's [link] table, or --link-command.
struct LinkRecipe {
  // The program: "g++" (found in PATH), a path, or "nvcc" for the build's
  // pinned nvcc.
  std::string linker = "g++";
  std::vector<std::string> flags;  // after -shared, before the objects
  CudaRuntime cudart = CudaRuntime::kShared;
  std::vector<std::string> library_dirs;  // -L, after the objects
  std::vector<std::string> libraries;     // -l, after the objects
  std::string soname;                     // -Wl,-soname,NAME when not empty
  // --link-command: the whole command, split at spaces, with {objects} and
  // {output} where those go. When set, nothing above is used.
  std::vector<std::string> command;
};

// "shared", "static" or "none"; INVALID_ARGUMENT naming the three otherwise.
absl::StatusOr<CudaRuntime> ParseCudaRuntime(const std::string& text);

// Reads --link-command: words split at spaces (no quoting: no word may hold
// one), which must hold {objects} once; -o {output} is added if {output} is
// not there. INVALID_ARGUMENT saying what is wrong.
absl::StatusOr<LinkRecipe> ParseLinkCommand(const std::string& text);

// The linker's argv for `objects` into `output`. `nvcc` is the build's
// pinned nvcc: the CUDA runtime is the one of its toolkit.
std::vector<std::string> LinkArguments(const LinkRecipe& recipe,
                                       const std::vector<std::string>& objects,
                                       const std::string& output, const std::string& nvcc);

// The folder holding the toolkit's libcudart of the nvcc at `nvcc`: lib64
// beside its bin/, else targets/x86_64-linux/lib.
std::string CudaLibraryFolder(const std::string& nvcc);

// One line for the build's summary: the command with the objects counted,
// e.g. "g++ -shared -Wl,-soname,libk.so [7 objects] -L/usr/local/cuda/lib64 -lcudart -o
// out/libk.so".
std::string DescribeLink(const std::vector<std::string>& argv,
                         const std::vector<std::string>& objects);

}  // namespace distcc_cuda::client
