// SPDX-License-Identifier: Apache-2.0
#include "coordinator/memory/unit_prior.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace distcc_cuda::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(UnitPriorsTest, TheBuiltInTableKnowsFlashAttentionsKernelsAndCutlassGemms) {
  const UnitPriors& priors = UnitPriors::Builtin();
  ASSERT_GE(priors.rows().size(), 10u) << "coordinator/memory/data/unit_priors.csv did not parse";
  EXPECT_THAT(
      priors.MarkersIn({"/src/fa/csrc/flash_attn/src/flash_bwd_launch_template.h",
                        "include/cutlass/gemm/collective/collective_builder.hpp",
                        "include/cutlass/epilogue/collective/collective_builder.hpp", "k.cu"}),
      ElementsAre("cutlass/gemm/collective/collective_builder.hpp", "flash_bwd_launch_template.h"));
  // A marker ends a path at a folder's edge.
  EXPECT_TRUE(priors.MarkersIn({"src/my_flash_bwd_launch_template.h"}).empty());
  EXPECT_TRUE(priors.MarkersIn({"cutlass/library/handle.h", "all_sm100_operations.cu"}).empty());
}

TEST(UnitPriorsTest, AUnitCostsWhatItsKindMeasuredAtItsSize) {
  const UnitPriors& priors = UnitPriors::Builtin();
  const std::vector<std::string> bwd = {"flash_bwd_launch_template.h"};
  const std::vector<std::string> fwd = {"flash_fwd_launch_template.h"};
  // Measured sizes are the table's own rows.
  EXPECT_EQ(priors.CostOf(bwd, "src/flash_bwd_hdim256_fp16_sm80.cu")->peak_bytes, 7069 * kMiB);
  EXPECT_EQ(priors.CostOf(bwd, "flash_bwd_hdim64_bf16_causal_sm80.cu")->wall, absl::Seconds(143.1));
  // Between two, linear: hdim96 is halfway from 64 to 128.
  std::optional<PriorCost> hdim96 = priors.CostOf(bwd, "flash_bwd_hdim96_fp16_sm80.cu");
  ASSERT_TRUE(hdim96);
  EXPECT_NEAR(static_cast<double>(hdim96->peak_bytes), (6383 + 6096) / 2.0 * kMiB, kMiB);
  EXPECT_THAT(hdim96->measured, HasSubstr("flash_bwd_hdim64"));
  // Beyond them, the nearest; without a size, the dearest.
  EXPECT_EQ(priors.CostOf(fwd, "flash_fwd_hdim32_fp16_sm80.cu")->peak_bytes, 3960 * kMiB);
  EXPECT_EQ(priors.CostOf(fwd, "flash_fwd_kernel.cu")->peak_bytes, 4685 * kMiB);
  // The rows of a word the file name holds go first: split-KV kernels
  // include the forward template too, and take longer.
  EXPECT_EQ(priors.CostOf(fwd, "flash_fwd_split_hdim128_bf16_sm80.cu")->wall, absl::Seconds(239.6));
  EXPECT_EQ(priors.CostOf(fwd, "flash_fwd_hdim128_bf16_sm80.cu")->wall, absl::Seconds(144.4));
  // Of two kinds, the dearer; of none, nothing.
  EXPECT_EQ(priors
                .CostOf({"flash_bwd_launch_template.h", "flash_fwd_launch_template.h"},
                        "flash_hdim128.cu")
                ->peak_bytes,
            6096 * kMiB);
  EXPECT_EQ(priors
                .CostOf({"cutlass/gemm/collective/collective_builder.hpp"},
                        "cutlass3x_sm100_tensorop_gemm_f16_f16_f32_f16_f16_256x128x64.cu")
                ->peak_bytes,
            3605 * kMiB);
  EXPECT_FALSE(priors.CostOf({}, "flash_fwd_hdim128.cu").has_value());
}

TEST(UnitPriorsTest, ALineThatDoesNotParseIsNamed) {
  const std::string header =
      "# comment\nmarker,name_word,size_word,size,peak_mib,wall_s,measured\n";
  EXPECT_TRUE(UnitPriors::Parse(header + "a.h,,,,100,1.5,here\n").ok());
  for (const std::string& line :
       {"a.h,,,,many,1.5,here", "a.h,,,,100,-1,here", "a.h,,hdim,,100,1,here",
        "a.h,,,64,100,1,here", ",,,,100,1,here", "a.h,,,,100"}) {
    absl::StatusOr<UnitPriors> parsed = UnitPriors::Parse(header + line + "\n");
    ASSERT_FALSE(parsed.ok()) << line;
    EXPECT_THAT(parsed.status().message(), HasSubstr("line 3")) << line;
  }
}

}  // namespace
}  // namespace distcc_cuda::coordinator
