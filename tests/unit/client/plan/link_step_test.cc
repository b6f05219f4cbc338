// SPDX-License-Identifier: Apache-2.0
#include "client/plan/link_step.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace distcc_cuda::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kNvcc[] = "/usr/local/cuda/bin/nvcc";

TEST(LinkArgumentsTest, DefaultIsPyTorchCppExtensionsLink) {
  std::vector<std::string> argv = LinkArguments(LinkRecipe{}, {"a.o", "b.o"}, "out/lib.so", kNvcc);
  EXPECT_THAT(argv, ElementsAre("g++", "-shared", "a.o", "b.o", "-L" + CudaLibraryFolder(kNvcc),
                                "-lcudart", "-o", "out/lib.so"));
}

TEST(LinkArgumentsTest, EverySettingHasItsPlace) {
  LinkRecipe recipe;
  recipe.linker = "/usr/bin/clang++";
  recipe.flags = {"-Wl,-O1"};
  recipe.cudart = CudaRuntime::kStatic;
  recipe.library_dirs = {"/opt/torch/lib"};
  recipe.libraries = {"c10", "torch"};
  recipe.soname = "libk.so";
  EXPECT_THAT(LinkArguments(recipe, {"a.o"}, "libk.so", kNvcc),
              ElementsAre("/usr/bin/clang++", "-shared", "-Wl,-soname,libk.so", "-Wl,-O1", "a.o",
                          "-L/opt/torch/lib", "-L" + CudaLibraryFolder(kNvcc), "-lcudart_static",
                          "-ldl", "-lrt", "-lpthread", "-lc10", "-ltorch", "-o", "libk.so"));
  recipe.cudart = CudaRuntime::kNone;
  recipe.linker = "nvcc";
  EXPECT_THAT(
      LinkArguments(recipe, {"a.o"}, "libk.so", kNvcc),
      ElementsAre(kNvcc, "-shared", "-cudart", "none", "-Xlinker=-soname,libk.so", "-Wl,-O1", "a.o",
                  "-L/opt/torch/lib", "-lc10", "-ltorch", "-o", "libk.so"));
}

TEST(LinkArgumentsTest, LinkCommandPutsObjectsAndOutputWhereItSays) {
  absl::StatusOr<LinkRecipe> recipe =
      ParseLinkCommand("  g++ -shared {objects}  -lcudart -o {output} -Wl,--as-needed");
  ASSERT_TRUE(recipe.ok()) << recipe.status();
  EXPECT_THAT(
      LinkArguments(*recipe, {"a.o", "b.o"}, "lib.so", kNvcc),
      ElementsAre("g++", "-shared", "a.o", "b.o", "-lcudart", "-o", "lib.so", "-Wl,--as-needed"));
  recipe = ParseLinkCommand("c++ -shared {objects}");
  ASSERT_TRUE(recipe.ok()) << recipe.status();
  EXPECT_THAT(LinkArguments(*recipe, {"a.o"}, "lib.so", kNvcc),
              ElementsAre("c++", "-shared", "a.o", "-o", "lib.so"));
}

TEST(LinkArgumentsTest, LinkCommandThatCannotWorkIsRefused) {
  for (const char* text : {"", "   ", "g++ -shared -o {output}", "g++ {objects} {objects}",
                           "g++ {objects} -o {output} {output}", "g++ -shared{objects}"}) {
    absl::StatusOr<LinkRecipe> recipe = ParseLinkCommand(text);
    EXPECT_EQ(recipe.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(recipe.status().message()), HasSubstr("--link-command")) << text;
  }
}

TEST(ParseCudaRuntimeTest, KnowsThreeAndNamesThemOtherwise) {
  EXPECT_EQ(*ParseCudaRuntime("shared"), CudaRuntime::kShared);
  EXPECT_EQ(*ParseCudaRuntime("static"), CudaRuntime::kStatic);
  EXPECT_EQ(*ParseCudaRuntime("none"), CudaRuntime::kNone);
  absl::StatusOr<CudaRuntime> bad = ParseCudaRuntime("Shared");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("\"shared\""));
}

TEST(DescribeLinkTest, CountsTheObjects) {
  EXPECT_EQ(
      DescribeLink({"g++", "-shared", "a.o", "b.o", "-lcudart", "-o", "l.so"}, {"a.o", "b.o"}),
      "g++ -shared [2 objects] -lcudart -o l.so");
}

}  // namespace
}  // namespace distcc_cuda::client
