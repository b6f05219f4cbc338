// SPDX-License-Identifier: Apache-2.0
// The `distcc-cuda status` and `distcc-cuda inspect` commands.
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/transport/tls_credentials.h"

namespace distcc_cuda::client {

// Prints the coordinator's workers (toolchain, cap, slots, load) and the work
// in flight, asking over mutual TLS with `tls` (a client certificate).
// UNAVAILABLE naming the address if it cannot be reached; the coordinator's
// code (PERMISSION_DENIED, UNAUTHENTICATED) if it refuses.
absl::Status RunStatus(const std::string& coordinator_address, absl::Duration connect_timeout,
                       std::ostream& out, const std::optional<TlsMaterial>& tls = std::nullopt);

struct StatusWatchOptions {
  absl::Duration interval = absl::Seconds(1);
  int frames = 0;         // 0: until interrupted
  bool terminal = false;  // redraw in place (ANSI); otherwise one view after another
  int width = 100;
};
// `status --watch`: the cluster view (RenderClusterView) every `interval`,
// in place on a terminal. A coordinator that stops answering leaves the last
// view up with why; the first answer's errors are RunStatus's.
absl::Status RunStatusWatch(const std::string& coordinator_address, absl::Duration connect_timeout,
                            const StatusWatchOptions& watch, std::ostream& out,
                            const std::optional<TlsMaterial>& tls = std::nullopt);

// Prints one line per device image in the fatbinary of an object, library or
// executable: "sm_100 cubin", "compute_100 ptx". A cubin of no kernel says
// so (a source of host code only, or the sm_75 image of `nvcc -shared`'s
// device link).
absl::Status RunInspect(const std::string& path, std::ostream& out);

}  // namespace distcc_cuda::client
