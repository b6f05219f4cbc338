// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/gpu_targets.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <future>

#include "common/base/files.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::optional<std::vector<std::string>> Images(const std::vector<std::string>& arguments) {
  return DeviceImagesOf(arguments);
}

TEST(DeviceImagesTest, AreWhatTheTargetOptionsAskFor) {
  EXPECT_THAT(*Images({"-gencode", "arch=compute_100,code=sm_100", "-c", "k.cu"}),
              ElementsAre("sm_100"));
  EXPECT_THAT(*Images({"-gencode=arch=compute_100,code=[sm_100,compute_100]"}),
              ElementsAre("compute_100", "sm_100"));
  // flash-attention's setup.py for FLASH_ATTN_CUDA_ARCHS=100.
  EXPECT_THAT(*Images({"-gencode", "arch=compute_100f,code=sm_100", "--threads", "4"}),
              ElementsAre("sm_100"));
  // CMake's CMAKE_CUDA_ARCHITECTURES=100: --generate-code=arch=...,code=[...].
  EXPECT_THAT(*Images({"--generate-code=arch=compute_100,code=[compute_100,sm_100]"}),
              ElementsAre("compute_100", "sm_100"));
  EXPECT_THAT(*Images({"-arch=sm_90"}), ElementsAre("compute_90", "sm_90"));
  EXPECT_THAT(*Images({"-arch", "compute_90", "-code", "sm_90,sm_90a"}),
              ElementsAre("sm_90", "sm_90a"));
  EXPECT_THAT(*Images({"-gencode", "arch=compute_80,code=sm_80", "-gencode",
                       "arch=compute_120,code=sm_120"}),
              ElementsAre("sm_120", "sm_80"));
  // What cannot be judged from the arguments.
  EXPECT_FALSE(Images({"-arch=native"}));
  EXPECT_FALSE(Images({"-arch=all-major"}));
  EXPECT_FALSE(Images({"-c", "k.cu", "-o", "k.o"}));
  EXPECT_FALSE(Images({"-gencode", "arch=compute_90,code=lto_90"}));
}

TEST(CanLoadTest, FollowsCudaCompatibilityRules) {
  const std::vector<std::string> sm100 = {"sm_100"};
  EXPECT_TRUE(CanLoad(sm100, 100));
  EXPECT_TRUE(CanLoad(sm100, 103)) << "a cubin runs on later minors of its major";
  EXPECT_FALSE(CanLoad(sm100, 120)) << "RTX PRO 6000 Blackwell is sm_120";
  EXPECT_FALSE(CanLoad(sm100, 90));
  EXPECT_TRUE(CanLoad({"compute_100"}, 120)) << "PTX is compiled by the driver for later GPUs";
  EXPECT_FALSE(CanLoad({"compute_100"}, 90));
  EXPECT_TRUE(CanLoad({"sm_100a"}, 100));
  EXPECT_FALSE(CanLoad({"sm_100a"}, 103)) << "arch-specific code runs on that GPU only";
  EXPECT_FALSE(CanLoad({"compute_90a"}, 100));
  EXPECT_TRUE(CanLoad({"compute_100f"}, 103)) << "family code runs within its family";
  EXPECT_FALSE(CanLoad({"compute_100f"}, 120));
  EXPECT_TRUE(CanLoad({"sm_120"}, 121));
  EXPECT_TRUE(CanLoad({"sm_80", "sm_120"}, 120));
}

TEST(ArchMismatchesTest, NameTheGpuAndWhatToAdd) {
  std::vector<std::string> lines = ArchMismatches(
      {"sm_100"}, {{"NVIDIA RTX PRO 6000 Blackwell Server Edition", 120}, {"NVIDIA B200", 100}});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("NVIDIA RTX PRO 6000 Blackwell Server Edition (sm_120) cannot "
                                  "load what this build makes (sm_100 cubin)"));
  EXPECT_THAT(lines[0], HasSubstr("-gencode arch=compute_120,code=sm_120"));
  EXPECT_THAT(lines[0], HasSubstr("TORCH_CUDA_ARCH_LIST with 12.0"));
  EXPECT_THAT(lines[0], HasSubstr("FLASH_ATTN_CUDA_ARCHS with 120"));
  EXPECT_THAT(lines[0], HasSubstr("CMAKE_CUDA_ARCHITECTURES with 120"));
  EXPECT_TRUE(ArchMismatches({"sm_100", "sm_120"}, {{"sm_120", 120}, {"sm_100", 100}}).empty());
}

// The check of `build -- COMMAND` starts before this machine's GPUs are
// known: its first compile waits for them, each warning is said once, and
// with none said (an empty future) nothing is.
TEST(ArchCheckTest, WaitsForGpusFoundBesideTheBuildsStartAndWarnsOnce) {
  std::promise<std::vector<TargetGpu>> found;
  ArchCheck check(found.get_future().share(), /*strict=*/false);
  const std::vector<std::string> sm100 = {"-gencode", "arch=compute_100,code=sm_100", "-c", "k.cu"};
  std::future<absl::StatusOr<std::vector<std::string>>> first =
      std::async(std::launch::async, [&] { return check.Check(sm100); });
  EXPECT_EQ(first.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout)
      << "checked before the GPUs were known";
  found.set_value({{"NVIDIA RTX PRO 6000", 120}});
  absl::StatusOr<std::vector<std::string>> warned = first.get();
  ASSERT_TRUE(warned.ok()) << warned.status();
  ASSERT_EQ(warned->size(), 1u);
  EXPECT_THAT((*warned)[0], HasSubstr("NVIDIA RTX PRO 6000 (sm_120) cannot load"));
  EXPECT_TRUE(check.Check(sm100)->empty()) << "said once";
  ArchCheck none(std::shared_future<std::vector<TargetGpu>>(), /*strict=*/true);
  EXPECT_TRUE(none.Check(sm100)->empty());
}

TEST(ParseTargetGpusTest, AcceptsTheUsualSpellings) {
  absl::StatusOr<std::vector<TargetGpu>> gpus = ParseTargetGpus("sm_120, 10.0,90");
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_EQ((*gpus)[0].capability, 120);
  EXPECT_EQ((*gpus)[0].name, "sm_120");
  EXPECT_EQ((*gpus)[1].capability, 100);
  EXPECT_EQ((*gpus)[2].capability, 90);
  absl::StatusOr<std::vector<TargetGpu>> bad = ParseTargetGpus("sm_120,blackwell");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'blackwell'"));
}

// A fake nvidia-smi (and a fake __nvcc_device_query beside a fake nvcc)
// stand in for a machine's GPUs.
TEST(DetectLocalGpusTest, AsksNvidiaSmiThenTheToolkitsQuery) {
  const std::string root = testing::NewTempDir("gpus-");
  const std::string saved = getenv("PATH");
  auto script = [](const std::string& path, const std::string& body) {
    ASSERT_TRUE(WriteFileAtomically(path, "#!/bin/sh\n" + body).ok());
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  };
  script(root + "/smi/nvidia-smi",
         "echo 'NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0'\necho 'NVIDIA B200, 10.0'\n");
  script(root + "/broken/nvidia-smi", "echo 'NVIDIA-SMI has failed' >&2\nexit 9\n");
  script(root + "/cuda/bin/nvcc", "exit 0\n");
  script(root + "/cuda/bin/__nvcc_device_query", "echo 100,120\n");

  setenv("PATH", (root + "/smi:" + saved).c_str(), 1);
  std::vector<TargetGpu> gpus = DetectLocalGpus(root + "/cuda/bin/nvcc");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].name, "NVIDIA RTX PRO 6000 Blackwell Server Edition");
  EXPECT_EQ(gpus[0].capability, 120);
  EXPECT_EQ(gpus[1].name, "NVIDIA B200");
  EXPECT_EQ(gpus[1].capability, 100);

  setenv("PATH", (root + "/broken:" + saved).c_str(), 1);
  gpus = DetectLocalGpus(root + "/cuda/bin/nvcc");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].name, "GPU (sm_100)");
  EXPECT_EQ(gpus[1].capability, 120);
  // Neither answers: nothing to check against.
  EXPECT_TRUE(DetectLocalGpus(root + "/absent/bin/nvcc").empty());
  setenv("PATH", saved.c_str(), 1);
}

}  // namespace
}  // namespace distcc_cuda
