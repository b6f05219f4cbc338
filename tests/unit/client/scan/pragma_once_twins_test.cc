// SPDX-License-Identifier: Apache-2.0
#include "client/scan/pragma_once_twins.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "client/scan/dependency_scan.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::client {
namespace {

using ::distcc_cuda::testing::NewTempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

TEST(IncludeFoldersOfTest, ReadsEveryFormOfEveryIncludeFolderOption) {
  EXPECT_THAT(IncludeFoldersOf({"-Iinc", "-I", "/abs", "-isystem", "sys", "-isystem/s2", "-iquote",
                                "q", "-idirafter=after", "--include-path=p", "--system-include",
                                "ns", "-Xcompiler", "-Ix", "-DI=1", "-O2", "-include", "pre.h"},
                               "/work"),
              ElementsAre("/work/inc", "/abs", "/work/sys", "/s2", "/work/q", "/work/after",
                          "/work/p", "/work/ns", "/work/x"));
}

// Two folders on the include path with the same header, byte for byte and
// with the same modification time (as an unpacked wheel has them), each
// with #pragma once; a source includes both under different names.
class PragmaOnceTwinsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = AbsolutePath(NewTempDir("pragma-once-twins")); }

  void Write(const std::string& name, const std::string& content, time_t mtime = 1700000000) {
    ASSERT_TRUE(WriteFileAtomically(dir_ + "/" + name, content).ok()) << name;
    const struct timespec times[2] = {{mtime, 0}, {mtime, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, (dir_ + "/" + name).c_str(), times, 0), 0) << name;
  }

  // What `g++ -M` lists for the source, outside /usr.
  std::vector<std::string> GccListed(const std::string& source) {
    ProcessSpec spec;
    spec.argv = {"g++", "-Ia", "-Ib", "-M", source};
    spec.working_directory = dir_;
    absl::StatusOr<ProcessResult> ran = RunProcess(spec);
    EXPECT_TRUE(ran.ok() && ran->exit_code == 0) << (ran.ok() ? ran->stderr_text : "");
    std::vector<std::string> listed;
    for (const std::string& file : ParseMakeDependencies(ran.ok() ? ran->stdout_text : "")) {
      if (file.rfind("/usr/", 0) != 0) listed.push_back(AbsolutePath(file, dir_));
    }
    return listed;
  }

  std::string dir_;
};

constexpr char kStub[] = "#pragma once\nstruct _object;\nusing PyObject = _object;\n";

TEST_F(PragmaOnceTwinsTest, AScanListsTheHeaderGccTookForItsTwin) {
  Write("a/torch/python_stub.h", kStub);
  Write("b/c10/python_stub.h", kStub);
  Write("main.cpp", "#include <torch/python_stub.h>\n#include \"c10/python_stub.h\"\n");
  // GCC itself leaves the second out: the case is real.
  ASSERT_THAT(GccListed("main.cpp"),
              UnorderedElementsAre(dir_ + "/main.cpp", dir_ + "/a/torch/python_stub.h"));

  absl::StatusOr<std::vector<std::string>> files =
      ScanInputClosure("g++", dir_, {"-Ia", "-Ib"}, "main.cpp", ExcludedPrefixes("g++"));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files, UnorderedElementsAre(dir_ + "/main.cpp", dir_ + "/a/torch/python_stub.h",
                                           dir_ + "/b/c10/python_stub.h"));
}

TEST_F(PragmaOnceTwinsTest, FindsTwinsBesideTheIncluderAndInFoldersTheClosureShows) {
  Write("src/one.h", kStub);
  Write("src/two.h", kStub);
  Write("inc/lib/x.h", "#pragma once\n#  include_next <lib/y.h>\n");
  Write("inc/lib/y.h", "int y;\n");
  Write("inc/lib/z.h", "int y;\n");
  Write("src/main.cpp",
        "#include \"one.h\"\n#include \"two.h\"\n#include <lib/x.h>\n"
        "#  include   <lib/z.h>  // skipped by an #if in real life\n");
  // No include folder named: "inc" is known from where lib/x.h was found.
  EXPECT_THAT(PragmaOnceTwins({dir_ + "/src/main.cpp", dir_ + "/src/one.h", dir_ + "/inc/lib/x.h",
                               dir_ + "/inc/lib/y.h"},
                              {}),
              UnorderedElementsAre(dir_ + "/src/two.h", dir_ + "/inc/lib/z.h"));
}

TEST_F(PragmaOnceTwinsTest, LeavesOutFilesThatDifferOrThatNothingIncludes) {
  Write("a/stub.h", kStub);
  Write("b/stub.h", std::string(kStub) + "// another\n");
  Write("b/same.h", kStub);  // the same bytes, but no #include names it
  Write("c/stub.h", "#pragma once\nstruct _object;\nusing PyObject = _objecT;\n");  // same size
  Write("main.cpp", "#include \"stub.h\"\n#define H \"other.h\"\n#include H\n");
  EXPECT_THAT(PragmaOnceTwins({dir_ + "/main.cpp", dir_ + "/a/stub.h"},
                              {dir_ + "/a", dir_ + "/b", dir_ + "/c"}),
              IsEmpty());
}

}  // namespace
}  // namespace distcc_cuda::client
