// SPDX-License-Identifier: Apache-2.0
// The `distcc-cuda status` and `distcc-cuda inspect` commands.
#pragma once

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace distcc_cuda::client {

// Prints the coordinator's workers (toolchain, cap, slots, load) and the work
// in flight. UNAVAILABLE naming the address if it cannot be reached.
absl::Status RunStatus(const std::string& coordinator_address, absl::Duration connect_timeout,
                       std::ostream& out);

// Prints one line per device image in the fatbinary of an object, library or
// executable: "sm_100 cubin", "compute_100 ptx".
absl::Status RunInspect(const std::string& path, std::ostream& out);

}  // namespace distcc_cuda::client
