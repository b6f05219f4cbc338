// SPDX-License-Identifier: Apache-2.0
// Which toolkit a build compiles with, decided before its first compile:
// --toolkit (a release, a folder, or auto: what torch needs), else the nvcc
// it would use (--nvcc, $CUDA_HOME, /usr/local/cuda) checked against the
// CUDA that the command's torch was built with. A toolkit that matches
// torch replaces a mismatching nvcc (CUDA_HOME, PATH, CUDACXX and
// PYTORCH_NVCC); without one, another major release stops the build before
// the command runs and another minor release is a warning.
#pragma once

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/toolkit/framework_check.h"

namespace distcc_cuda::client {

struct ToolkitRequest {
  // --toolkit: "", "auto", a release ("13.2", "13.2.86"), or a folder (a
  // CUDA_HOME) or an nvcc.
  std::string toolkit;
  // The nvcc the build uses without a toolkit (ResolveNvcc's answer), and
  // whether --nvcc named it (then it is not replaced without --toolkit).
  absl::StatusOr<std::string> nvcc;
  bool nvcc_named = false;
  // `build -- COMMAND`'s command; empty for a plan (no torch is looked for
  // then, unless --toolkit auto asks, in python3's).
  std::vector<std::string> command;
  std::string working_directory;
  std::string toolkit_dir;   // the ToolkitStore's folder
  std::string python;        // whose pip installs toolkits ("python3")
  PythonLookup environment;  // finds the command's Python
};

struct BuildToolkit {
  std::string nvcc;       // the build's nvcc
  std::string cuda_home;  // set when a toolkit took the place of the nvcc
  // Lines to print before the build: the toolkit chosen, or a warning.
  std::vector<std::string> notes;
};

// FAILED_PRECONDITION, one line naming torch's release, the nvcc's release
// and path and the command that fixes it, when the build must not start;
// other errors for a --toolkit that cannot be had. Installs say what they
// do on `progress`.
absl::StatusOr<BuildToolkit> ChooseBuildToolkit(const ToolkitRequest& request,
                                                std::ostream& progress);

// What the command's environment gets for `toolkit`: nothing when no
// toolkit replaced the nvcc; else CUDA_HOME, CUDA_PATH, CUDACXX and PATH
// with its bin/ first.
std::vector<std::pair<std::string, std::string>> ToolkitEnvironment(const BuildToolkit& toolkit,
                                                                    const std::string& path);

}  // namespace distcc_cuda::client
