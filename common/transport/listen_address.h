// SPDX-License-Identifier: Apache-2.0
// Addresses a server listens on (HOST:PORT, [IPV6]:PORT): which of them only
// this machine can reach. The coordinator's gRPC listener and every HTTP
// listener (metrics, dashboard) follow the same rule: loopback is served
// without credentials, anything else only when the operator says so.
#pragma once

#include "absl/strings/string_view.h"

namespace distcc_cuda {

// True if the HOST of `listen_address` (HOST:PORT, [IPV6]:PORT) can only be
// reached from this machine: 127.0.0.0/8, ::1 or localhost.
bool IsLoopbackAddress(absl::string_view listen_address);

}  // namespace distcc_cuda
