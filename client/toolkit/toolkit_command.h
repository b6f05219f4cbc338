// SPDX-License-Identifier: Apache-2.0
// `distcc-cuda toolkit install|list|remove`: the toolkits this user's builds
// can switch to (ToolkitStore), installed from PyPI's NVIDIA wheels.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/nvcc/toolkit_download.h"
#include "common/transport/tls_credentials.h"

namespace distcc_cuda::client {

struct ToolkitCommandOptions {
  std::vector<std::string> words;  // after "toolkit": the verb and its release
  std::string toolkit_dir;
  std::string python;  // whose pip fetches from PyPI
  // A coordinator named (--coordinator, $DISTCC_CUDA_COORDINATOR): install
  // takes the toolkit it serves, PyPI's only when it serves none of the
  // release.
  std::string coordinator;
  std::optional<TlsMaterial> tls;
  // --toolkit-pin: the manifest digests a coordinator's toolkits are taken
  // with, by release ("13.2@sha256:HEX"); a pin in the command's RELEASE wins.
  std::vector<WantedToolkit> pins;
  ToolkitFetchLimits limits;  // --toolkit-max-size, -stall-timeout, -fetch-timeout
};

// Runs the verb. `install RELEASE[@sha256:HEX]` writes the toolkit's folder (a CUDA_HOME) as the
// last line of `out` and its progress on `progress`; `list` writes one line
// per toolkit, its content checked against its manifest; `remove` says what
// it removed. INVALID_ARGUMENT naming the usage for anything else.
absl::Status RunToolkitCommand(const ToolkitCommandOptions& options, std::ostream& out,
                               std::ostream& progress);

}  // namespace distcc_cuda::client
