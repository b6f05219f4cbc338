// SPDX-License-Identifier: Apache-2.0
// `distcc-cuda-coordinator revoke`: stop trusting a worker identity (a
// stolen key, a broken machine). It writes the state dir's revocation list,
// which a running coordinator reads again within a second: the identity's
// calls are refused, its workers dropped and its cached results removed.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace distcc_cuda::coordinator {

// What `distcc-cuda-coordinator revoke --help` prints.
extern const char kRevokeUsage[];

// Runs `revoke` with `args`, the arguments after "revoke":
//   --state-dir DIR [--reason TEXT] NAME
//   --state-dir DIR --lift NAME
//   --state-dir DIR --list
// and prints what it did to `out`. INVALID_ARGUMENT for a malformed command
// line or name; NOT_FOUND for --lift of a name not revoked, or a state dir
// that does not exist.
absl::Status RunRevokeCommand(const std::vector<std::string>& args, std::ostream& out);

}  // namespace distcc_cuda::coordinator
