// SPDX-License-Identifier: Apache-2.0
#include "client/plan/kernel_manifest.h"

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/nvcc/instantiation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::client {
namespace {

using ::distcc_cuda::testing::NewTempDir;
using ::distcc_cuda::testing::SourceDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// Writes `files` (relative name -> content) into a fresh folder and returns
// the path of its kernels.toml holding `manifest`.
std::string WriteManifest(const std::string& manifest,
                          const std::map<std::string, std::string>& files = {}) {
  std::string dir = NewTempDir("kernel_manifest");
  std::string path = dir + "/kernels.toml";
  EXPECT_TRUE(WriteFileAtomically(path, manifest).ok());
  for (const auto& [name, content] : files) {
    EXPECT_TRUE(WriteFileAtomically(dir + "/" + name, content).ok()) << name;
  }
  return path;
}

std::vector<std::string> AxisNames(const v1::InstantiationSet& set) {
  std::vector<std::string> names;
  for (const auto& axis : set.axes()) names.push_back(axis.name());
  return names;
}

std::vector<std::string> AxisValues(const v1::InstantiationSet& set, const std::string& name) {
  for (const auto& axis : set.axes()) {
    if (axis.name() == name) return {axis.values().begin(), axis.values().end()};
  }
  ADD_FAILURE() << "no axis " << name;
  return {};
}

TEST(LoadKernelManifestTest, LoadsTheAttentionExample) {
  const std::string dir = SourceDir() + "/examples/attention";
  absl::StatusOr<KernelManifest> manifest = LoadKernelManifest(dir + "/kernels.toml");
  ASSERT_TRUE(manifest.ok()) << manifest.status();

  EXPECT_EQ(manifest->path, AbsolutePath(dir + "/kernels.toml"));
  EXPECT_EQ(manifest->directory, AbsolutePath(dir));
  EXPECT_EQ(manifest->output, "libattention_sm100.so");
  EXPECT_THAT(manifest->archs, ElementsAre("sm_100"));
  EXPECT_THAT(manifest->flags, ElementsAre("-O3", "-std=c++17"));
  EXPECT_THAT(manifest->sources, ElementsAre("attention_api.cu"));
  // No [link] table: PyTorch cpp_extension's link.
  EXPECT_EQ(manifest->link.linker, "g++");
  EXPECT_EQ(manifest->link.cudart, CudaRuntime::kShared);
  EXPECT_THAT(manifest->link.flags, IsEmpty());
  EXPECT_TRUE(manifest->link.soname.empty());

  ASSERT_EQ(manifest->instantiation_sets.size(), 1u);
  const v1::InstantiationSet& set = manifest->instantiation_sets[0];
  EXPECT_EQ(set.name(), "attention_fwd");
  EXPECT_EQ(set.unit_name_template(), "attention_fwd_{dtype}_hdim{head_dim}_{causal}");
  EXPECT_THAT(set.headers(), ElementsAre("attention_kernels.cuh"));
  EXPECT_THAT(set.text_template(), HasSubstr("RunAttentionForward<{dtype}, {head_dim}, {causal}>"));
  EXPECT_THAT(set.manifest_location(), StartsWith(dir + "/kernels.toml:"));
  // File order, not toml++'s alphabetical order (causal, dtype, head_dim).
  EXPECT_THAT(AxisNames(set), ElementsAre("dtype", "head_dim", "causal"));
  EXPECT_THAT(AxisValues(set, "dtype"), ElementsAre("fp16", "bf16"));
  EXPECT_THAT(AxisValues(set, "head_dim"), ElementsAre("32", "64", "96", "128", "192", "256"));
  EXPECT_THAT(AxisValues(set, "causal"), ElementsAre("true", "false"));

  absl::StatusOr<std::vector<GeneratedUnit>> units = ExpandInstantiationSet(set);
  ASSERT_TRUE(units.ok()) << units.status();
  ASSERT_EQ(units->size(), 24u);
  EXPECT_EQ(units->front().name, "attention_fwd_fp16_hdim32_true");
  EXPECT_EQ(units->back().name, "attention_fwd_bf16_hdim256_false");
}

TEST(LoadKernelManifestTest, ArchsDefaultToSm100) {
  std::string path = WriteManifest(
      "[build]\n"
      "output = \"libk.so\"\n"
      "sources = [\"k.cu\"]\n",
      {{"k.cu", "// k\n"}});
  absl::StatusOr<KernelManifest> manifest = LoadKernelManifest(path);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_THAT(manifest->archs, ElementsAre("sm_100"));
  EXPECT_THAT(manifest->flags, IsEmpty());
  EXPECT_THAT(manifest->instantiation_sets, IsEmpty());
}

TEST(LoadKernelManifestTest, LinkTableIsRead) {
  std::string path = WriteManifest(
      "[build]\n"
      "output = \"libk.so\"\n"
      "sources = [\"k.cu\"]\n"
      "[link]\n"
      "linker = \"clang++\"\n"
      "flags = [\"-Wl,-O1\"]\n"
      "cudart = \"static\"\n"
      "libraries = [\"cublas\"]\n"
      "library_dirs = [\"third_party/lib\"]\n"
      "soname = \"libk.so.1\"\n",
      {{"k.cu", "// k\n"}});
  absl::StatusOr<KernelManifest> manifest = LoadKernelManifest(path);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->link.linker, "clang++");
  EXPECT_THAT(manifest->link.flags, ElementsAre("-Wl,-O1"));
  EXPECT_EQ(manifest->link.cudart, CudaRuntime::kStatic);
  EXPECT_THAT(manifest->link.libraries, ElementsAre("cublas"));
  EXPECT_THAT(manifest->link.library_dirs, ElementsAre(manifest->directory + "/third_party/lib"));
  EXPECT_EQ(manifest->link.soname, "libk.so.1");
}

TEST(LoadKernelManifestTest, BuildLinkFlagsAreTheLinksFlags) {
  std::string path = WriteManifest(
      "[build]\n"
      "output = \"libk.so\"\n"
      "sources = [\"k.cu\"]\n"
      "link_flags = [\"-lcublas\"]\n",
      {{"k.cu", "// k\n"}});
  absl::StatusOr<KernelManifest> manifest = LoadKernelManifest(path);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_THAT(manifest->link.flags, ElementsAre("-lcublas"));
}

TEST(LoadKernelManifestTest, AxisValuesAreRenderedAsWritten) {
  std::string path = WriteManifest(
      "[build]\n"
      "output = \"libk.so\"\n"
      "\n"
      "[[instantiations]]\n"
      "name = \"k\"\n"
      "unit = \"k_{t}_{n}_{b}\"\n"
      "headers = [\"k.cuh\"]\n"
      "text = \"template void K<{t}, {n}, {b}>();\"\n"
      "[instantiations.axes]\n"
      "t = [\"float\", \"__half\"]\n"
      "n = [0, -3, 128]\n"
      "b = [true, false]\n",
      {{"k.cuh", "// k\n"}});
  absl::StatusOr<KernelManifest> manifest = LoadKernelManifest(path);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_EQ(manifest->instantiation_sets.size(), 1u);
  const v1::InstantiationSet& set = manifest->instantiation_sets[0];
  EXPECT_THAT(AxisNames(set), ElementsAre("t", "n", "b"));
  EXPECT_THAT(AxisValues(set, "t"), ElementsAre("float", "__half"));
  EXPECT_THAT(AxisValues(set, "n"), ElementsAre("0", "-3", "128"));
  EXPECT_THAT(AxisValues(set, "b"), ElementsAre("true", "false"));
}

TEST(LoadKernelManifestTest, PerUnitForcesTheUnitSizeOrIsLeftToTheCoordinator) {
  const std::string set =
      "[[instantiations]]\n"
      "name = \"k\"\n"
      "headers = [\"k.cuh\"]\n"
      "text = \"template void K<{n}>();\"\n";
  std::string forced = WriteManifest(
      "[build]\noutput = \"libk.so\"\n" + set + "per_unit = 1\n[instantiations.axes]\nn = [1, 2]\n",
      {{"k.cuh", "// k\n"}});
  absl::StatusOr<KernelManifest> manifest = LoadKernelManifest(forced);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->instantiation_sets[0].instantiations_per_unit(), 1);
  std::string chosen =
      WriteManifest("[build]\noutput = \"libk.so\"\n" + set + "[instantiations.axes]\nn = [1, 2]\n",
                    {{"k.cuh", "// k\n"}});
  manifest = LoadKernelManifest(chosen);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->instantiation_sets[0].instantiations_per_unit(), 0);
  std::string bad = WriteManifest(
      "[build]\noutput = \"libk.so\"\n" + set + "per_unit = 0\n[instantiations.axes]\nn = [1, 2]\n",
      {{"k.cuh", "// k\n"}});
  manifest = LoadKernelManifest(bad);
  EXPECT_EQ(manifest.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(manifest.status().message(), HasSubstr(":7:"));
  EXPECT_THAT(manifest.status().message(), HasSubstr("'per_unit' is a positive integer"));
}

TEST(LoadKernelManifestTest, MissingManifestIsNotFound) {
  std::string path = NewTempDir("kernel_manifest") + "/absent.toml";
  absl::StatusOr<KernelManifest> manifest = LoadKernelManifest(path);
  ASSERT_FALSE(manifest.ok());
  EXPECT_EQ(manifest.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(manifest.status().message()), HasSubstr(path));
}

// One refused manifest: its text, the files beside it, the expected code,
// the line the message must start with (0: the message starts with the
// file name alone) and text the message must hold.
struct BadManifestCase {
  std::string name;
  std::string manifest;
  std::map<std::string, std::string> files;
  absl::StatusCode code;
  int line;
  std::vector<std::string> mentions;
};

// Names the case in failure output rather than dumping its bytes.
void PrintTo(const BadManifestCase& test, std::ostream* out) { *out << test.name; }

class BadManifestTest : public ::testing::TestWithParam<BadManifestCase> {};

TEST_P(BadManifestTest, IsRefusedWithItsLocation) {
  const BadManifestCase& test = GetParam();
  std::string path = WriteManifest(test.manifest, test.files);
  absl::StatusOr<KernelManifest> manifest = LoadKernelManifest(path);
  ASSERT_FALSE(manifest.ok());
  EXPECT_EQ(manifest.status().code(), test.code) << manifest.status();
  std::string message(manifest.status().message());
  if (test.line > 0) {
    EXPECT_THAT(message, StartsWith(absl::StrCat(path, ":", test.line, ":")));
  } else {
    EXPECT_THAT(message, StartsWith(path));
  }
  for (const std::string& mention : test.mentions) {
    EXPECT_THAT(message, HasSubstr(mention));
  }
}

const char kSet[] =
    "[[instantiations]]\n"
    "name = \"k\"\n"
    "headers = [\"k.cuh\"]\n"
    "text = \"template void K<{t}>();\"\n"
    "[instantiations.axes]\n"
    "t = [\"float\"]\n";

INSTANTIATE_TEST_SUITE_P(
    Cases, BadManifestTest,
    ::testing::Values(BadManifestCase{"UnclosedString",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "flags = [\"-O3]\n"
                                      "sources = [\"k.cu\"]\n",
                                      {{"k.cu", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      3,
                                      {}},
                      BadManifestCase{"FlagsNotAnArray",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "sources = [\"k.cu\"]\n"
                                      "flags = \"x\"\n",
                                      {{"k.cu", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      4,
                                      {"'flags'"}},
                      BadManifestCase{"OutputNotAString",
                                      "[build]\n"
                                      "output = 3\n"
                                      "sources = [\"k.cu\"]\n",
                                      {{"k.cu", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      2,
                                      {"'output'"}},
                      BadManifestCase{"UnknownKeyInBuild",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "sources = [\"k.cu\"]\n"
                                      "flag = [\"-O3\"]\n",
                                      {{"k.cu", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      4,
                                      {"unknown key 'flag'", "[build]"}},
                      BadManifestCase{"UnknownCudaRuntime",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "sources = [\"k.cu\"]\n"
                                      "[link]\n"
                                      "cudart = \"dynamic\"\n",
                                      {{"k.cu", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      5,
                                      {"\"shared\"", "\"static\"", "\"none\""}},
                      BadManifestCase{"UnknownKeyInLink",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "sources = [\"k.cu\"]\n"
                                      "[link]\n"
                                      "runtime = \"shared\"\n",
                                      {{"k.cu", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      5,
                                      {"unknown key 'runtime'", "[link]"}},
                      BadManifestCase{"LinkFlagsTwice",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "sources = [\"k.cu\"]\n"
                                      "link_flags = [\"-lm\"]\n"
                                      "[link]\n"
                                      "flags = [\"-lm\"]\n",
                                      {{"k.cu", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      4,
                                      {"keep [link] flags"}},
                      BadManifestCase{"UnknownTopLevelTable",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "sources = [\"k.cu\"]\n"
                                      "[instantiation]\n"
                                      "name = \"k\"\n",
                                      {{"k.cu", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      4,
                                      {"unknown key 'instantiation'"}},
                      BadManifestCase{"PlaceholderWithoutAxis",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "\n"
                                      "[[instantiations]]\n"
                                      "name = \"k\"\n"
                                      "headers = [\"k.cuh\"]\n"
                                      "text = \"template void K<{t}, {head_dim}>();\"\n"
                                      "[instantiations.axes]\n"
                                      "t = [\"float\"]\n",
                                      {{"k.cuh", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      7,
                                      {"{head_dim}", "'text'"}},
                      BadManifestCase{"UnitPlaceholderWithoutAxis",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "\n"
                                      "[[instantiations]]\n"
                                      "name = \"k\"\n"
                                      "unit = \"k_{t}_{arch}\"\n"
                                      "headers = [\"k.cuh\"]\n"
                                      "text = \"template void K<{t}>();\"\n"
                                      "[instantiations.axes]\n"
                                      "t = [\"float\"]\n",
                                      {{"k.cuh", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      6,
                                      {"{arch}", "'unit'"}},
                      BadManifestCase{"SetWithoutAxes",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "\n"
                                      "[[instantiations]]\n"
                                      "name = \"k\"\n"
                                      "headers = [\"k.cuh\"]\n"
                                      "text = \"template void K<float>();\"\n",
                                      {{"k.cuh", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      0,
                                      {"'k'", "[instantiations.axes]"}},
                      BadManifestCase{"EmptyAxis",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "\n"
                                      "[[instantiations]]\n"
                                      "name = \"k\"\n"
                                      "headers = [\"k.cuh\"]\n"
                                      "text = \"template void K<{t}>();\"\n"
                                      "[instantiations.axes]\n"
                                      "t = []\n",
                                      {{"k.cuh", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      9,
                                      {"axis 't'"}},
                      BadManifestCase{"FloatAxisValue",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "\n"
                                      "[[instantiations]]\n"
                                      "name = \"k\"\n"
                                      "headers = [\"k.cuh\"]\n"
                                      "text = \"template void K<{t}>();\"\n"
                                      "[instantiations.axes]\n"
                                      "t = [1.5]\n",
                                      {{"k.cuh", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      9,
                                      {"axis 't'"}},
                      BadManifestCase{"MissingBuild",
                                      std::string(kSet),
                                      {{"k.cuh", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      0,
                                      {"missing [build]"}},
                      BadManifestCase{"MissingOutput",
                                      "[build]\n"
                                      "sources = [\"k.cu\"]\n",
                                      {{"k.cu", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      0,
                                      {"'output'"}},
                      BadManifestCase{"OutputWithASlash",
                                      "[build]\n"
                                      "output = \"lib/libk.so\"\n"
                                      "sources = [\"k.cu\"]\n",
                                      {{"k.cu", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      2,
                                      {"'output'", "-o"}},
                      BadManifestCase{"EmptyOutput",
                                      "[build]\n"
                                      "output = \"\"\n"
                                      "sources = [\"k.cu\"]\n",
                                      {{"k.cu", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      2,
                                      {"'output' is a file name"}},
                      BadManifestCase{"OutputDotDot",
                                      "[build]\n"
                                      "output = \"..\"\n"
                                      "sources = [\"k.cu\"]\n",
                                      {{"k.cu", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      2,
                                      {"'output' is a file name"}},
                      BadManifestCase{"BadArch",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "archs = [\"gfx90a\"]\n"
                                      "sources = [\"k.cu\"]\n",
                                      {{"k.cu", ""}},
                                      absl::StatusCode::kInvalidArgument,
                                      3,
                                      {"gfx90a"}},
                      BadManifestCase{"MissingSource",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "sources = [\"k.cu\", \"gone.cu\"]\n",
                                      {{"k.cu", ""}},
                                      absl::StatusCode::kNotFound,
                                      3,
                                      {"gone.cu"}},
                      BadManifestCase{"MissingHeader",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "\n" +
                                          std::string(kSet),
                                      {},
                                      absl::StatusCode::kNotFound,
                                      4,
                                      {"k.cuh"}},
                      BadManifestCase{"NothingToBuild",
                                      "[build]\n"
                                      "output = \"libk.so\"\n"
                                      "flags = [\"-O3\"]\n",
                                      {},
                                      absl::StatusCode::kInvalidArgument,
                                      0,
                                      {"nothing to build"}}),
    [](const ::testing::TestParamInfo<BadManifestCase>& info) { return info.param.name; });

}  // namespace
}  // namespace distcc_cuda::client
