// SPDX-License-Identifier: Apache-2.0
#include "tests/support/test_certificates.h"

#include <gtest/gtest.h>

namespace distcc_cuda::testing {

IssuedCertificate IssueForTest(const CertificateAuthority& ca, PeerRole role,
                               const std::string& name, std::vector<std::string> hosts) {
  IssueOptions options;
  options.role = role;
  options.name = name;
  options.hosts = std::move(hosts);
  absl::StatusOr<IssuedCertificate> issued = IssueCertificate(ca, options);
  EXPECT_TRUE(issued.ok()) << issued.status();
  return issued.ok() ? *issued : IssuedCertificate{};
}

TlsMaterial MaterialForTest(const CertificateAuthority& ca, PeerRole role, const std::string& name,
                            std::vector<std::string> hosts) {
  return FromIssued(ca, IssueForTest(ca, role, name, std::move(hosts)));
}

}  // namespace distcc_cuda::testing
