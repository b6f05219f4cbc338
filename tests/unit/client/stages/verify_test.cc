// SPDX-License-Identifier: Apache-2.0
#include "client/stages/verify.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <sstream>

#include "common/base/files.h"
#include "distcc_cuda/v1/cas.grpc.pb.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ParseVerifySampleTest, AllACountOrNothing) {
  EXPECT_EQ(*ParseVerifySample(""), 0);
  EXPECT_EQ(*ParseVerifySample("0"), 0);
  EXPECT_EQ(*ParseVerifySample("3"), 3);
  EXPECT_EQ(*ParseVerifySample("all"), -1);
  for (const char* bad : {"-1", "some", "3x", "ALL"}) {
    absl::StatusOr<int> sample = ParseVerifySample(bad);
    EXPECT_EQ(sample.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(sample.status().message()), HasSubstr("\"all\"")) << bad;
  }
}

TEST(PickVerifySampleTest, SpreadsOverTheBuildFromFirstToLast) {
  EXPECT_THAT(PickVerifySample(10, 0), IsEmpty());
  EXPECT_THAT(PickVerifySample(0, 3), IsEmpty());
  EXPECT_THAT(PickVerifySample(10, 1), ElementsAre(0));
  EXPECT_THAT(PickVerifySample(10, 3), ElementsAre(0, 4, 9));
  EXPECT_THAT(PickVerifySample(3, 5), ElementsAre(0, 1, 2));
  EXPECT_THAT(PickVerifySample(4, -1), ElementsAre(0, 1, 2, 3));
}

// The units to rebuild come from the coordinator: one the argument model
// refuses (here a shell payload in -Xcompiler) is refused before anything
// is fetched or run, and no sandbox is needed to say so.
TEST(VerifyUnitsTest, UnitTheArgumentModelRefusesIsRefusedBeforeAnythingRuns) {
  const std::string dir = testing::NewTempDir("verify-");
  const std::string marker = dir + "/ran";
  UnitToVerify hostile;
  hostile.unit.set_name("evil");
  for (const std::string& argument :
       {std::string("-Xcompiler"), "-O2;touch " + marker + " #", std::string("-c"),
        std::string("k.cu"), std::string("-o"), std::string("k.cu.o")}) {
    hostile.unit.add_arguments(argument);
  }
  hostile.unit.add_output_paths("k.cu.o");
  hostile.worker = "w";
  hostile.returned_object = dir + "/k.o";
  // A channel to nowhere: nothing may be fetched.
  CasClient cas(v1::ContentStore::NewStub(
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials())));
  std::ostringstream out;
  absl::Status status = VerifyUnits({hostile}, cas, "/usr/local/cuda/bin/nvcc", dir + "/work", out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("verify: the coordinator sent a unit this machine will not run"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("evil"));
  EXPECT_FALSE(IsRegularFile(marker));
  EXPECT_TRUE(out.str().empty());
}

}  // namespace
}  // namespace distcc_cuda::client
