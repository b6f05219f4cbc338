// SPDX-License-Identifier: Apache-2.0
// `distcc-cuda build PLAN`: scan, upload, submit, follow, download, link.
#pragma once

#include <ostream>

#include "absl/status/status.h"
#include "client/plan/build_options.h"

namespace distcc_cuda::client {

// Runs the build and prints progress, compiler messages and a summary to
// `out`. Returns OK when the library was linked. A unit that fails to compile,
// or the link, gives ABORTED after the compiler's messages were printed;
// FAILED_PRECONDITION when no worker can take the build; UNAVAILABLE names the
// address of a coordinator that cannot be reached; INVALID_ARGUMENT or
// NOT_FOUND for a bad plan; CANCELLED once `cancel` was cancelled.
absl::Status RunBuild(const BuildOptions& options, std::ostream& out);

}  // namespace distcc_cuda::client
