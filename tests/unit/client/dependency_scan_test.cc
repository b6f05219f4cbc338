// SPDX-License-Identifier: Apache-2.0
#include "client/dependency_scan.h"

#include <sys/stat.h>

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::client {
namespace {

using ::distcc_cuda::testing::NewTempDir;
using ::distcc_cuda::testing::RealNvccPath;
using ::testing::Contains;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;

struct DependencyCase {
  std::string name;
  std::string text;
  std::vector<std::string> files;
};

// Names the case in failure output rather than dumping its bytes.
void PrintTo(const DependencyCase& test, std::ostream* out) { *out << test.name; }

class ParseMakeDependenciesTest : public ::testing::TestWithParam<DependencyCase> {};

TEST_P(ParseMakeDependenciesTest, ListsThePrerequisites) {
  EXPECT_THAT(ParseMakeDependencies(GetParam().text), ElementsAreArray(GetParam().files));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ParseMakeDependenciesTest,
    ::testing::Values(DependencyCase{"Empty", "", {}},
                      DependencyCase{"SingleLine", "a.o: a.cu b.h\n", {"a.cu", "b.h"}},
                      DependencyCase{"SingleLineNoNewline", "a.o: a.cu b.h", {"a.cu", "b.h"}},
                      // nvcc -M writes a blank before the colon.
                      DependencyCase{"NvccStyle",
                                     "a.o : a.cu \\\n"
                                     "    inc/b.h \\\n"
                                     "    /usr/include/stdio.h \\\n"
                                     "    inc/c.h\n",
                                     {"a.cu", "inc/b.h", "/usr/include/stdio.h", "inc/c.h"}},
                      DependencyCase{"ContinuationWithoutBlank",
                                     "a.o: a.cu\\\n"
                                     "b.h\n",
                                     {"a.cu", "b.h"}},
                      DependencyCase{"EscapedSpaces",
                                     "a.o: my\\ dir/a.cu b\\ c.h \\\n"
                                     "  d.h\n",
                                     {"my dir/a.cu", "b c.h", "d.h"}},
                      DependencyCase{"Tabs", "a.o:\ta.cu\tb.h\r\n", {"a.cu", "b.h"}},
                      DependencyCase{"TargetWithoutDependencies", "a.o:\n", {}},
                      DependencyCase{"TargetWithoutDependenciesNoNewline", "a.o:", {}},
                      DependencyCase{"TargetWithSpaceColonOnly", "a.o :\n", {}}),
    [](const ::testing::TestParamInfo<DependencyCase>& info) { return info.param.name; });

TEST(ExcludedPrefixesTest, HoldsTheToolkitAndTheSystem) {
  std::vector<std::string> prefixes = ExcludedPrefixes("/opt/toolkit/bin/nvcc");
  EXPECT_THAT(prefixes, Contains("/opt/toolkit/"));
  EXPECT_THAT(prefixes, Contains("/usr/include/"));
  for (const std::string& prefix : prefixes) {
    EXPECT_EQ(prefix.back(), '/') << prefix;
  }
}

TEST(ExcludedPrefixesTest, HoldsTheToolkitsRealFolder) {
  const std::string nvcc = RealNvccPath();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc at /usr/local/cuda/bin/nvcc";
  std::vector<std::string> prefixes = ExcludedPrefixes(nvcc);
  EXPECT_THAT(prefixes, Contains("/usr/local/cuda/"));
  // /usr/local/cuda is usually a link to /usr/local/cuda-MAJOR.MINOR.
  std::string real = std::filesystem::canonical("/usr/local/cuda").string() + "/";
  EXPECT_THAT(prefixes, Contains(real));
}

TEST(ExcludedPrefixesTest, AWrapperScriptsFolderIsNotAToolkit) {
  const std::string nvcc = RealNvccPath();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc at /usr/local/cuda/bin/nvcc";
  const std::string dir = NewTempDir("wrapper-");
  const std::string wrapper = ::distcc_cuda::testing::WriteNvccWrapper(dir + "/bin/nvcc", nvcc);
  std::vector<std::string> prefixes = ExcludedPrefixes(wrapper);
  EXPECT_THAT(prefixes, Contains(std::filesystem::canonical("/usr/local/cuda").string() + "/"));
  EXPECT_THAT(prefixes, Not(Contains(dir + "/")))
      << "a project beside the wrapper would be taken for the toolkit's own files";
}

class ScanInputClosureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nvcc_ = RealNvccPath();
    if (nvcc_.empty()) GTEST_SKIP() << "no nvcc at /usr/local/cuda/bin/nvcc";
    dir_ = AbsolutePath(NewTempDir("dependency_scan"));
  }

  void Write(const std::string& name, const std::string& content) {
    ASSERT_TRUE(WriteFileAtomically(dir_ + "/" + name, content).ok()) << name;
  }

  std::string nvcc_;
  std::string dir_;
};

TEST_F(ScanInputClosureTest, ReturnsTheProjectFilesOnly) {
  Write("a.cu", "#include \"inc/b.h\"\n__global__ void k() {}\n");
  Write("inc/b.h", "#pragma once\n#include <cuda_fp16.h>\n#include \"c.h\"\n");
  Write("inc/c.h", "#pragma once\ninline int c() { return 1; }\n");

  absl::StatusOr<std::vector<std::string>> files =
      ScanInputClosure(nvcc_, dir_, {"-std=c++17"}, "a.cu", ExcludedPrefixes(nvcc_));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files, UnorderedElementsAre(dir_ + "/a.cu", dir_ + "/inc/b.h", dir_ + "/inc/c.h"));
  EXPECT_THAT(*files, Not(Contains(StartsWith("/usr/"))));
}

TEST_F(ScanInputClosureTest, ScansAHeaderAsCuda) {
  Write("k.cuh", "#pragma once\n#include \"c.h\"\ntemplate <int N> __global__ void k() {}\n");
  Write("inc/c.h", "#pragma once\n");

  // The -I flag is passed on: c.h is found only through it.
  absl::StatusOr<std::vector<std::string>> files =
      ScanInputClosure(nvcc_, dir_, {"-Iinc"}, "k.cuh", ExcludedPrefixes(nvcc_));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files, UnorderedElementsAre(dir_ + "/k.cuh", dir_ + "/inc/c.h"));
}

TEST_F(ScanInputClosureTest, AMissingHeaderCarriesNvccsMessage) {
  Write("broken.cu", "#include \"missing.h\"\n");

  absl::StatusOr<std::vector<std::string>> files =
      ScanInputClosure(nvcc_, dir_, {}, "broken.cu", ExcludedPrefixes(nvcc_));
  ASSERT_FALSE(files.ok());
  EXPECT_EQ(files.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(files.status().message()), HasSubstr("No such file"));
  EXPECT_THAT(std::string(files.status().message()), HasSubstr("broken.cu"));
  EXPECT_THAT(std::string(files.status().message()), HasSubstr("missing.h"));
}

}  // namespace
}  // namespace distcc_cuda::client
