// SPDX-License-Identifier: Apache-2.0
#include "common/base/config_file.h"

#include <ostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/base/command_line.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

// Settings of this test binary: ConfigFileArguments checks keys against the
// flags linked into the program, and these are the ones linked here.
ABSL_FLAG(std::string, config_test_text, "default", "a string setting for the tests");
ABSL_FLAG(int, config_test_count, 0, "an integer setting for the tests");
ABSL_FLAG(bool, config_test_switch, false, "a boolean setting for the tests");

namespace distcc_cuda {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr char kProgram[] = "distcc-cuda-worker";

// Writes `content` to a new config file and returns its path.
std::string WriteConfig(const std::string& content) {
  std::string path = testing::NewTempDir("config_file") + "/config.toml";
  absl::Status written = WriteFileAtomically(path, content);
  EXPECT_TRUE(written.ok()) << written;
  return path;
}

struct ArgumentsCase {
  std::string name;
  std::string file;
  std::string table;
  std::vector<std::string> arguments;
};

void PrintTo(const ArgumentsCase& c, std::ostream* os) { *os << c.name; }

class ConfigFileArgumentsTest : public ::testing::TestWithParam<ArgumentsCase> {};

TEST_P(ConfigFileArgumentsTest, TurnsTheProgramsTableIntoFlags) {
  std::string path = WriteConfig(GetParam().file);
  absl::StatusOr<std::vector<std::string>> arguments =
      ConfigFileArguments(path, GetParam().table, kProgram);
  ASSERT_TRUE(arguments.ok()) << arguments.status();
  EXPECT_THAT(*arguments, ElementsAreArray(GetParam().arguments));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConfigFileArgumentsTest,
    ::testing::Values(
        ArgumentsCase{"String",
                      "[worker]\nconfig_test_text = \"10.0.0.5:3633\"\n",
                      "worker",
                      {"--config_test_text=10.0.0.5:3633"}},
        ArgumentsCase{"StringKeptAsWritten",
                      "[worker]\nconfig_test_text = \"a b=c \\\"d\\\"\"\n",
                      "worker",
                      {"--config_test_text=a b=c \"d\""}},
        ArgumentsCase{"EmptyString",
                      "[worker]\nconfig_test_text = \"\"\n",
                      "worker",
                      {"--config_test_text="}},
        ArgumentsCase{
            "Integer", "[worker]\nconfig_test_count = 8\n", "worker", {"--config_test_count=8"}},
        ArgumentsCase{"NegativeInteger",
                      "[worker]\nconfig_test_count = -3\n",
                      "worker",
                      {"--config_test_count=-3"}},
        ArgumentsCase{"IntegerFlagFromString",
                      "[worker]\nconfig_test_count = \"8\"\n",
                      "worker",
                      {"--config_test_count=8"}},
        ArgumentsCase{"IntegerIntoStringFlag",
                      "[worker]\nconfig_test_text = 32\n",
                      "worker",
                      {"--config_test_text=32"}},
        ArgumentsCase{"True",
                      "[worker]\nconfig_test_switch = true\n",
                      "worker",
                      {"--config_test_switch=true"}},
        ArgumentsCase{"False",
                      "[worker]\nconfig_test_switch = false\n",
                      "worker",
                      {"--config_test_switch=false"}},
        ArgumentsCase{"DashedKeys",
                      "[worker]\nconfig-test-text = \"x\"\nconfig-test-count = 2\n",
                      "worker",
                      {"--config_test_count=2", "--config_test_text=x"}},
        ArgumentsCase{"MixedDashesAndUnderscores",
                      "[worker]\nconfig-test_switch = true\n",
                      "worker",
                      {"--config_test_switch=true"}},
        ArgumentsCase{"OnlyTheProgramsOwnTable",
                      "[client]\nconfig-test-text = \"client\"\nnot-a-worker-flag = 1\n"
                      "[worker]\nconfig-test-text = \"worker\"\n"
                      "[coordinator]\nconfig-test-text = \"coordinator\"\n",
                      "worker",
                      {"--config_test_text=worker"}},
        ArgumentsCase{"AnotherProgramsTable",
                      "[client]\nconfig-test-text = \"client\"\n"
                      "[worker]\nconfig-test-text = \"worker\"\n",
                      "client",
                      {"--config_test_text=client"}},
        ArgumentsCase{
            "NoTableForTheProgram", "[client]\nconfig-test-text = \"client\"\n", "coordinator", {}},
        ArgumentsCase{"EmptyTable", "[worker]\n", "worker", {}},
        ArgumentsCase{"EmptyFile", "", "worker", {}},
        ArgumentsCase{"CommentsOnly", "# nothing yet\n", "worker", {}}),
    [](const ::testing::TestParamInfo<ArgumentsCase>& info) { return info.param.name; });

struct ErrorCase {
  std::string name;
  std::string file;
  // The message, with PATH standing for the file's path (every time).
  std::string message;
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

class ConfigFileErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ConfigFileErrorTest, NamesTheFileThePlaceAndTheProblem) {
  std::string path = WriteConfig(GetParam().file);
  absl::StatusOr<std::vector<std::string>> arguments =
      ConfigFileArguments(path, "worker", kProgram);
  ASSERT_FALSE(arguments.ok()) << "accepted: " << ::testing::PrintToString(*arguments);
  EXPECT_EQ(arguments.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(arguments.status().message()),
            absl::StrReplaceAll(GetParam().message, {{"PATH", path}}));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConfigFileErrorTest,
    ::testing::Values(
        ErrorCase{"UnknownKey", "[worker]\nconfig-test-text = \"x\"\nslot = 8\n",
                  "PATH:3:1: [worker] has no setting 'slot'; see distcc-cuda-worker --help"},
        ErrorCase{"UnknownKeyIndented", "[worker]\n  memory-cap-typo = \"1GiB\"\n",
                  "PATH:2:3: [worker] has no setting 'memory-cap-typo'; see "
                  "distcc-cuda-worker --help"},
        ErrorCase{"AbseilsOwnFlagIsNoSetting", "[worker]\nflagfile = \"other\"\n",
                  "PATH:2:1: [worker] has no setting 'flagfile'; see distcc-cuda-worker --help"},
        ErrorCase{"ConfigKey", "[worker]\nconfig = \"other.toml\"\n",
                  "PATH:2:1: [worker] cannot name another config file; use --config or "
                  "$DISTCC_CUDA_CONFIG"},
        ErrorCase{"TopLevelKey", "config_test_count = 8\n[worker]\n",
                  "PATH:1:1: 'config_test_count' is outside any table; put it under [client], "
                  "[worker] or [coordinator]"},
        ErrorCase{"UnknownTable", "[worker]\n[wroker]\nconfig_test_count = 8\n",
                  "PATH:2:2: unknown table [wroker]; the tables are [client], [worker] and "
                  "[coordinator]"},
        ErrorCase{"ArrayOfTables", "[[worker]]\nconfig_test_count = 8\n",
                  "PATH:1:3: 'worker' is outside any table; put it under [client], [worker] or "
                  "[coordinator]"},
        ErrorCase{"SameSettingTwice", "[worker]\nconfig-test-count = 1\nconfig_test_count = 2\n",
                  "PATH:3:1: [worker] sets 'config_test_count' again (first as "
                  "'config-test-count' at PATH:2:1)"},
        ErrorCase{"FloatValue", "[worker]\nconfig_test_text = 1.5\n",
                  "PATH:2:20: [worker] 'config_test_text' must be a string, an integer or a "
                  "boolean"},
        ErrorCase{"ArrayValue", "[worker]\nconfig_test_text = [\"a\"]\n",
                  "PATH:2:20: [worker] 'config_test_text' must be a string, an integer or a "
                  "boolean"},
        ErrorCase{"ValueTheFlagCannotTake", "[worker]\nconfig-test-count = \"eight\"\n",
                  "PATH:2:21: [worker] 'config-test-count' cannot be 'eight'; see "
                  "distcc-cuda-worker --help"},
        ErrorCase{"IntegerForBoolean", "[worker]\nconfig_test_switch = 3\n",
                  "PATH:2:22: [worker] 'config_test_switch' cannot be '3'; see "
                  "distcc-cuda-worker --help"}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) { return info.param.name; });

TEST(ConfigFileTest, MalformedTomlNamesTheLine) {
  std::string path = WriteConfig("[worker]\nconfig_test_count = 8\nconfig_test_text = \n");
  absl::StatusOr<std::vector<std::string>> arguments =
      ConfigFileArguments(path, "worker", kProgram);
  ASSERT_FALSE(arguments.ok());
  EXPECT_EQ(arguments.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(arguments.status().message()), ::testing::StartsWith(path + ":3:"));
}

TEST(ConfigFileTest, DuplicateTomlKeyIsMalformed) {
  std::string path = WriteConfig("[worker]\nconfig_test_count = 8\nconfig_test_count = 9\n");
  absl::StatusOr<std::vector<std::string>> arguments =
      ConfigFileArguments(path, "worker", kProgram);
  ASSERT_FALSE(arguments.ok());
  EXPECT_THAT(std::string(arguments.status().message()), ::testing::StartsWith(path + ":3:"));
}

TEST(ConfigFileTest, MissingFileNamesThePath) {
  std::string path = testing::NewTempDir("config_file") + "/absent.toml";
  absl::StatusOr<std::vector<std::string>> arguments =
      ConfigFileArguments(path, "worker", kProgram);
  ASSERT_FALSE(arguments.ok());
  EXPECT_EQ(arguments.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(arguments.status().message()), HasSubstr(path));
}

// WithConfigFileArguments: which file, and where its settings go.
TEST(WithConfigFileArgumentsTest, InsertsTheSettingsRightAfterTheProgramName) {
  std::string path = WriteConfig("[worker]\nconfig-test-count = 8\n");
  absl::StatusOr<std::vector<std::string>> args = WithConfigFileArguments(
      {"prog", "--config", path, "--config_test_count=9", "file.cu"}, "", "worker", kProgram);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ElementsAre("prog", "--config_test_count=8", "--config", path,
                                 "--config_test_count=9", "file.cu"));
}

TEST(WithConfigFileArgumentsTest, UsesTheEnvironmentsFileWithoutConfigFlag) {
  std::string path = WriteConfig("[worker]\nconfig-test-count = 8\n");
  absl::StatusOr<std::vector<std::string>> args =
      WithConfigFileArguments({"prog"}, path, "worker", kProgram);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ElementsAre("prog", "--config_test_count=8"));
}

TEST(WithConfigFileArgumentsTest, ConfigFlagWinsOverTheEnvironment) {
  std::string from_flag = WriteConfig("[worker]\nconfig-test-count = 1\n");
  std::string from_environment = WriteConfig("[worker]\nconfig-test-count = 2\n");
  absl::StatusOr<std::vector<std::string>> args = WithConfigFileArguments(
      {"prog", "--config=" + from_flag}, from_environment, "worker", kProgram);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ElementsAre("prog", "--config_test_count=1", "--config=" + from_flag));
}

TEST(WithConfigFileArgumentsTest, EmptyConfigFlagTurnsTheEnvironmentsFileOff) {
  std::string from_environment = WriteConfig("[worker]\nconfig-test-count = 2\n");
  absl::StatusOr<std::vector<std::string>> args =
      WithConfigFileArguments({"prog", "--config="}, from_environment, "worker", kProgram);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ElementsAre("prog", "--config="));
}

TEST(WithConfigFileArgumentsTest, NoFileLeavesTheArgumentsAlone) {
  absl::StatusOr<std::vector<std::string>> args =
      WithConfigFileArguments({"prog", "--config_test_count=3"}, "", "worker", kProgram);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ElementsAre("prog", "--config_test_count=3"));
}

TEST(WithConfigFileArgumentsTest, MissingFileFromTheEnvironmentSaysSo) {
  std::string path = testing::NewTempDir("config_file") + "/absent.toml";
  absl::StatusOr<std::vector<std::string>> args =
      WithConfigFileArguments({"prog"}, path, "worker", kProgram);
  ASSERT_FALSE(args.ok());
  EXPECT_THAT(std::string(args.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(args.status().message()), HasSubstr("$DISTCC_CUDA_CONFIG"));
}

TEST(WithConfigFileArgumentsTest, MissingFileFromTheFlagNamesIt) {
  std::string path = testing::NewTempDir("config_file") + "/absent.toml";
  absl::StatusOr<std::vector<std::string>> args =
      WithConfigFileArguments({"prog", "--config", path}, "", "worker", kProgram);
  ASSERT_FALSE(args.ok());
  EXPECT_EQ(args.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(args.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(args.status().message()),
              ::testing::Not(HasSubstr("DISTCC_CUDA_CONFIG")));
}

// ParseFlags end to end: the file's settings take effect, and the command line
// wins over them.
class ParseFlagsWithConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::SetFlag(&FLAGS_config_test_text, "default");
    absl::SetFlag(&FLAGS_config_test_count, 0);
    absl::SetFlag(&FLAGS_config_test_switch, false);
  }
  void TearDown() override { SetUp(); }

  std::vector<std::string> Parse(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    return ParseFlags(static_cast<int>(argv.size()), argv.data(), "worker");
  }
};

TEST_F(ParseFlagsWithConfigTest, FileSetsTheFlags) {
  std::string path = WriteConfig(
      "[worker]\nconfig-test-text = \"file\"\nconfig-test-count = 8\nconfig-test-switch = true\n");
  std::vector<std::string> positional = Parse({"prog", "--config", path, "unit.cu"});
  EXPECT_THAT(positional, ElementsAre("prog", "unit.cu"));
  EXPECT_EQ(absl::GetFlag(FLAGS_config_test_text), "file");
  EXPECT_EQ(absl::GetFlag(FLAGS_config_test_count), 8);
  EXPECT_TRUE(absl::GetFlag(FLAGS_config_test_switch));
}

TEST_F(ParseFlagsWithConfigTest, CommandLineWinsOverTheFile) {
  std::string path = WriteConfig(
      "[worker]\nconfig-test-text = \"file\"\nconfig-test-count = 8\nconfig-test-switch = true\n");
  Parse({"prog", "--config-test-text=cli", "--config=" + path, "--config-test-count", "9",
         "--noconfig-test-switch"});
  EXPECT_EQ(absl::GetFlag(FLAGS_config_test_text), "cli");
  EXPECT_EQ(absl::GetFlag(FLAGS_config_test_count), 9);
  EXPECT_FALSE(absl::GetFlag(FLAGS_config_test_switch));
}

TEST_F(ParseFlagsWithConfigTest, BadFileExitsWithStatusTwoAndTheMessage) {
  std::string path = WriteConfig("[worker]\nslot = 8\n");
  EXPECT_EXIT(Parse({"distcc-cuda-worker", "--config", path}), ::testing::ExitedWithCode(2),
              "^distcc-cuda-worker: .*/config.toml:2:1: \\[worker\\] has no setting 'slot'; "
              "see distcc-cuda-worker --help");
}

// The real worker binary reads its table (with the fake compiler as nvcc).
ProcessResult RunWorker(const std::vector<std::string>& args) {
  ProcessSpec spec;
  spec.argv = {testing::BinaryPath("distcc-cuda-worker")};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.environment = {{"DISTCC_CUDA_CONFIG", ""}};
  spec.timeout = absl::Seconds(60);
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : ProcessResult{};
}

TEST(WorkerConfigFileTest, WorkerTakesItsNvccFromTheFile) {
  std::string dir = testing::NewTempDir("config_file_worker");
  std::string nvcc = testing::FakeNvccWithRelease(dir, "12.8");
  std::string path = WriteConfig(
      absl::StrCat("[client]\nnvcc = \"/nowhere/nvcc\"\n", "[worker]\nnvcc = \"", nvcc, "\"\n"));
  ProcessResult result = RunWorker({"--config", path, "--print-toolchain"});
  ASSERT_EQ(result.exit_code, 0) << result.stderr_text;
  EXPECT_THAT(result.stdout_text, HasSubstr("12.8"));
}

TEST(WorkerConfigFileTest, WorkerCommandLineWinsOverTheFile) {
  std::string path = WriteConfig("[worker]\nnvcc = \"/nowhere/nvcc\"\n");
  ProcessResult result =
      RunWorker({"--config", path, "--nvcc", testing::FakeNvccPath(), "--print-toolchain"});
  ASSERT_EQ(result.exit_code, 0) << result.stderr_text;
  EXPECT_THAT(result.stdout_text, HasSubstr("13.0"));
}

TEST(WorkerConfigFileTest, WorkerRefusesTheWrongReleaseNamedInTheFile) {
  std::string dir = testing::NewTempDir("config_file_worker");
  std::string path = WriteConfig(absl::StrCat(
      "[worker]\nrequire-nvcc = \"99.9\"\nmemory-cap = \"1GiB\"\nslots = 1\nwork-dir = \"", dir,
      "/work\"\n"));
  ProcessResult result = RunWorker(
      {"--config", path, "--nvcc", testing::FakeNvccPath(), "--coordinator", "127.0.0.1:1"});
  EXPECT_EQ(result.exit_code, 1) << result.stderr_text;
  EXPECT_THAT(result.stderr_text, HasSubstr("99.9"));
}

TEST(WorkerConfigFileTest, WorkerRejectsAnUnknownKey) {
  std::string path = WriteConfig("[worker]\nslot = 8\n");
  ProcessResult result = RunWorker({"--config", path, "--print-toolchain"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.stderr_text, absl::StrCat("distcc-cuda-worker: ", path,
                                             ":2:1: [worker] has no setting 'slot'; see "
                                             "distcc-cuda-worker --help\n"));
}

}  // namespace
}  // namespace distcc_cuda
