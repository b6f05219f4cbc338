// SPDX-License-Identifier: Apache-2.0
// Which CUDA the framework of a build was built with, found without
// importing it: the torch that a command's Python would import (its
// version.py), or the one a CMake build's cache names (Torch_DIR), and the
// CUDA compiler that cache fixes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distcc_cuda::client {

// What of the environment decides which Python a command runs.
struct PythonLookup {
  std::string path;         // $PATH
  std::string virtual_env;  // $VIRTUAL_ENV
};

struct FrameworkBuild {
  std::string version;  // torch.__version__, "2.15.0+cu132"
  std::string cuda;     // torch.version.cuda, "13.2"; "" for a CPU or ROCm build
  std::string folder;   // the torch package's folder
};

// The facts of torch's version.py; nullopt when it names no __version__.
std::optional<FrameworkBuild> ParseTorchVersionFile(absl::string_view text,
                                                    const std::string& folder);

// The torch package in `folder`, by its version.py.
std::optional<FrameworkBuild> TorchIn(const std::string& folder);

// The torch that `python` would import: importlib finds its folder without
// running its __init__ (tens of milliseconds, not the seconds an import
// takes). nullopt when that Python has none; an error when it cannot run.
absl::StatusOr<std::optional<FrameworkBuild>> TorchOf(const std::string& python,
                                                      const std::string& working_directory);

// The Python that `command` runs: python..., pip... (by its #! line), uv
// (its --python, else $VIRTUAL_ENV, else ./.venv, else python3); a path
// that PATH resolves. "" for any other command.
std::string PythonOfCommand(const std::vector<std::string>& command,
                            const PythonLookup& environment, const std::string& working_directory);

// Whether `command` builds in an isolated environment of its own, whose
// torch may not be the one installed: pip and uv without
// --no-build-isolation, `python -m build` without --no-isolation.
bool BuildsInIsolation(const std::vector<std::string>& command);

// A CMake build folder's cache, as far as the toolkit goes.
struct CMakeCacheFacts {
  std::string folder;
  std::string cuda_compiler;  // CMAKE_CUDA_COMPILER
  std::string torch_dir;      // Torch_DIR (.../torch/share/cmake/Torch)
};

// The cache of the folder `command` builds: `cmake --build DIR`,
// `ninja -C DIR`, `make -C DIR`, or ninja and make in a folder that has a
// CMakeCache.txt. nullopt for other commands and folders without a cache.
std::optional<CMakeCacheFacts> CMakeCacheOf(const std::vector<std::string>& command,
                                            const std::string& working_directory);

// The facts of CMakeCache.txt's text.
CMakeCacheFacts ParseCMakeCache(absl::string_view text, const std::string& folder);

}  // namespace distcc_cuda::client
