// SPDX-License-Identifier: Apache-2.0
#include "client/scan/dependency_scan.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::client {
namespace {

using ::distcc_cuda::testing::NewTempDir;
using ::distcc_cuda::testing::RealNvccPath;
using ::testing::Contains;
using ::testing::Each;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

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

// A tree whose closure depends on what the preprocessor makes of macros:
// a computed include, one built by a function-like macro, __has_include, a
// branch on a macro another header defines, a device-only and a host-only
// header (nvcc's two passes), #include_next, headers that include each
// other under #pragma once, and a raw string that holds an #include line.
// Each header's text is its own: GCC takes files of equal bytes for one
// under #pragma once.
class ScanOfMacroDrivenIncludesTest : public ScanInputClosureTest {
 protected:
  void SetUp() override {
    ScanInputClosureTest::SetUp();
    if (IsSkipped()) return;
    Write("a.cu",
          "#define CONFIG_HEADER \"cfg/config.h\"\n"
          "#include CONFIG_HEADER\n"
          "#define STR(x) #x\n"
          "#define XSTR(x) STR(x)\n"
          "#define HEADER_NAMED(n) XSTR(n.h)\n"
          "#include HEADER_NAMED(named)\n"
          "#if __has_include(\"optional.h\")\n#include \"optional.h\"\n#endif\n"
          "#if __has_include(\"absent.h\")\n#include \"absent.h\"\n#endif\n"
          "#if USE_FAST\n#include \"fast.h\"\n#else\n#include \"slow.h\"\n#endif\n"
          "#ifdef __CUDA_ARCH__\n#include \"device_only.h\"\n#else\n"
          "#include \"host_only.h\"\n#endif\n"
          "#include <next.h>\n"
          "#include \"ping.h\"\n"
          "const char* text = R\"(\n#include \"not_a_header.h\"\n)\";\n"
          "__global__ void k() {}\n");
    Write("cfg/config.h", "#pragma once\n#define USE_FAST 1\n");
    Write("named.h", "#pragma once\n// named.h\n");
    Write("optional.h", "#pragma once\n// optional.h\n");
    Write("fast.h", "#pragma once\n// fast.h\n");
    Write("slow.h", "#pragma once\n// slow.h\n");
    Write("device_only.h", "#pragma once\n// device_only.h\n");
    Write("host_only.h", "#pragma once\n// host_only.h\n");
    Write("first/next.h", "#pragma once\n#include_next <next.h>\n");
    Write("second/next.h", "#pragma once\n// second/next.h\n");
    Write("ping.h", "#pragma once\n#include \"pong.h\"\n");
    Write("pong.h", "#pragma once\n#include \"ping.h\"\n");
  }

  std::vector<std::string> Expected() const {
    std::vector<std::string> files;
    for (const char* name :
         {"a.cu", "cfg/config.h", "named.h", "optional.h", "fast.h", "device_only.h", "host_only.h",
          "first/next.h", "second/next.h", "ping.h", "pong.h"}) {
      files.push_back(dir_ + "/" + name);
    }
    return files;
  }

  // What nvcc's own dependency pass lists, run here with nothing added.
  std::vector<std::string> PlainPass(const std::vector<std::string>& flags) const {
    ProcessSpec spec;
    spec.argv = {nvcc_};
    spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
    spec.argv.insert(spec.argv.end(), {"-M", "a.cu"});
    spec.working_directory = dir_;
    absl::StatusOr<ProcessResult> result = RunProcess(spec);
    EXPECT_TRUE(result.ok() && result->exit_code == 0)
        << (result.ok() ? result->stderr_text : result.status().ToString());
    std::vector<std::string> files;
    if (!result.ok()) return files;
    const std::vector<std::string> excluded = ExcludedPrefixes(nvcc_);
    for (const std::string& file : ParseMakeDependencies(result->stdout_text)) {
      std::string absolute = AbsolutePath(file, dir_);
      bool system = false;
      for (const std::string& prefix : excluded) system |= absl::StartsWith(absolute, prefix);
      if (!system) files.push_back(absolute);
    }
    return files;
  }

  // A host compiler at `name` in the test's folder that logs its arguments
  // and runs g++, refusing -fdirectives-only when `refuse` is set, as a
  // compiler without it would.
  std::string HostCompiler(const std::string& name, bool refuse) {
    const std::string path = dir_ + "/host/" + name;
    std::string script = absl::StrCat("#!/bin/sh\necho \"$*\" >> ", dir_, "/host.log\n");
    if (refuse) {
      absl::StrAppend(&script, "case \" $* \" in *\" -fdirectives-only \"*) echo \"", name,
                      ": error: unknown argument '-fdirectives-only'\" >&2; exit 1;; esac\n");
    }
    absl::StrAppend(&script, "exec g++ \"$@\"\n");
    EXPECT_TRUE(WriteFileAtomically(path, script).ok());
    chmod(path.c_str(), 0755);
    return path;
  }

  // Scans a.cu with `host_compiler` as nvcc's -ccbin: the closure is the
  // expected one whichever pass gave it.
  void ExpectTheClosureWith(const std::string& host_compiler) {
    absl::StatusOr<std::vector<std::string>> files =
        ScanInputClosure(nvcc_, dir_, {"-ccbin", host_compiler, "-Ifirst", "-Isecond"}, "a.cu",
                         ExcludedPrefixes(nvcc_));
    ASSERT_TRUE(files.ok()) << files.status();
    EXPECT_THAT(*files, UnorderedElementsAreArray(Expected()));
  }

  std::string HostLog() const {
    absl::StatusOr<std::string> log = ReadFile(dir_ + "/host.log");
    return log.ok() ? *log : "";
  }
};

TEST_F(ScanOfMacroDrivenIncludesTest, ListsWhatNvccsPlainPassLists) {
  const std::vector<std::string> flags = {"-std=c++17", "-Ifirst", "-Isecond"};
  absl::StatusOr<std::vector<std::string>> files =
      ScanInputClosure(nvcc_, dir_, flags, "a.cu", ExcludedPrefixes(nvcc_));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files, UnorderedElementsAreArray(Expected()));
  EXPECT_THAT(*files, UnorderedElementsAreArray(PlainPass(flags)));
}

TEST_F(ScanOfMacroDrivenIncludesTest, TheDependencyFileIsNvccsOwn) {
  const std::vector<std::string> flags = {"-std=c++17", "-Ifirst", "-Isecond"};
  absl::StatusOr<std::vector<std::string>> files = ScanWritingDependencyFile(
      nvcc_, dir_, flags, "a.cu", {"-M", "-MP", "-MT", "obj/a.o", "-MF", "scanned.d"}, "scanned.d",
      ExcludedPrefixes(nvcc_));
  ASSERT_TRUE(files.ok()) << files.status();
  ProcessSpec spec;
  spec.argv = {nvcc_};
  spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
  spec.argv.insert(spec.argv.end(), {"-M", "-MP", "-MT", "obj/a.o", "-MF", "plain.d", "a.cu"});
  spec.working_directory = dir_;
  absl::StatusOr<ProcessResult> plain = RunProcess(spec);
  ASSERT_TRUE(plain.ok() && plain->exit_code == 0);
  absl::StatusOr<std::string> scanned_text = ReadFile(dir_ + "/scanned.d");
  absl::StatusOr<std::string> plain_text = ReadFile(dir_ + "/plain.d");
  ASSERT_TRUE(scanned_text.ok() && plain_text.ok());
  EXPECT_EQ(*scanned_text, *plain_text);
}

TEST_F(ScanOfMacroDrivenIncludesTest, GccPreprocessesDirectivesOnly) {
  const std::string gcc = HostCompiler("g++", /*refuse=*/false);
  ExpectTheClosureWith(gcc);
  // nvcc's two preprocessing passes (device and host), both directives
  // only, and no plain pass after them.
  std::vector<std::string> passes;
  for (absl::string_view line : absl::StrSplit(HostLog(), '\n')) {
    if (absl::StrContains(line, " -x c++ ")) passes.emplace_back(line);
  }
  ASSERT_EQ(passes.size(), 2u) << HostLog();
  EXPECT_THAT(passes, Each(HasSubstr("-fdirectives-only")));
  EXPECT_THAT(passes, Contains(HasSubstr("-D__CUDA_ARCH__=")));
}

TEST_F(ScanOfMacroDrivenIncludesTest, AHostCompilerThatRefusesTheFastPassGetsThePlainOne) {
  const std::string gcc = HostCompiler("g++", /*refuse=*/true);
  ExpectTheClosureWith(gcc);
  EXPECT_THAT(HostLog(), HasSubstr("-fdirectives-only")) << "the fast pass was not tried";
}

TEST_F(ScanOfMacroDrivenIncludesTest, ClangIsScannedPlainly) {
  if (access("/usr/bin/clang++", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/clang++";
  const std::string clang = HostCompiler("clang++", /*refuse=*/true);
  ExpectTheClosureWith(clang);
  EXPECT_THAT(HostLog(), Not(HasSubstr("-fdirectives-only")))
      << "clang refuses the option: asking it costs a failed nvcc run per scan";
}

}  // namespace
}  // namespace distcc_cuda::client
