// SPDX-License-Identifier: Apache-2.0
#include "client/plan/compile_commands.h"

#include <cstdlib>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/plan/build_plan.h"
#include "common/base/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::client {
namespace {

using ::distcc_cuda::testing::NewTempDir;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::SizeIs;

struct SplitCase {
  std::string name;
  std::string command;
  std::vector<std::string> words;
};

// Names the case in failure output rather than dumping its bytes.
void PrintTo(const SplitCase& test, std::ostream* out) { *out << test.name; }

class SplitCommandLineTest : public ::testing::TestWithParam<SplitCase> {};

TEST_P(SplitCommandLineTest, SplitsLikeAShell) {
  absl::StatusOr<std::vector<std::string>> words = SplitCommandLine(GetParam().command);
  ASSERT_TRUE(words.ok()) << words.status();
  EXPECT_THAT(*words, ElementsAreArray(GetParam().words));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SplitCommandLineTest,
    ::testing::Values(
        SplitCase{"Empty", "", {}}, SplitCase{"OnlyBlanks", " \t\n ", {}},
        SplitCase{"Plain", "nvcc -c a.cu -o a.o", {"nvcc", "-c", "a.cu", "-o", "a.o"}},
        SplitCase{"RunsOfBlanks", "  nvcc\t-c \n a.cu  ", {"nvcc", "-c", "a.cu"}},
        SplitCase{"SingleQuotes", "'a b' c", {"a b", "c"}},
        SplitCase{"SingleQuotesKeepBackslashes", R"('a\"b' c)", {R"(a\"b)", "c"}},
        SplitCase{"DoubleQuotes", R"(-DNAME="a b" x)", {"-DNAME=a b", "x"}},
        SplitCase{"DoubleQuotesEscapeSpecials", R"("q\"\\\$\`")", {R"(q"\$`)"}},
        SplitCase{"DoubleQuotesKeepOtherBackslashes", R"("a\nb")", {R"(a\nb)"}},
        SplitCase{"QuotesInsideDoubleQuotes", R"("it's")", {"it's"}},
        SplitCase{"DoubleInsideSingle", R"(-DX='"q"')", {R"(-DX="q")"}},
        SplitCase{"AdjacentQuotedPartsJoin", R"(a'b c'"d e"f)", {"ab cd ef"}},
        SplitCase{"EmptyQuotesAreAWord", "a '' \"\" b", {"a", "", "", "b"}},
        SplitCase{"BackslashEscapesASpace", R"(my\ file.cu -c)", {"my file.cu", "-c"}},
        SplitCase{"BackslashEscapesAQuote", R"(\"a\')", {R"("a')"}},
        SplitCase{"BackslashBackslash", R"(a\\b)", {R"(a\b)"}}),
    [](const ::testing::TestParamInfo<SplitCase>& info) { return info.param.name; });

TEST(SplitCommandLineTest, RefusesAnUnterminatedQuote) {
  for (const std::string command : {"nvcc -DX='a b", "nvcc \"-DX=a", R"(nvcc "a\")"}) {
    absl::StatusOr<std::vector<std::string>> words = SplitCommandLine(command);
    ASSERT_FALSE(words.ok()) << command;
    EXPECT_EQ(words.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(words.status().message()), HasSubstr("unterminated")) << command;
  }
}

class LoadCompileCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = NewTempDir("compile_commands"); }

  // Writes compile_commands.json with `json` and returns its path.
  std::string Write(const std::string& json) {
    std::string path = dir_ + "/compile_commands.json";
    EXPECT_TRUE(WriteFileAtomically(path, json).ok());
    return path;
  }

  absl::Status LoadError(const std::string& json) {
    absl::StatusOr<std::vector<CompileCommand>> commands = LoadCompileCommands(Write(json));
    EXPECT_FALSE(commands.ok());
    return commands.status();
  }

  std::string dir_;
};

TEST_F(LoadCompileCommandsTest, ReadsTheArgumentsForm) {
  std::string json = R"([{
      "directory": ")" +
                     dir_ + R"(",
      "file": "src/a.cu",
      "arguments": ["/usr/local/cuda/bin/nvcc", "-O2", "-DNAME=a b", "-c", "src/a.cu",
                    "-o", "obj/a.o"]
  }])";
  absl::StatusOr<std::vector<CompileCommand>> commands = LoadCompileCommands(Write(json));
  ASSERT_TRUE(commands.ok()) << commands.status();
  ASSERT_THAT(*commands, SizeIs(1));
  const CompileCommand& command = (*commands)[0];
  EXPECT_EQ(command.directory, AbsolutePath(dir_));
  EXPECT_EQ(command.file, AbsolutePath(dir_ + "/src/a.cu"));
  EXPECT_EQ(command.output, AbsolutePath(dir_ + "/obj/a.o"));
  EXPECT_THAT(command.arguments, ElementsAre("/usr/local/cuda/bin/nvcc", "-O2", "-DNAME=a b", "-c",
                                             "src/a.cu", "-o", "obj/a.o"));
}

TEST_F(LoadCompileCommandsTest, ReadsTheCommandForm) {
  std::string json = R"([
    {"directory": ")" +
                     dir_ + R"(/build", "file": "../a.cu",
     "command": "nvcc -DNAME=\"x y\" -c ../a.cu -o a.o"},
    {"directory": ")" +
                     dir_ + R"(", "file": ")" + dir_ + R"(/b.cu",
     "command": "nvcc -c b.cu"}
  ])";
  absl::StatusOr<std::vector<CompileCommand>> commands = LoadCompileCommands(Write(json));
  ASSERT_TRUE(commands.ok()) << commands.status();
  ASSERT_THAT(*commands, SizeIs(2));
  EXPECT_EQ((*commands)[0].directory, AbsolutePath(dir_ + "/build"));
  EXPECT_EQ((*commands)[0].file, AbsolutePath(dir_ + "/a.cu"));
  EXPECT_EQ((*commands)[0].output, AbsolutePath(dir_ + "/build/a.o"));
  EXPECT_THAT((*commands)[0].arguments,
              ElementsAre("nvcc", "-DNAME=x y", "-c", "../a.cu", "-o", "a.o"));
  // An absolute file stays as it is; without -o nvcc writes NAME.o in the
  // directory.
  EXPECT_EQ((*commands)[1].file, AbsolutePath(dir_ + "/b.cu"));
  EXPECT_EQ((*commands)[1].output, AbsolutePath(dir_ + "/b.o"));
}

TEST_F(LoadCompileCommandsTest, RefusesAnotherCompilerNamingTheEntry) {
  std::string json = R"([
    {"directory": ")" +
                     dir_ + R"(", "file": "a.cu", "command": "nvcc -c a.cu -o a.o"},
    {"directory": ")" +
                     dir_ + R"(", "file": "main.cc", "command": "/usr/bin/g++ -c main.cc"}
  ])";
  absl::Status status = LoadError(json);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("entry 1"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("main.cc"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("/usr/bin/g++"));
}

TEST_F(LoadCompileCommandsTest, RefusesWhatIsNotACompile) {
  std::string json = R"([
    {"directory": ")" +
                     dir_ + R"(", "file": "a.cu", "arguments": ["nvcc", "a.cu", "-o", "a"]}
  ])";
  absl::Status status = LoadError(json);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("entry 0"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("not a compile"));
}

TEST_F(LoadCompileCommandsTest, RefusesAForbiddenOptionNamingTheEntry) {
  std::string json = R"([
    {"directory": ")" +
                     dir_ + R"(", "file": "a.cu", "command": "nvcc -c a.cu -o a.o"},
    {"directory": ")" +
                     dir_ + R"(", "file": "b.cu",
     "command": "nvcc -ccbin /opt/gcc/bin/g++ -c b.cu -o b.o"}
  ])";
  absl::Status status = LoadError(json);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("entry 1"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("-ccbin"));
}

struct MalformedCase {
  std::string name;
  std::string json;
  std::vector<std::string> mentions;
};

// Names the case in failure output rather than dumping its bytes.
void PrintTo(const MalformedCase& test, std::ostream* out) { *out << test.name; }

class MalformedCompileCommandsTest : public LoadCompileCommandsTest,
                                     public ::testing::WithParamInterface<MalformedCase> {};

TEST_P(MalformedCompileCommandsTest, IsInvalidArgument) {
  absl::Status status = LoadError(GetParam().json);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(dir_ + "/compile_commands.json"));
  for (const std::string& mention : GetParam().mentions) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(mention));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MalformedCompileCommandsTest,
    ::testing::Values(
        MalformedCase{"InvalidJson", R"([{"directory": "/x", )", {"not valid JSON"}},
        MalformedCase{"NotAnArray", R"({"directory": "/x", "file": "a.cu"})", {"array"}},
        MalformedCase{"EmptyArray", "[]", {"no entries"}},
        MalformedCase{"EntryNotAnObject", R"(["nvcc -c a.cu"])", {"entry 0"}},
        MalformedCase{"NoFile", R"([{"directory": "/x", "command": "nvcc -c a.cu"}])", {"entry 0"}},
        MalformedCase{"NoCommand", R"([{"directory": "/x", "file": "a.cu"}])", {"entry 0"}},
        MalformedCase{"NonStringArgument",
                      R"([{"directory": "/x", "file": "a.cu", "arguments": ["nvcc", 3]}])",
                      {"entry 0"}},
        MalformedCase{"EmptyCommand",
                      R"([{"directory": "/x", "file": "a.cu", "command": " "}])",
                      {"entry 0"}},
        MalformedCase{"UnterminatedQuote",
                      R"([{"directory": "/x", "file": "a.cu", "command": "nvcc -c 'a.cu"}])",
                      {"entry 0", "unterminated"}}),
    [](const ::testing::TestParamInfo<MalformedCase>& info) { return info.param.name; });

TEST(LoadCompileCommandsFileTest, MissingDatabaseIsNotFound) {
  std::string path = NewTempDir("compile_commands") + "/compile_commands.json";
  absl::StatusOr<std::vector<CompileCommand>> commands = LoadCompileCommands(path);
  ASSERT_FALSE(commands.ok());
  EXPECT_EQ(commands.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(commands.status().message()), HasSubstr(path));
}

LocalPlan PlanOfEntries(const std::string& directory, const std::vector<std::string>& compilers) {
  LocalPlan plan;
  for (size_t i = 0; i < compilers.size(); ++i) {
    LocalUnit unit;
    unit.name = absl::StrCat("k", i, ".cu");
    unit.directory = directory;
    unit.compiler = compilers[i];
    plan.units.push_back(std::move(unit));
  }
  return plan;
}

// A compile is what its command asked: an entry whose nvcc says another
// release is refused, naming both and --nvcc; the build's own nvcc, a copy
// of it (found by path, relative or through $PATH) and an nvcc this
// machine lacks (said, once) pass; one that names no release is refused.
TEST(CheckEntriesCompilerTest, AnEntryOfAnotherNvccIsRefusedNamingBoth) {
  const std::string dir = NewTempDir("entries-compiler-");
  const std::string ours = testing::FakeNvccWithRelease(dir, "13.0");
  const std::string copy = testing::FakeNvccWithRelease(dir + "/copy", "13.0");
  const std::string theirs = testing::FakeNvccWithRelease(dir, "13.2");
  v1::ToolchainFingerprint toolchain;
  toolchain.set_nvcc_release("13.0");
  toolchain.set_nvcc_build("fake_cuda_13.0");
  std::ostringstream out;
  EXPECT_TRUE(CheckEntriesCompiler(PlanOfEntries(dir, {ours, copy, "copy/cuda-13.0/bin/nvcc"}),
                                   ours, toolchain, out)
                  .ok());
  EXPECT_EQ(out.str(), "");

  absl::Status refused =
      CheckEntriesCompiler(PlanOfEntries(dir, {ours, theirs, theirs}), ours, toolchain, out);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr(absl::StrCat("2 entries (k1.cu, ...) are compiled with ", theirs,
                                     ", nvcc 13.2 (fake_cuda_13.2), but this build's nvcc is ",
                                     ours, ", nvcc 13.0 (fake_cuda_13.0)")));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("build with --nvcc " + theirs));

  const char* path = std::getenv("PATH");
  const std::string saved = path == nullptr ? "" : path;
  setenv("PATH", (dir + "/cuda-13.2/bin:" + saved).c_str(), 1);
  refused = CheckEntriesCompiler(PlanOfEntries(dir, {"nvcc"}), ours, toolchain, out);
  setenv("PATH", saved.c_str(), 1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("1 entry (k0.cu) are compiled with"));

  EXPECT_TRUE(CheckEntriesCompiler(PlanOfEntries(dir, {"/nowhere/bin/nvcc", "/nowhere/bin/nvcc"}),
                                   ours, toolchain, out)
                  .ok());
  EXPECT_EQ(out.str(), absl::StrCat("distcc-cuda: note: compile_commands.json names "
                                    "/nowhere/bin/nvcc for 2 entries (k0.cu, ...), which this "
                                    "machine lacks; they compile with ",
                                    ours, ", nvcc 13.0 (fake_cuda_13.0)\n"));

  const std::string mute = testing::WriteNvccWrapper(dir + "/mute-nvcc", "/bin/echo", "");
  refused = CheckEntriesCompiler(PlanOfEntries(dir, {mute}), ours, toolchain, out);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("does not name a CUDA release"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--nvcc PATH"));
}

}  // namespace
}  // namespace distcc_cuda::client
