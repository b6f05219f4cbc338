// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/compile_identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace distcc_cuda {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(CompileIdentitiesInTest, ReadsTheNamespaceAsLongAsItsMangledLength) {
  // The length says where the name ends: the digits after it ("4cuda")
  // belong to the next part of the mangled name.
  EXPECT_THAT(CompileIdentitiesIn("_ZN39_INTERNAL_3213af3b_7_nine_cu_8dcdb371_84cuda3std3__45__"
                                  "cpo5beginE"),
              ElementsAre("3213af3b_7_nine_cu_8dcdb371_8"));
  EXPECT_THAT(CompileIdentitiesIn("_ZN40_GLOBAL__N__fa8334aa_6_mix_cu_d5f40d93_82akEPf"),
              ElementsAre("fa8334aa_6_mix_cu_d5f40d93_8"));
  // After L (internal linkage) and Z (a local name) too; several, sorted.
  EXPECT_THAT(CompileIdentitiesIn("x _ZL34_INTERNAL_ba677d2d_4_k_cu_984d2b28 y "
                                  "_ZN39_INTERNAL_3213af3b_7_nine_cu_8dcdb371_9E"),
              ElementsAre("3213af3b_7_nine_cu_8dcdb371_9", "ba677d2d_4_k_cu_984d2b28"));
}

TEST(CompileIdentitiesInTest, WhatCannotBeReadSurelyIsNotRead) {
  EXPECT_THAT(CompileIdentitiesIn(""), IsEmpty());
  EXPECT_THAT(CompileIdentitiesIn("_INTERNAL_3213af3b"), IsEmpty()) << "no length before it";
  // Digits after a letter other than N, Z, L may end the name before.
  EXPECT_THAT(CompileIdentitiesIn("_ZN4abc139_INTERNAL_3213af3b_7_nine_cu_8dcdb371_8E"), IsEmpty());
  EXPECT_THAT(CompileIdentitiesIn("N99_INTERNAL_short"), IsEmpty()) << "runs past the end";
  EXPECT_THAT(CompileIdentitiesIn("N14_INTERNAL_ab cdE"), IsEmpty()) << "not an identifier";
  EXPECT_THAT(CompileIdentitiesIn("N10_INTERNAL_"), IsEmpty()) << "nothing after the prefix";
  EXPECT_THAT(CompileIdentitiesIn("N123456_INTERNAL_x"), IsEmpty()) << "no such length";
}

TEST(CheckOneCompileIdentityTest, SaysWhatItCannotRead) {
  absl::Status status = CheckOneCompileIdentity("not an object", "unit x");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("unit x"));
}

}  // namespace
}  // namespace distcc_cuda
