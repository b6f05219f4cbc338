// SPDX-License-Identifier: Apache-2.0
#include "coordinator/trust/revocations.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/base/files.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

TEST(RevocationsTest, AMissingFileRevokesNobody) {
  std::string dir = testing::NewTempDir("revocations-");
  auto revocations = WorkerRevocations::Open(RevocationsPathIn(dir));
  ASSERT_TRUE(revocations.ok()) << revocations.status();
  EXPECT_FALSE((*revocations)->IsRevoked("gpu-1"));
  EXPECT_TRUE((*revocations)->List().empty());
}

TEST(RevocationsTest, ARevocationOutlivesItsWriterAndReachesAReaderOnReload) {
  std::string dir = testing::NewTempDir("revocations-");
  auto coordinator = *WorkerRevocations::Open(RevocationsPathIn(dir));
  auto command = *WorkerRevocations::Open(RevocationsPathIn(dir));
  EXPECT_TRUE(*command->Revoke("gpu-1", "stolen key", kNow));
  EXPECT_FALSE(*command->Revoke("gpu-1", "again", kNow)) << "revoked already";
  EXPECT_FALSE(coordinator->IsRevoked("gpu-1")) << "not read yet";
  EXPECT_THAT(*coordinator->Reload(), ElementsAre("gpu-1"));
  EXPECT_TRUE(coordinator->IsRevoked("gpu-1"));
  EXPECT_TRUE(coordinator->Reload()->empty()) << "nothing new";
  EXPECT_EQ(coordinator->Find("gpu-1")->reason, "stolen key");
  EXPECT_EQ(coordinator->Find("gpu-1")->since_unix_seconds, 1'800'000'000);

  // Each writer keeps the other's lines.
  EXPECT_TRUE(*coordinator->Revoke("gpu-2", "quarantined", kNow));
  EXPECT_THAT(*command->Reload(), ElementsAre("gpu-2"));
  ASSERT_TRUE(command->Lift("gpu-1").ok());
  EXPECT_TRUE(coordinator->Reload()->empty());
  EXPECT_FALSE(coordinator->IsRevoked("gpu-1"));
  EXPECT_TRUE(coordinator->IsRevoked("gpu-2"));
  EXPECT_EQ(command->Lift("gpu-1").code(), absl::StatusCode::kNotFound);
  auto reopened = *WorkerRevocations::Open(RevocationsPathIn(dir));
  ASSERT_EQ(reopened->List().size(), 1u);
  EXPECT_EQ(reopened->List()[0].name, "gpu-2");
}

TEST(RevocationsTest, NamesAreCertificateNamesAndReasonsOnePrintableLine) {
  std::string dir = testing::NewTempDir("revocations-");
  auto revocations = *WorkerRevocations::Open(RevocationsPathIn(dir));
  EXPECT_EQ(revocations->Revoke("../etc", "x", kNow).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(revocations->Revoke("a\tb", "x", kNow).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(revocations->Revoke("gpu-1", "line\nFORGED\x1b[2J\tline", kNow).ok());
  EXPECT_EQ(revocations->Find("gpu-1")->reason, "line FORGED [2J line");
  ASSERT_TRUE(revocations->Revoke("gpu-2", std::string(1000, 'r'), kNow).ok());
  EXPECT_EQ(revocations->Find("gpu-2")->reason.size(), 300u);
}

TEST(RevocationsTest, AMalformedLineIsAnErrorNamingItAndTheLastListIsKept) {
  std::string dir = testing::NewTempDir("revocations-");
  std::string path = RevocationsPathIn(dir);
  ASSERT_TRUE(WriteFileAtomically(path, "# comment\ngpu-1\t1\tok\n").ok());
  auto revocations = *WorkerRevocations::Open(path);
  EXPECT_TRUE(revocations->IsRevoked("gpu-1"));
  ASSERT_TRUE(WriteFileAtomically(path, "# comment\ngpu-1\t1\tok\ngpu-2 no tabs\n").ok());
  absl::StatusOr<std::vector<std::string>> reread = revocations->Reload();
  ASSERT_FALSE(reread.ok());
  EXPECT_THAT(reread.status().message(), HasSubstr(path + ":3: not NAME<TAB>SECONDS<TAB>REASON"));
  EXPECT_TRUE(revocations->IsRevoked("gpu-1"));
  EXPECT_FALSE(WorkerRevocations::Open(path).ok());
}

}  // namespace
}  // namespace distcc_cuda::coordinator
