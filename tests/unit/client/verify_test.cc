// SPDX-License-Identifier: Apache-2.0
#include "client/verify.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace distcc_cuda::client
