// SPDX-License-Identifier: Apache-2.0
// Who may call what: the role rules of each trust mode, and which listen
// addresses count as loopback.
#include "coordinator/trust/access_control.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace distcc_cuda::coordinator {
namespace {

using ::testing::HasSubstr;

std::string CertificateOf(PeerRole role, const std::string& name) {
  absl::StatusOr<CertificateAuthority> ca = NewCertificateAuthority("access-test");
  EXPECT_TRUE(ca.ok()) << ca.status();
  IssueOptions options;
  options.role = role;
  options.name = name;
  if (role == PeerRole::kCoordinator) options.hosts = {"127.0.0.1"};
  absl::StatusOr<IssuedCertificate> issued = IssueCertificate(*ca, options);
  EXPECT_TRUE(issued.ok()) << issued.status();
  return issued.ok() ? issued->certificate_pem : "";
}

TEST(AccessControlTest, MutualTlsTakesTheRoleAndNameFromTheCertificate) {
  AccessControl access(AccessControl::Mode::kMutualTls);
  absl::StatusOr<Principal> worker = access.AuthorizeCertificate(
      CertificateOf(PeerRole::kWorker, "gpu-3"), {PeerRole::kWorker}, "register a worker");
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_TRUE(worker->authenticated);
  EXPECT_EQ(worker->role, PeerRole::kWorker);
  EXPECT_EQ(worker->name, "gpu-3");
}

TEST(AccessControlTest, MutualTlsRefusesOtherRolesNamingBoth) {
  AccessControl access(AccessControl::Mode::kMutualTls);
  absl::StatusOr<Principal> client = access.AuthorizeCertificate(
      CertificateOf(PeerRole::kClient, "alice"), {PeerRole::kWorker}, "register a worker");
  EXPECT_TRUE(absl::IsPermissionDenied(client.status())) << client.status();
  EXPECT_THAT(client.status().message(),
              HasSubstr("a client certificate (alice) cannot register a worker; that needs a "
                        "worker certificate"));
  absl::StatusOr<Principal> coordinator =
      access.AuthorizeCertificate(CertificateOf(PeerRole::kCoordinator, "coord"),
                                  {PeerRole::kClient, PeerRole::kWorker}, "use the content store");
  EXPECT_TRUE(absl::IsPermissionDenied(coordinator.status())) << coordinator.status();
  EXPECT_THAT(coordinator.status().message(), HasSubstr("needs a client or worker certificate"));
}

TEST(AccessControlTest, MutualTlsWithoutACertificateIsUnauthenticated) {
  AccessControl access(AccessControl::Mode::kMutualTls);
  absl::StatusOr<Principal> none =
      access.AuthorizeCertificate(std::nullopt, {PeerRole::kClient}, "submit builds");
  EXPECT_TRUE(absl::IsUnauthenticated(none.status())) << none.status();
  EXPECT_THAT(none.status().message(), HasSubstr("--tls-cert"));
}

TEST(AccessControlTest, MutualTlsRefusesACertificateWithoutARole) {
  AccessControl access(AccessControl::Mode::kMutualTls);
  absl::StatusOr<CertificateAuthority> ca = NewCertificateAuthority("roleless");
  ASSERT_TRUE(ca.ok());
  absl::StatusOr<Principal> principal =
      access.AuthorizeCertificate(ca->certificate_pem, {PeerRole::kClient}, "submit builds");
  EXPECT_TRUE(absl::IsPermissionDenied(principal.status())) << principal.status();
}

// Each certificate is read once and remembered: asked again, in any order,
// each still gets its own role, name and verdict, never another's.
TEST(AccessControlTest, RememberedCertificatesKeepTheirOwnIdentities) {
  AccessControl access(AccessControl::Mode::kMutualTls);
  const std::string worker = CertificateOf(PeerRole::kWorker, "gpu-1");
  const std::string client = CertificateOf(PeerRole::kClient, "alice");
  absl::StatusOr<CertificateAuthority> ca = NewCertificateAuthority("roleless");
  ASSERT_TRUE(ca.ok());
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<Principal> w =
        access.AuthorizeCertificate(worker, {PeerRole::kWorker}, "register a worker");
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->name, "gpu-1");
    absl::StatusOr<Principal> c =
        access.AuthorizeCertificate(client, {PeerRole::kClient}, "submit builds");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->name, "alice");
    EXPECT_EQ(c->role, PeerRole::kClient);
    // The same remembered client certificate, for a call it may not make.
    EXPECT_TRUE(absl::IsPermissionDenied(
        access.AuthorizeCertificate(client, {PeerRole::kWorker}, "register a worker").status()));
    EXPECT_TRUE(absl::IsPermissionDenied(
        access.AuthorizeCertificate(ca->certificate_pem, {PeerRole::kClient}, "submit builds")
            .status()));
  }
}

TEST(AccessControlTest, WithoutTlsEveryPeerIsAClientAndAWorkerButNothingMore) {
  const std::pair<AccessControl::Mode, bool> modes[] = {{AccessControl::Mode::kLocalTrust, true},
                                                        {AccessControl::Mode::kInsecure, false}};
  for (const auto& [mode, authenticated] : modes) {
    AccessControl access(mode);
    for (PeerRole role : {PeerRole::kClient, PeerRole::kWorker}) {
      absl::StatusOr<Principal> principal =
          access.AuthorizeCertificate(std::nullopt, {role}, "do it");
      ASSERT_TRUE(principal.ok()) << principal.status();
      EXPECT_EQ(principal->role, role);
      EXPECT_EQ(principal->authenticated, authenticated);
      EXPECT_EQ(principal->name, authenticated ? "local" : "anonymous");
    }
    EXPECT_TRUE(absl::IsPermissionDenied(
        access.AuthorizeCertificate(std::nullopt, {PeerRole::kCoordinator}, "do it").status()));
  }
}

}  // namespace
}  // namespace distcc_cuda::coordinator
