// SPDX-License-Identifier: Apache-2.0
// `distcc-cuda-coordinator toolkit add|list|remove`: the toolkits the
// coordinator serves to its workers and clients (served_toolkits.h).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace distcc_cuda::coordinator {

// What `distcc-cuda-coordinator toolkit --help` prints.
extern const char kToolkitUsage[];

// Runs `toolkit` with `args`, the arguments after "toolkit":
//   add --state-dir DIR FOLDER | list --state-dir DIR | remove --state-dir DIR VERSION
// and prints what it did to `out`. INVALID_ARGUMENT for a malformed command
// line.
absl::Status RunToolkitCommand(const std::vector<std::string>& args, std::ostream& out);

}  // namespace distcc_cuda::coordinator
