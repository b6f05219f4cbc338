// SPDX-License-Identifier: Apache-2.0
// `distcc-cuda-coordinator certs`: its command line, what it writes and what
// it tells the operator to do next.
#include "coordinator/trust/certs_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

#include "common/base/files.h"
#include "common/transport/certificates.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::coordinator {
namespace {

using ::testing::HasSubstr;

absl::Status Certs(const std::vector<std::string>& args, std::string* out = nullptr) {
  std::ostringstream stream;
  absl::Status status = RunCertsCommand(args, stream);
  if (out != nullptr) *out = stream.str();
  return status;
}

TEST(CertsCommandTest, InitThenIssueEachRole) {
  std::string dir = testing::NewTempDir("certs-") + "/pki";
  std::string out;
  ASSERT_TRUE(Certs({"init", "--dir", dir, "--cluster=lab"}, &out).ok()) << out;
  EXPECT_THAT(out, HasSubstr("wrote " + dir + "/ca.crt"));
  EXPECT_THAT(out, HasSubstr("next: distcc-cuda-coordinator certs issue --dir " + dir));

  absl::Status status = Certs({"issue", "--dir", dir, "--role", "coordinator", "--host", "10.0.0.5",
                               "--host", "coord.example.com", "coord"},
                              &out);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(out, HasSubstr("clients and workers must dial it as one of: 10.0.0.5, "
                             "coord.example.com"));
  ASSERT_TRUE(Certs({"issue", "--dir=" + dir, "--role=worker", "gpu-1"}, &out).ok());
  EXPECT_THAT(out, HasSubstr("distcc-cuda-worker --coordinator HOST:3633 --name gpu-1 --tls-ca"));
  ASSERT_TRUE(Certs({"issue", "--dir", dir, "alice", "--role", "client"}, &out).ok());
  EXPECT_THAT(out, HasSubstr("distcc-cuda build PLAN"));

  const std::pair<const char*, PeerRole> issued[] = {{"coord", PeerRole::kCoordinator},
                                                     {"gpu-1", PeerRole::kWorker},
                                                     {"alice", PeerRole::kClient}};
  for (const auto& [name, role] : issued) {
    absl::StatusOr<std::string> pem = ReadFile(dir + "/" + name + ".crt");
    ASSERT_TRUE(pem.ok()) << pem.status();
    absl::StatusOr<CertificateIdentity> identity = IdentityOfCertificate(*pem);
    ASSERT_TRUE(identity.ok()) << identity.status();
    EXPECT_EQ(identity->role, role);
    EXPECT_EQ(identity->name, name);
  }
}

TEST(CertsCommandTest, MalformedCommandLinesAreInvalidAndPointAtTheHelp) {
  std::string dir = testing::NewTempDir("certs-");
  const std::vector<std::string> cases[] = {
      {},
      {"renew"},
      {"init"},
      {"init", "--dir"},
      {"init", "--dir", dir, "extra"},
      {"init", "--dir", dir, "--role", "worker"},
      {"issue", "--dir", dir, "--role", "worker"},
      {"issue", "--dir", dir, "--role", "admin", "x"},
      {"issue", "--dir", dir, "--dir", dir, "--role", "worker", "x"},
      {"issue", "--dir", dir, "--role", "worker", "a", "b"},
      {"issue", "--dir", dir, "--role", "worker", "-", "x"}};
  for (const std::vector<std::string>& args : cases) {
    absl::Status status = Certs(args);
    EXPECT_TRUE(absl::IsInvalidArgument(status))
        << ::testing::PrintToString(args) << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr("certs --help")) << ::testing::PrintToString(args);
  }
  EXPECT_FALSE(IsRegularFile(dir + "/ca.crt")) << "a malformed command wrote something";
}

TEST(CertsCommandTest, HelpPrintsTheUsage) {
  std::string out;
  ASSERT_TRUE(Certs({"--help"}, &out).ok());
  EXPECT_THAT(out, HasSubstr("certs issue --dir DIR --role ROLE"));
  ASSERT_TRUE(Certs({"issue", "--help"}, &out).ok());
  EXPECT_THAT(out, HasSubstr("certs init --dir DIR"));
}

TEST(CertsCommandTest, ErrorsOfTheLibraryPassThrough) {
  std::string dir = testing::NewTempDir("certs-");
  absl::Status status = Certs({"issue", "--dir", dir, "--role", "worker", "w"});
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
  ASSERT_TRUE(Certs({"init", "--dir", dir}).ok());
  status = Certs({"init", "--dir", dir});
  EXPECT_TRUE(absl::IsAlreadyExists(status)) << status;
}

}  // namespace
}  // namespace distcc_cuda::coordinator
