// SPDX-License-Identifier: Apache-2.0
// The cluster as `distcc-cuda status --watch` draws it in a terminal: each
// worker with a memory bar (in use, reserved, cap) and the units it runs,
// elapsed against predicted; the queue; the builds running and lately
// ended. The same view as the coordinator's dashboard, as text.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::client {

// `status` as lines of at most about `width` columns (names are cut, not
// wrapped); `now` dates the recent builds. Every text from the coordinator
// is made terminal-safe.
std::string RenderClusterView(const v1::ClusterStatus& status, const std::string& address,
                              absl::Time now, int width = 100);

// A bar of `width` cells for a worker's memory: '#' in use, '+' reserved
// beyond what is in use, '.' free under the cap.
std::string MemoryBar(int64_t used_bytes, int64_t reserved_bytes, int64_t cap_bytes, int width);

}  // namespace distcc_cuda::client
