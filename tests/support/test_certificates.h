// SPDX-License-Identifier: Apache-2.0
// Certificates for tests: one of a role and name from a test CA, as the
// issued files or as the material a program loads.
#pragma once

#include <string>
#include <vector>

#include "common/transport/certificates.h"
#include "common/transport/tls_credentials.h"

namespace distcc_cuda::testing {

// A certificate of `role` named `name` from `ca` (hosts for a
// coordinator's); a failed gtest expectation and an empty one on error.
IssuedCertificate IssueForTest(const CertificateAuthority& ca, PeerRole role,
                               const std::string& name, std::vector<std::string> hosts = {});

// The same, as the TLS material of its holder (CA, certificate, key).
TlsMaterial MaterialForTest(const CertificateAuthority& ca, PeerRole role, const std::string& name,
                            std::vector<std::string> hosts = {});

}  // namespace distcc_cuda::testing
