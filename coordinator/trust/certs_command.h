// SPDX-License-Identifier: Apache-2.0
// `distcc-cuda-coordinator certs init|issue`: make the cluster's CA and issue
// the role certificates of its coordinator, workers and clients.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace distcc_cuda::coordinator {

// What `distcc-cuda-coordinator certs --help` prints.
extern const char kCertsUsage[];

// Runs `certs` with `args`, the arguments after "certs":
//   init --dir DIR [--cluster NAME]
//   issue --dir DIR --role client|worker|coordinator [--host HOST]... NAME
//   --help
// and prints what it wrote and the next step to `out`. INVALID_ARGUMENT for
// a malformed command line (the message ends with where to find the usage);
// otherwise the errors of InitCertificateAuthority and IssueCertificateFiles.
absl::Status RunCertsCommand(const std::vector<std::string>& args, std::ostream& out);

}  // namespace distcc_cuda::coordinator
