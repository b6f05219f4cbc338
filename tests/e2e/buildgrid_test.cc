// SPDX-License-Identifier: Apache-2.0
// distcc-cuda workers as the bots of another Remote Execution API engine
// (issue 33): a real BuildGrid 0.9.1 with its PostgreSQL on loopback
// (tests/e2e/buildgrid/serve), real distcc-cuda-worker processes joined to
// it with --bots-api, and Debian's Bazel 4.2.3 pointed at BuildGrid. The
// nvcc actions run on the bots (two at once on two bots), a second build
// is BuildGrid's action-cache hit, an action the argument model refuses is
// refused by the bot, and a memory kill under the bot's cap comes back as
// exit 137 with why. And the distcc-cuda client itself submitting to
// BuildGrid (`build --remote-executor`): examples/attention built on two
// bots, then from BuildGrid's ActionCache, and a unit a bot killed for memory
// sent again with a larger memory property.
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/base/byte_size.h"
#include "common/base/cancellation.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "common/reapi/engine_channel.h"
#include "common/reapi/execution_client.h"
#include "common/reapi/reapi_cas_client.h"
#include "common/reapi/unit_action.h"
#include "common/store/digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/background_process.h"
#include "tests/support/bazel_client.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kInstance[] = "main";

class BuildGridTest : public ::testing::Test {
 protected:
  // One BuildGrid for the suite (its start takes seconds); each test joins
  // bots of its own and builds targets no other test builds.
  static void SetUpTestSuite() {
    const char* bgd = std::getenv("DISTCC_BUILDGRID_BGD");
    if (bgd == nullptr || !fs::exists(bgd)) {
      skip_ = "needs BuildGrid: DISTCC_BUILDGRID_BGD=$(./scripts/buildgrid) (scripts/test sets it)";
      return;
    }
    if (testing::RealNvccPath().empty()) {
      skip_ = "needs the real nvcc at /usr/local/cuda/bin/nvcc";
      return;
    }
    if (!fs::exists(testing::kBazel)) {
      skip_ = "needs Bazel 4 (apt-get install bazel-bootstrap)";
      return;
    }
    root_ = new std::string(testing::NewTempDir("buildgrid-"));
    fs::permissions(*root_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
    const int port = testing::FreeLoopbackPort();
    address_ = new std::string(absl::StrCat("127.0.0.1:", port));
    auto serve = testing::BackgroundProcess::Start(
        {testing::SourceDir() + "/tests/e2e/buildgrid/serve", "--bgd", bgd, *root_ + "/state",
         absl::StrCat(port), kInstance},
        *root_ + "/buildgrid.log");
    if (!serve.ok()) {
      skip_ = absl::StrCat("cannot start tests/e2e/buildgrid/serve: ", serve.status().ToString());
      return;
    }
    buildgrid_ = serve->release();
    absl::StatusOr<std::string> ready =
        buildgrid_->WaitForLog("buildgrid: serving", absl::Seconds(90));
    if (!ready.ok()) start_failure_ = new std::string(ready.status().ToString());
  }

  static void TearDownTestSuite() {
    if (buildgrid_ != nullptr) {
      // serve stops bgd and PostgreSQL on SIGTERM (a few seconds).
      buildgrid_->Stop(SIGTERM, absl::Seconds(30)).IgnoreError();
      delete buildgrid_;
      buildgrid_ = nullptr;
    }
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_EQ(start_failure_, nullptr) << *start_failure_;
    dir_ = testing::NewTempDir("buildgrid-run-");
    workspace_ = dir_ + "/workspace";
    fs::copy(testing::SourceDir() + "/tests/e2e/bazel_workspace", workspace_,
             fs::copy_options::recursive);
  }

  // A distcc-cuda-worker joined to BuildGrid as bot `name`.
  testing::BackgroundProcess* StartBot(const std::string& name, const std::string& memory_cap,
                                       const std::vector<std::string>& flags = {}) {
    std::vector<std::string> argv = {testing::BinaryPath("distcc-cuda-worker"),
                                     "--bots-api",
                                     "grpc://" + *address_,
                                     "--instance",
                                     kInstance,
                                     "--name",
                                     name,
                                     "--slots",
                                     "1",
                                     "--memory-cap",
                                     memory_cap,
                                     "--work-dir",
                                     dir_ + "/" + name};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto bot = testing::BackgroundProcess::Start(argv, dir_ + "/" + name + ".log");
    EXPECT_TRUE(bot.ok()) << bot.status();
    if (!bot.ok()) return nullptr;
    bots_.push_back(*std::move(bot));
    // The session is open once BuildGrid answers its first (held) call.
    absl::StatusOr<std::string> joined =
        bots_.back()->WaitForLog(absl::StrCat("bot ", name, " joined"), absl::Seconds(60));
    EXPECT_TRUE(joined.ok()) << joined.status();
    return bots_.back().get();
  }

  // `bazel build TARGETS` with remote execution on BuildGrid.
  ProcessResult Build(const std::vector<std::string>& targets,
                      const std::vector<std::string>& flags = {}) {
    ProcessSpec spec;
    spec.argv = testing::BazelRemoteBuild(dir_, "grpc://" + *address_, kInstance);
    spec.argv.insert(spec.argv.end(), {"--remote_retries=0", "--jobs=4"});
    spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
    spec.argv.insert(spec.argv.end(), targets.begin(), targets.end());
    spec.working_directory = workspace_;
    spec.timeout = absl::Minutes(5);
    absl::StatusOr<ProcessResult> ran = RunProcess(spec);
    EXPECT_TRUE(ran.ok()) << ran.status();
    return ran.ok() ? *ran : ProcessResult{};
  }

  std::string Object(const std::string& name) const { return testing::BazelOutput(dir_, name); }

  // `distcc-cuda build PLAN` on BuildGrid, with the client's state in
  // `state` (its own result cache: a new one has nothing).
  std::vector<std::string> ClientBuild(const std::string& plan, const std::string& out,
                                       const std::string& state,
                                       const std::vector<std::string>& flags = {}) const {
    std::vector<std::string> argv = {testing::BinaryPath("distcc-cuda"),
                                     "build",
                                     plan,
                                     "-o",
                                     out,
                                     "--state-dir",
                                     state,
                                     "--remote-executor",
                                     "grpc://" + *address_,
                                     "--remote-instance",
                                     kInstance};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return argv;
  }

  static inline std::string skip_;
  static inline std::string* root_ = nullptr;
  static inline std::string* address_ = nullptr;
  static inline std::string* start_failure_ = nullptr;
  static inline testing::BackgroundProcess* buildgrid_ = nullptr;
  std::string dir_;
  std::string workspace_;
  std::vector<std::unique_ptr<testing::BackgroundProcess>> bots_;
};

TEST_F(BuildGridTest, BazelsActionsRunOnTwoBotsAndThenHitBuildGridsCache) {
  testing::BackgroundProcess* first = StartBot("bg-bot-a", "4GiB");
  testing::BackgroundProcess* second = StartBot("bg-bot-b", "4GiB");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ProcessResult built = Build({"//:kernel", "//:kernel_variant"});
  ASSERT_EQ(built.exit_code, 0) << built.stderr_text;
  EXPECT_THAT(built.stderr_text, HasSubstr("2 remote."));
  for (const std::string object : {"kernel.o", "kernel_variant.o"}) {
    ProcessResult inspect = testing::RunToEnd(
        {testing::BinaryPath("distcc-cuda"), "inspect", Object(object)}, absl::Minutes(1));
    EXPECT_THAT(inspect.stdout_text, HasSubstr("sm_100 cubin\n")) << object << inspect.stderr_text;
  }
  // Each bot takes one lease at a time (--slots 1): both compiled.
  EXPECT_THAT(first->Log(), HasSubstr("ended: TASK_COMPLETED (exit 0,"));
  EXPECT_THAT(second->Log(), HasSubstr("ended: TASK_COMPLETED (exit 0,"));

  // Bazel's own outputs gone: the results come from BuildGrid's cache.
  fs::remove_all(dir_ + "/bazel-base/execroot/distcc_cuda_bazel_e2e/bazel-out");
  fs::remove_all(dir_ + "/bazel-base/action_cache");
  ProcessResult again = Build({"//:kernel", "//:kernel_variant"});
  ASSERT_EQ(again.exit_code, 0) << again.stderr_text;
  EXPECT_THAT(again.stderr_text, HasSubstr("2 remote cache hit"));
  EXPECT_TRUE(fs::exists(Object("kernel.o")));

  // A stopped bot ends cleanly, having told BuildGrid it goes.
  absl::StatusOr<int> stopped = first->Stop(SIGTERM, absl::Seconds(10));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_TRUE(WIFEXITED(*stopped) && WEXITSTATUS(*stopped) == 0) << first->Log();
  EXPECT_THAT(first->Log(), HasSubstr("node peak"));
}

TEST_F(BuildGridTest, TheBotRefusesAnActionTheArgumentModelRefuses) {
  testing::BackgroundProcess* bot = StartBot("bg-bot-guard", "4GiB");
  ASSERT_NE(bot, nullptr);
  ProcessResult hostile = Build({"//:hostile"});
  EXPECT_NE(hostile.exit_code, 0);
  EXPECT_THAT(hostile.stderr_text, HasSubstr("-fplugin=/tmp/evil.so' is not allowed on a worker"));
  EXPECT_FALSE(fs::exists(Object("hostile.o")));
  EXPECT_THAT(bot->Log(), HasSubstr("hostile.o ended: TASK_REJECTED"));

  // BuildGrid matches no toolchain (a wildcard property): the bot refuses
  // an action that asks for another one before it fetches its inputs.
  ProcessResult other = Build({"//:kernel"}, {"--remote_default_exec_properties=toolchain=99.9"});
  EXPECT_NE(other.exit_code, 0);
  EXPECT_THAT(other.stderr_text,
              HasSubstr("the action asks for toolchain '99.9'; bot bg-bot-guard"));
  // Nor one that says it needs more memory than the bot's cap.
  ProcessResult huge = Build({"//:kernel"}, {"--remote_default_exec_properties=memory=64GiB"});
  EXPECT_NE(huge.exit_code, 0);
  EXPECT_THAT(huge.stderr_text, HasSubstr("takes 64.0 GiB of memory; bot bg-bot-guard has a cap of "
                                          "4.0 GiB: it can never run here"));
  EXPECT_THAT(bot->Log(), Not(HasSubstr("TASK_COMPLETED")));
}

TEST_F(BuildGridTest, AMemoryKillUnderTheBotsCapIsExit137WithWhy) {
  // nvcc's front end alone takes more than 100 MiB.
  testing::BackgroundProcess* bot = StartBot("bg-bot-small", "100MiB");
  ASSERT_NE(bot, nullptr);
  // A platform property makes this an action no other test ran (and one
  // with a memory hint, which the bot reserves).
  ProcessResult killed = Build({"//:kernel"}, {"--remote_default_exec_properties=memory=64MiB"});
  EXPECT_NE(killed.exit_code, 0);
  EXPECT_THAT(killed.stderr_text, HasSubstr("(Killed)"));
  EXPECT_THAT(killed.stderr_text, HasSubstr("distcc-cuda: kernel.o was killed for memory"));
  EXPECT_THAT(killed.stderr_text, HasSubstr("cap 100 MiB"));
  EXPECT_THAT(bot->Log(), HasSubstr("kernel.o ended: TASK_KILLED_FOR_MEMORY (exit 137,"));
  // Stopped, it tells BuildGrid so (the next test's leases go to its bot).
  absl::StatusOr<int> stopped = bot->Stop(SIGTERM, absl::Seconds(10));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_THAT(bot->Log(), Not(HasSubstr("could not tell")));
}

TEST_F(BuildGridTest, AUnitKilledBesideAnotherRunsAgainAloneOnTheBot) {
  // The fake nvcc: each of //:heavy_a and //:heavy_b holds 200 MiB for 8 s,
  // so the two leases at once overflow the bot's 300 MiB cap.
  testing::BackgroundProcess* bot =
      StartBot("bg-bot-pair", "300MiB",
               {"--slots", "2", "--nvcc", testing::FakeNvccPath(), "--memory-mechanism", "auto"});
  ASSERT_NE(bot, nullptr);
  ProcessResult built = Build({"//:heavy_a", "//:heavy_b"});
  ASSERT_EQ(built.exit_code, 0) << built.stderr_text << bot->Log();
  EXPECT_THAT(built.stderr_text, HasSubstr("2 remote."));
  EXPECT_THAT(bot->Log(), HasSubstr("was killed for memory beside other units")) << bot->Log();
  EXPECT_THAT(bot->Log(), HasSubstr("running it again alone"));
  EXPECT_TRUE(fs::exists(Object("heavy_a.o")));
  EXPECT_TRUE(fs::exists(Object("heavy_b.o")));
}

TEST_F(BuildGridTest, AnIdleBotWaitsForWorkInsteadOfAskingAgainAndAgain) {
  const std::string metrics = absl::StrCat("127.0.0.1:", testing::FreeLoopbackPort());
  testing::BackgroundProcess* bot = StartBot("bg-bot-idle", "1GiB", {"--metrics-listen", metrics});
  ASSERT_NE(bot, nullptr);
  auto calls = [&metrics]() -> double {
    absl::StatusOr<std::string> text = testing::HttpGet("http://" + metrics + "/metrics");
    EXPECT_TRUE(text.ok()) << text.status();
    absl::StatusOr<testing::ScrapedMetrics> scraped =
        testing::ParsePrometheusText(text.value_or(""));
    EXPECT_TRUE(scraped.ok()) << scraped.status();
    if (!scraped.ok()) return -1;
    EXPECT_EQ(scraped->Value("distcc_cuda_worker_registered"), 1);
    return scraped->Sum("distcc_cuda_worker_bot_calls_total", "call=\"update\"");
  };
  const double before = calls();
  absl::SleepFor(absl::Seconds(6));
  // BuildGrid holds an idle bot's update for 24 s; whatever an engine does,
  // the bot asks at most once a second.
  EXPECT_LE(calls() - before, 7) << bot->Log();
}

TEST_F(BuildGridTest, TheClientBuildsAttentionOnTwoBotsThenFromTheEnginesActionCache) {
  ASSERT_NE(StartBot("bg-bot-c1", "4GiB"), nullptr);
  ASSERT_NE(StartBot("bg-bot-c2", "4GiB"), nullptr);
  const std::string plan = testing::SourceDir() + "/examples/attention/kernels.toml";
  ProcessResult built = testing::RunToEnd(ClientBuild(plan, dir_ + "/out", dir_ + "/state-1"));
  const std::string out = built.stdout_text + built.stderr_text;
  ASSERT_EQ(built.exit_code, 0) << out;
  EXPECT_THAT(out,
              HasSubstr("compiling on the engine at grpc://" + *address_ + " (instance main)"));
  EXPECT_THAT(out, HasSubstr("units     25 (25 compiled, 0 cached, 0 failed)")) << out;
  // Both bots compiled some of the 25 units; their peaks came back with
  // their results (UnitMemoryUsage), so the summary names them.
  EXPECT_THAT(out, HasSubstr("engine/bg-bot-c1: ")) << out;
  EXPECT_THAT(out, HasSubstr("engine/bg-bot-c2: ")) << out;
  EXPECT_THAT(out, HasSubstr("units peaked within their predicted reservation")) << out;
  EXPECT_TRUE(fs::exists(dir_ + "/out/libattention_sm100.so"));
  // A client with a new state dir has nothing of its own: every unit is
  // BuildGrid's ActionCache hit, and nothing runs on a bot.
  ProcessResult again = testing::RunToEnd(ClientBuild(plan, dir_ + "/out-2", dir_ + "/state-2"));
  const std::string again_out = again.stdout_text + again.stderr_text;
  ASSERT_EQ(again.exit_code, 0) << again_out;
  // Counted as cached, as the summary says of results nothing compiled for.
  EXPECT_THAT(again_out, HasSubstr("units     25 (0 compiled, 25 cached, 0 failed)")) << again_out;
  EXPECT_THAT(again_out, HasSubstr("cached (the engine's ActionCache)")) << again_out;
  EXPECT_THAT(again_out, HasSubstr("workers   0")) << again_out;
  EXPECT_TRUE(fs::exists(dir_ + "/out-2/libattention_sm100.so"));
}

// `build -- COMMAND` through the engine: the launcher's nvcc and host C++
// compiles are units on BuildGrid's bot, their objects where the command
// asked.
TEST_F(BuildGridTest, ABuildCommandsCompilesRunOnTheEngineThroughTheLauncher) {
  ASSERT_NE(StartBot("bg-bot-launcher", "4GiB", {"--slots", "2"}), nullptr);
  const std::string project = dir_ + "/command";
  ASSERT_TRUE(WriteFileAtomically(project + "/k.cu",
                                  "__global__ void k(int* x) { *x = 1; }\n"
                                  "void launch(int* x) { k<<<1, 1>>>(x); }\n")
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(project + "/h.cpp", "int host() { return 3; }\n").ok());
  ProcessSpec spec;
  spec.argv = {testing::BinaryPath("distcc-cuda"),
               "build",
               "--state-dir",
               dir_ + "/state",
               "--remote-executor",
               "grpc://" + *address_,
               "--remote-instance",
               kInstance,
               "--",
               "sh",
               "-c",
               "$PYTORCH_NVCC -gencode arch=compute_100,code=sm_100 -c k.cu -o k.o && "
               "$CXX -O2 -c h.cpp -o h.o"};
  spec.environment = {{"CXX", "g++"}};
  spec.working_directory = project;
  spec.timeout = absl::Minutes(3);
  absl::StatusOr<ProcessResult> ran = RunProcess(spec);
  ASSERT_TRUE(ran.ok()) << ran.status();
  const std::string out = ran->stdout_text + ran->stderr_text;
  ASSERT_EQ(ran->exit_code, 0) << out;
  EXPECT_THAT(out, HasSubstr("units     2 on the cluster (2 compiled, 0 cached, 0 failed)")) << out;
  EXPECT_THAT(out, HasSubstr("workers   1 (engine/bg-bot-launcher: 2)")) << out;
  EXPECT_TRUE(fs::exists(project + "/k.o"));
  EXPECT_TRUE(fs::exists(project + "/h.o"));
}

// BuildGrid cannot route by memory: a unit too large for the bot it landed
// on is killed there (exit 137), and the client's retry ladder sends it
// again with a larger `memory` property. Here the small bot goes once it
// killed the unit, so the retry lands on the large one.
TEST_F(BuildGridTest, AUnitTheEngineKilledForMemoryIsSentAgainWithALargerProperty) {
  // The fake nvcc, as nvcc in a toolkit of its own: a bot runs only a
  // Command whose program is nvcc. A unit never seen is predicted at the 2
  // GiB default, which the small bot must hold to run it at all.
  const std::string nvcc = testing::FakeNvccWithRelease(*root_ + "/fake-toolkit", "13.0");
  const std::vector<std::string> fake = {"--nvcc", nvcc, "--memory-mechanism", "auto"};
  testing::BackgroundProcess* small = StartBot("bg-bot-2g", "2304MiB", fake);
  ASSERT_NE(small, nullptr);
  const std::string project = dir_ + "/heavy";
  ASSERT_TRUE(WriteFileAtomically(project + "/heavy.cu",
                                  absl::StrCat("// FAKE_TOUCH_MIB=2560 FAKE_SLEEP_MS=300 ", dir_,
                                               "\nint heavy() { return 1; }\n"))
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(project + "/build/compile_commands.json",
                                  absl::StrCat(R"([{"directory": ")", project,
                                               R"(/build", "file": "../heavy.cu", "command": ")",
                                               nvcc, R"( -c ../heavy.cu -o heavy.o"}])"))
                  .ok());
  std::vector<std::string> argv =
      ClientBuild(project + "/build/compile_commands.json", dir_ + "/out", dir_ + "/state",
                  {"--nvcc", nvcc, "--library", "libheavy.so"});
  auto client = testing::BackgroundProcess::Start(argv, dir_ + "/client.log");
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<std::string> killed =
      (*client)->WaitForLog("killed for memory on engine", absl::Minutes(2));
  ASSERT_TRUE(killed.ok()) << killed.status() << small->Log();
  EXPECT_THAT(*killed, HasSubstr("retrying with"));
  ASSERT_TRUE(small->Stop(SIGTERM, absl::Seconds(10)).ok());
  testing::BackgroundProcess* large = StartBot("bg-bot-4g", "4GiB", fake);
  ASSERT_NE(large, nullptr);
  absl::StatusOr<std::string> built = (*client)->WaitForLog("distcc-cuda: built", absl::Minutes(2));
  ASSERT_TRUE(built.ok()) << built.status() << large->Log();
  absl::StatusOr<int> exited = (*client)->Stop(SIGCONT, absl::Seconds(30));
  ASSERT_TRUE(exited.ok()) << exited.status();
  EXPECT_TRUE(WIFEXITED(*exited) && WEXITSTATUS(*exited) == 0) << (*client)->Log();
  EXPECT_THAT((*client)->Log(), HasSubstr("engine/bg-bot-4g: 1"));
  // The reservation each bot was given, as its memory property: the retry's
  // is larger than the first's.
  auto reserved = [](const std::string& log, const std::string& ended) -> int64_t {
    const size_t at = log.find(ended);
    if (at == std::string::npos) return -1;
    const size_t begin = log.find(", ", at) + 2;
    const size_t end = log.find(" reserved)", begin);
    absl::StatusOr<int64_t> bytes =
        ParseByteSize(absl::StrReplaceAll(log.substr(begin, end - begin), {{" ", ""}}));
    return bytes.ok() ? *bytes : -1;
  };
  const int64_t first =
      reserved(small->Log(), "heavy.cu.o ended: TASK_KILLED_FOR_MEMORY (exit 137");
  const int64_t second = reserved(large->Log(), "heavy.cu.o ended: TASK_COMPLETED (exit 0");
  EXPECT_EQ(first, int64_t{2} << 30) << small->Log();
  EXPECT_GT(second, first) << large->Log();
}

// The memory property is part of the Action, so of BuildGrid's ActionCache
// key. A team's second build whose reservations moved a step (its history
// learnt the units' peaks; a teammate's has none) asks the cache at the
// values near its own and compiles nothing; so does a teammate's build of
// the same tree from another folder, with the torch-like headers it reads
// in a venv elsewhere: the venv's site-packages reach the engine at their
// canonical root.
TEST_F(BuildGridTest, AReservationThatMovedAStepOrAnotherFolderStillHitsTheEnginesActionCache) {
  const std::string nvcc = testing::FakeNvccWithRelease(*root_ + "/fake-toolkit", "13.0");
  ASSERT_NE(StartBot("bg-bot-steps", "4GiB", {"--nvcc", nvcc, "--memory-mechanism", "auto"}),
            nullptr);
  auto write_project = [&](const std::string& project, const std::string& venv, int two_returns) {
    const std::string torch = venv + "/lib/python3.11/site-packages/torch/include";
    ASSERT_TRUE(
        WriteFileAtomically(torch + "/torch_api.h", "inline int Api() { return 7; }\n").ok());
    for (const char* name : {"one", "two"}) {
      ASSERT_TRUE(
          WriteFileAtomically(absl::StrCat(project, "/", name, ".cu"),
                              absl::StrCat("// FAKE_TOUCH_MIB=400 FAKE_SLEEP_MS=200 ", dir_,
                                           "\n#include \"torch_api.h\"\nint ", name, "() { return ",
                                           name == std::string("two") ? two_returns : 1, "; }\n"))
              .ok());
    }
    auto entry = [&](const char* name) {
      return absl::StrCat(R"({"directory": ")", project, R"(/build", "file": "../)", name,
                          R"(.cu", "command": ")", nvcc, " -I", torch, " -c ../", name, ".cu -o ",
                          name, R"(.o"})");
    };
    ASSERT_TRUE(WriteFileAtomically(project + "/build/compile_commands.json",
                                    absl::StrCat("[", entry("one"), ", ", entry("two"), "]"))
                    .ok());
  };
  auto build = [&](const std::string& project, const std::string& name) {
    ProcessResult built = testing::RunToEnd(
        ClientBuild(project + "/build/compile_commands.json", dir_ + "/out-" + name,
                    dir_ + "/state-" + name, {"--nvcc", nvcc, "--library", "libsteps.so"}));
    return built.stdout_text + built.stderr_text;
  };
  write_project(dir_ + "/steps", dir_ + "/alice/.venv", 2);
  const std::string first = build(dir_ + "/steps", "first");
  ASSERT_THAT(first, HasSubstr("units     2 (2 compiled, 0 cached, 0 failed)")) << first;
  // Never seen, each unit was predicted at the 2 GiB default; the history
  // now holds their peaks of about 400 MiB, so a build with it reserves
  // well under 2 GiB: another memory value, another Action. two.cu changed
  // shows the prediction this build makes; one.cu is the engine's result.
  fs::create_directories(dir_ + "/state-learnt/coordinator");
  fs::copy_file(dir_ + "/state-first/coordinator/history.tsv",
                dir_ + "/state-learnt/coordinator/history.tsv");
  write_project(dir_ + "/steps", dir_ + "/alice/.venv", 3);
  const std::string learnt = build(dir_ + "/steps", "learnt");
  EXPECT_THAT(learnt, HasSubstr("units     2 (1 compiled, 1 cached, 0 failed)")) << learnt;
  EXPECT_THAT(learnt, ContainsRegex("one.cu +cached \\(the engine's ActionCache\\)")) << learnt;
  EXPECT_THAT(learnt, ContainsRegex("two.cu +engine/bg-bot-steps .*peak 4[0-9][0-9] MiB "
                                    "\\(predicted 4[0-9][0-9] MiB, history\\)"))
      << learnt;
  // The same tree in another folder, its torch in a conda-like environment
  // elsewhere, with no history and no cache of its own: the workspace and
  // the site-packages are at their canonical roots in every Action.
  write_project(dir_ + "/elsewhere/steps-copy", dir_ + "/opt/envs/x", 2);
  const std::string moved = build(dir_ + "/elsewhere/steps-copy", "moved");
  EXPECT_THAT(moved, HasSubstr("units     2 (0 compiled, 2 cached, 0 failed)")) << moved;
  EXPECT_THAT(moved, HasSubstr("cached (the engine's ActionCache)")) << moved;
  EXPECT_THAT(moved, HasSubstr("/distcc-cuda/site-packages on the workers")) << moved;
}

// An Action whose input file the engine lacks (a client that skipped an
// upload, a CAS that evicted it): the bot says which is MISSING before
// anything runs, as REAPI asks, so that a client uploads it again, instead
// of failing the unit as INTERNAL (which BuildGrid retries five times).
TEST_F(BuildGridTest, AnInputFileTheEngineLacksIsNamedMissingBeforeTheUnitRuns) {
  ASSERT_NE(StartBot("bg-bot-missing", "4GiB"), nullptr);
  v1::CompileUnit unit;
  unit.set_name("lacking");
  for (const char* argument :
       {"-gencode", "arch=compute_100,code=sm_100", "-c", "lacking.cu", "-o", "lacking.o"}) {
    unit.add_arguments(argument);
  }
  unit.add_output_paths("lacking.o");
  const std::string source = absl::StrCat("// ", dir_, "\n__global__ void k() {}\n");
  v1::InputFile* input = unit.add_inputs();
  input->set_path("lacking.cu");
  *input->mutable_digest() = ToProto(DigestOf(source));
  input->set_content(source);
  ActionSettings settings;
  settings.compiler = testing::RealNvccPath();
  absl::StatusOr<UnitAction> action =
      ActionOfUnit(unit, settings, [](const Digest&) { return std::string(); });
  ASSERT_TRUE(action.ok()) << action.status();
  // Everything but the source goes up.
  std::vector<BlobSource> blobs;
  for (const BlobSource& blob : action->blobs) {
    if (blob.digest != DigestOf(source)) blobs.push_back(blob);
  }
  auto channel = OpenEngineChannel({*address_, false}, std::nullopt, {});
  ReapiCasClient cas(channel, kInstance);
  ASSERT_TRUE(cas.UploadMissing(blobs).ok());
  ReapiExecutionClient execution(channel, kInstance);
  CancelToken cancel;
  absl::StatusOr<reapi::ExecuteResponse> response =
      execution.Execute(action->action_digest, cancel);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status().code(), static_cast<int>(absl::StatusCode::kFailedPrecondition))
      << response->DebugString();
  EXPECT_THAT(response->status().message(),
              HasSubstr("the engine lacks 1 input file of the action (lacking.cu)"));
  EXPECT_THAT(response->status().message(), Not(HasSubstr("could not run")));
}

TEST(RemoteExecutorFlagTest, AnEngineThatIsNotThereOrNotAnAddressIsSaidAtOnce) {
  const std::string dir = testing::NewTempDir("remote-executor-");
  const std::string plan = testing::SourceDir() + "/examples/attention/kernels.toml";
  auto build = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {testing::BinaryPath("distcc-cuda"),
                                     "build",
                                     plan,
                                     "-o",
                                     dir + "/out",
                                     "--state-dir",
                                     dir + "/state"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return testing::RunToEnd(argv, absl::Minutes(1));
  };
  ProcessResult not_url = build({"--remote-executor", "http://127.0.0.1:1"});
  EXPECT_EQ(not_url.exit_code, 2);
  EXPECT_THAT(not_url.stderr_text,
              HasSubstr("--remote-executor 'http://127.0.0.1:1' is not grpc://HOST:PORT"));
  const std::string nobody = absl::StrCat("grpc://127.0.0.1:", testing::FreeLoopbackPort());
  const absl::Time start = absl::Now();
  ProcessResult away = build({"--remote-executor", nobody, "--connect-timeout-s", "1"});
  EXPECT_EQ(away.exit_code, 2);
  EXPECT_THAT(away.stderr_text, HasSubstr("cannot reach the engine at " + nobody));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  ProcessResult both = build({"--remote-executor", nobody, "--coordinator", "127.0.0.1:1"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_THAT(both.stderr_text, HasSubstr("name two clusters"));
  // Each header given counts, not only the last.
  ProcessResult header =
      build({"--remote-executor", nobody, "--remote-header", "novalue", "--remote-header", "a=1"});
  EXPECT_EQ(header.exit_code, 2);
  EXPECT_THAT(header.stderr_text, HasSubstr("is not KEY=VALUE"));
  ProcessResult property =
      build({"--remote-executor", nobody, "--remote-memory-property", "memory_kb:KB2"});
  EXPECT_EQ(property.exit_code, 2);
  EXPECT_THAT(property.stderr_text, HasSubstr("the unit after ':' must be"));
}

TEST(BotsApiFlagTest, AnAddressThatIsNotGrpcIsRefusedBeforeAnythingStarts) {
  for (const std::string flag : {"http://127.0.0.1:1", "grpc://", "grpc://host:1/path"}) {
    ProcessResult ran = testing::RunToEnd(
        {testing::BinaryPath("distcc-cuda-worker"), "--bots-api", flag}, absl::Minutes(1));
    EXPECT_EQ(ran.exit_code, 2) << flag;
    EXPECT_THAT(ran.stderr_text, HasSubstr("is not grpc://HOST:PORT or grpcs://HOST:PORT")) << flag;
  }
}

TEST(BotsApiFlagTest, ABotWithoutItsEngineKeepsTryingAndStopsAtOnce) {
  const std::string nvcc = testing::RealNvccPath();
  if (nvcc.empty()) GTEST_SKIP() << "needs the real nvcc at /usr/local/cuda/bin/nvcc";
  const std::string dir = testing::NewTempDir("bot-alone-");
  auto bot = testing::BackgroundProcess::Start(
      {testing::BinaryPath("distcc-cuda-worker"), "--bots-api",
       absl::StrCat("grpc://127.0.0.1:", testing::FreeLoopbackPort()), "--instance", "main",
       "--name", "lonely", "--slots", "1", "--memory-cap", "1GiB", "--nvcc", nvcc, "--work-dir",
       dir + "/w"},
      dir + "/bot.log");
  ASSERT_TRUE(bot.ok()) << bot.status();
  absl::StatusOr<std::string> retrying = (*bot)->WaitForLog(
      "bot lonely cannot open a session on grpc://127.0.0.1:", absl::Seconds(30));
  ASSERT_TRUE(retrying.ok()) << retrying.status();
  const absl::Time asked = absl::Now();
  absl::StatusOr<int> stopped = (*bot)->Stop(SIGTERM, absl::Seconds(10));
  ASSERT_TRUE(stopped.ok()) << stopped.status() << (*bot)->Log();
  EXPECT_TRUE(WIFEXITED(*stopped) && WEXITSTATUS(*stopped) == 0) << (*bot)->Log();
  EXPECT_LT(absl::Now() - asked, absl::Seconds(5));
}

}  // namespace
}  // namespace distcc_cuda
