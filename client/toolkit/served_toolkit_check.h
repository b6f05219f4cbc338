// SPDX-License-Identifier: Apache-2.0
// What a client asks a toolkit it fetched from a coordinator before it
// installs it (`distcc-cuda toolkit install RELEASE --coordinator`): which
// nvcc it is. The coordinator's programs are hostile until its operator's
// digest is pinned, so they run as a worker's compile does: in a
// bubblewrap sandbox (as an unprivileged user when the client is root, no
// network, nothing of this user's but the toolkit, read-only) under a
// memory cap. Without a sandbox on this machine a pinned toolkit is asked
// as it is, and an unpinned one is refused.
#pragma once

#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "common/nvcc/toolchain.h"

namespace distcc_cuda::client {

// `nvcc --version` of the fetched toolkit at `cuda_home` (its bin/nvcc),
// confined as above. `pin_hint` is the pinned form of the toolkit
// ("13.2@sha256:HEX") and `pinned` whether it was asked for so.
// FAILED_PRECONDITION for an unpinned toolkit where no sandbox can be
// made, saying why and how to pin it; AskNvccRelease's errors otherwise.
absl::StatusOr<NvccRelease> AskServedNvcc(const std::string& cuda_home, bool pinned,
                                          const std::string& pin_hint, std::ostream& progress);

}  // namespace distcc_cuda::client
