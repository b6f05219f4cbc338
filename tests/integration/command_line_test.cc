// SPDX-License-Identifier: Apache-2.0
// The three programs' command lines as a user meets them: exit status 2
// and a hint for a mistyped flag, a flag without its value or a wrong PLAN;
// --help prints every flag and exits 0; --version prints the project's one
// version.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/base/version.h"
#include "tests/support/background_process.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

ProcessResult RunProgram(const std::string& program, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {testing::BinaryPath(program)};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::RunToEnd(argv);
}

TEST(CommandLineTest, MistypedFlagExitsTwoNamingTheClosestFlag) {
  ProcessResult run = RunProgram("distcc-cuda", {"build", "k.toml", "--coordnator", "h:1"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.stderr_text, HasSubstr("unknown flag --coordnator; did you mean --coordinator?"));
  run = RunProgram("distcc-cuda-worker", {"--slotz", "3"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.stderr_text, HasSubstr("did you mean --slots?"));
  run = RunProgram("distcc-cuda-coordinator", {"--frobnicate"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.stderr_text, HasSubstr("unknown flag --frobnicate (--help lists them)"));
}

// `distcc-cuda-coordinator revoke` through the program itself: what it
// writes, what it refuses, and --cross-check-rate out of range.
TEST(CommandLineTest, RevokeWritesTheStateDirsListAndRefusesWhatIsNotAName) {
  std::string state = testing::NewTempDir("revoke-cli-");
  ProcessResult run = RunProgram("distcc-cuda-coordinator", {"revoke", "--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.stdout_text, HasSubstr("revoke --state-dir DIR --lift NAME"));
  run = RunProgram("distcc-cuda-coordinator", {"revoke", "gpu-1"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.stderr_text, HasSubstr("--state-dir DIR is required"));
  run = RunProgram("distcc-cuda-coordinator", {"revoke", "--state-dir", state, "../gpu"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.stderr_text, HasSubstr("worker name"));
  run = RunProgram("distcc-cuda-coordinator", {"revoke", "--state-dir", state + "/none", "gpu-1"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.stderr_text, HasSubstr("is not a folder"));
  run = RunProgram("distcc-cuda-coordinator",
                   {"revoke", "--state-dir=" + state, "--reason", "stolen key", "gpu-1"});
  EXPECT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_THAT(run.stdout_text, HasSubstr("worker gpu-1 revoked"));
  run = RunProgram("distcc-cuda-coordinator", {"revoke", "--state-dir", state, "--list"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.stdout_text, HasSubstr("gpu-1  since "));
  EXPECT_THAT(run.stdout_text, HasSubstr("stolen key"));
  run = RunProgram("distcc-cuda-coordinator", {"revoke", "--state-dir", state, "--lift", "gpu-2"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.stderr_text, HasSubstr("worker 'gpu-2' is not revoked"));
  run = RunProgram("distcc-cuda-coordinator", {"--state-dir", state, "--cross-check-rate", "1.5"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.stderr_text, HasSubstr("--cross-check-rate must be between 0 and 1"));
}

TEST(CommandLineTest, FlagWithoutItsValueExitsTwo) {
  ProcessResult run = RunProgram("distcc-cuda", {"build", "k.toml", "--coordinator"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.stderr_text, HasSubstr("--coordinator needs a value"));
}

TEST(CommandLineTest, HelpListsTheFlagsAndExitsZero) {
  ProcessResult run = RunProgram("distcc-cuda", {"--help"});
  EXPECT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_THAT(run.stdout_text, HasSubstr("distcc-cuda build PLAN"));
  EXPECT_THAT(run.stdout_text, HasSubstr("  --split-architectures  "));
  EXPECT_THAT(run.stdout_text, HasSubstr("  --verify  "));
  EXPECT_THAT(run.stdout_text, HasSubstr("  --config  "));
  run = RunProgram("distcc-cuda-worker", {"--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.stdout_text, HasSubstr("  --memory-cap  "));
}

TEST(CommandLineTest, VersionPrintsTheProjectVersionAndExitsZero) {
  for (const std::string program :
       {"distcc-cuda", "distcc-cuda-coordinator", "distcc-cuda-worker"}) {
    ProcessResult run = RunProgram(program, {"--version"});
    EXPECT_EQ(run.exit_code, 0) << program << ": " << run.stderr_text;
    EXPECT_EQ(run.stdout_text, program + " " + Version() + "\n");
  }
  // Set by CMakeLists.txt's project(VERSION), nothing else.
  EXPECT_THAT(std::string(Version()), ::testing::MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
}

TEST(CommandLineTest, PlanThatIsNeitherAManifestNorACompileCommandsFileExitsTwo) {
  ProcessResult run = RunProgram("distcc-cuda", {"build", "kernel.cu"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.stderr_text,
              HasSubstr("PLAN must be a .toml kernel manifest or a compile_commands.json; got "
                        "kernel.cu"));
}

}  // namespace
}  // namespace distcc_cuda
