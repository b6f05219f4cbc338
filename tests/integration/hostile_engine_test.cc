// SPDX-License-Identifier: Apache-2.0
// `distcc-cuda build --remote-executor` against an engine that answers
// badly (issue 49): the client's embedded coordinator and its worker in
// engine mode, through the same code the binary runs, against a scripted
// Remote Execution API engine on loopback (tests/support/scripted_engine.h)
// whose Execute answers what each test makes it say. Whatever the engine
// claims, the build's figures stay within what they can be, nothing it
// names beyond a limit is read, its words reach the terminal made safe, and
// only a kill it says was for memory climbs the retry ladder. And a unit's
// transfer to an engine that stalls ends with the unit's cancel.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/stages/build_command.h"
#include "common/base/byte_size.h"
#include "common/base/cancellation.h"
#include "common/base/files.h"
#include "common/reapi/engine_channel.h"
#include "common/reapi/reapi_cas_client.h"
#include "common/reapi/reapi_digest.h"
#include "coordinator/coordinator.h"
#include "distcc_cuda/v1/worker.pb.h"
#include "tests/support/scripted_engine.h"
#include "tests/support/test_paths.h"
#include "worker/worker.h"

namespace distcc_cuda {
namespace {

using testing::EngineCall;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ScriptedEngine;

constexpr int64_t kGiB = int64_t{1} << 30;

class HostileEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::NewTempDir("hostile-engine-");
    engine_ = ScriptedEngine::Start();
    plan_ = testing::WriteEnginePlan(root_, 1, "libhostile.so");
  }

  // Builds the plan on the engine (an engine of `remote_memory` bytes);
  // the build's status, its words in `output`.
  absl::Status Build(std::string* output, int64_t remote_memory = 8 * kGiB) {
    client::BuildOptions options = OptionsOfBuild();
    client::RemoteEngineSettings remote;
    remote.address = EngineAddress{engine_->address(), false};
    remote.instance = "main";
    remote.jobs = 1;
    remote.memory_bytes = remote_memory;
    options.remote = remote;
    return RunBuild(options, output);
  }

  // The plan's build, on this machine unless told otherwise.
  client::BuildOptions OptionsOfBuild() const {
    client::BuildOptions options;
    options.plan_path = plan_;
    options.output_dir = root_ + "/out";
    options.nvcc_path = testing::FakeNvccPath();
    options.state_dir = root_ + "/state";
    options.reconnect_timeout = absl::ZeroDuration();
    return options;
  }

  static absl::Status RunBuild(const client::BuildOptions& options, std::string* output) {
    std::ostringstream out;
    absl::Status status = client::RunBuild(options, out);
    *output = out.str();
    return status;
  }

  // The unit's line: "  [1/1] kern_1   WORKER   T s  peak P (predicted ...)".
  static std::string UnitLine(const std::string& output) {
    std::smatch line;
    std::regex pattern(R"(\[1/1\] kern_1 [^\n]*)");
    return std::regex_search(output, line, pattern) ? line.str() : "";
  }

  // An ActionCache entry of the unit: exit `exit_code`, its object `object`.
  static reapi::ActionResult ObjectResult(const reapi::Digest& object, int exit_code) {
    reapi::ActionResult result;
    result.set_exit_code(exit_code);
    reapi::OutputFile* file = result.add_output_files();
    file->set_path("kern_1.o");
    *file->mutable_digest() = object;
    return result;
  }

  // Whether anybody read the blob of `digest` from the engine.
  bool Read(const reapi::Digest& digest) {
    for (const std::string& key : engine_->reads()) {
      if (key == absl::StrCat(digest.hash(), "/", digest.size_bytes())) return true;
    }
    return false;
  }

  std::string root_;
  std::string plan_;
  std::unique_ptr<ScriptedEngine> engine_;
};

TEST_F(HostileEngineTest, AnHonestEngineBuildsTheLibrary) {
  std::string output;
  absl::Status built = Build(&output);
  ASSERT_TRUE(built.ok()) << built << output;
  EXPECT_THAT(output, HasSubstr("units     1 (1 compiled, 0 cached, 0 failed)")) << output;
  ASSERT_EQ(engine_->calls().size(), 1u);
  absl::StatusOr<std::string> library = ReadFile(root_ + "/out/libhostile.so");
  ASSERT_TRUE(library.ok()) << library.status();
  EXPECT_THAT(*library, HasSubstr("compiled by the scripted engine"))
      << "the engine's object was linked";
}

// A flag that names a file of the build's toolkit travels at the toolkit's
// canonical root; the Action the engine runs names it in this machine's
// toolkit, where the engine's workers (with the same toolchain) have it.
TEST_F(HostileEngineTest, AToolkitFileAFlagNamesReachesTheEngineInThisMachinesToolkit) {
  const std::string nvcc = testing::FakeNvccWithRelease(root_ + "/toolkits", "13.0");
  const std::string toolkit = root_ + "/toolkits/cuda-13.0";
  ASSERT_TRUE(WriteFileAtomically(toolkit + "/include/marker.h", "#pragma once\n").ok());
  absl::StatusOr<std::string> plan = ReadFile(plan_);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string flags = R"(flags = ["-O3"])";
  ASSERT_NE(plan->find(flags), std::string::npos);
  plan->replace(
      plan->find(flags), flags.size(),
      absl::StrCat(R"(flags = ["-O3", "-include", ")", toolkit, R"(/include/marker.h"])"));
  ASSERT_TRUE(WriteFileAtomically(plan_, *plan).ok());
  client::BuildOptions options = OptionsOfBuild();
  options.nvcc_path = nvcc;
  client::RemoteEngineSettings remote;
  remote.address = EngineAddress{engine_->address(), false};
  remote.instance = "main";
  remote.jobs = 1;
  remote.memory_bytes = 8 * kGiB;
  options.remote = remote;
  std::string output;
  absl::Status built = RunBuild(options, &output);
  ASSERT_TRUE(built.ok()) << built << output;
  ASSERT_EQ(engine_->calls().size(), 1u);
  const reapi::Command command = engine_->calls()[0].command;
  const std::vector<std::string> arguments(command.arguments().begin(), command.arguments().end());
  EXPECT_THAT(arguments, ::testing::Contains(toolkit + "/include/marker.h"));
  EXPECT_THAT(absl::StrJoin(arguments, " "), Not(HasSubstr("/distcc-cuda/toolkit")));
}

TEST_F(HostileEngineTest, APeakAboveTheEnginesMemoryCountsAsItsLargestWorkersAtMost) {
  engine_->Answer([](const EngineCall& call, ScriptedEngine& engine) {
    reapi::ExecuteResponse response = ScriptedEngine::CompiledAnswer(call, engine);
    v1::UnitMemoryUsage memory;
    memory.set_peak_bytes(int64_t{1} << 40);  // 1 TiB, on an engine of 2 GiB
    response.mutable_result()->mutable_execution_metadata()->add_auxiliary_metadata()->PackFrom(
        memory);
    response.mutable_result()->mutable_execution_metadata()->set_worker("bot-1");
    return response;
  });
  std::string output;
  absl::Status built = Build(&output, 2 * kGiB);
  ASSERT_TRUE(built.ok()) << built << output;
  const std::string line = UnitLine(output);
  EXPECT_THAT(line, HasSubstr("engine/bot-1")) << output;
  EXPECT_THAT(line, HasSubstr("peak 2.0 GiB")) << output;
  EXPECT_THAT(output, Not(HasSubstr("TiB"))) << output;
}

TEST_F(HostileEngineTest, OutputTextAboveTheLimitIsNotReadBack) {
  std::optional<reapi::Digest> huge, small;
  engine_->Answer([&](const EngineCall&, ScriptedEngine& engine) {
    huge = engine.Put(std::string(3 << 20, 'e'));  // above the 1 MiB read back
    small = engine.Put("k.cu(1): error: the engine's own words\n");
    reapi::ExecuteResponse response;
    response.mutable_result()->set_exit_code(2);
    *response.mutable_result()->mutable_stderr_digest() = *huge;
    *response.mutable_result()->mutable_stdout_digest() = *small;
    return response;
  });
  std::string output;
  absl::Status built = Build(&output);
  EXPECT_FALSE(built.ok()) << output;
  EXPECT_THAT(output, HasSubstr("nvcc exit code 2")) << output;
  EXPECT_THAT(output, HasSubstr("the engine's own words")) << output;
  EXPECT_THAT(output, HasSubstr("[distcc-cuda: 3 MiB of output on grpc://" + engine_->address() +
                                ", above the 1 MiB read back]"))
      << output;
  ASSERT_TRUE(huge.has_value() && small.has_value());
  EXPECT_TRUE(Read(*small));
  EXPECT_FALSE(Read(*huge)) << "3 MiB of stderr read from the engine";
  // A compile error is the user's: not run again.
  EXPECT_EQ(engine_->calls().size(), 1u);
}

TEST_F(HostileEngineTest, AnOutputFileOfMoreThan4GiBIsRefusedUnread) {
  reapi::Digest giant;
  giant.set_hash(std::string(64, 'a'));
  giant.set_size_bytes(5 * kGiB);
  engine_->Answer([&](const EngineCall& call, ScriptedEngine&) {
    reapi::ExecuteResponse response;
    response.mutable_result()->set_exit_code(0);
    reapi::OutputFile* file = response.mutable_result()->add_output_files();
    file->set_path(call.command.output_files(0));
    *file->mutable_digest() = giant;
    return response;
  });
  std::string output;
  absl::Status built = Build(&output);
  EXPECT_FALSE(built.ok()) << output;
  // The unit's error line says why, not only an exit code.
  EXPECT_THAT(output,
              HasSubstr("failed on worker engine (the engine at grpc://" + engine_->address() +
                        " returned kern_1.o of 5.0 GiB, more than a "
                        "compile's output may be (4.0 GiB))"))
      << output;
  EXPECT_FALSE(Read(giant));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/out/libhostile.so"));
}

// Before a unit is sent, the engine's ActionCache is asked at its memory
// value and at those near it. An entry is checked as an Execute's result
// is: one whose output is above 4 GiB, one whose output the engine does not
// hold, one that failed, are not the unit's result, and the unit runs.
TEST_F(HostileEngineTest, ActionCacheEntriesAreCheckedAsResultsAndABadOneIsNotTaken) {
  reapi::Digest giant;
  giant.set_hash(std::string(64, 'a'));
  giant.set_size_bytes(5 * kGiB);
  reapi::Digest absent;
  absent.set_hash(std::string(64, 'b'));
  absent.set_size_bytes(1000);
  std::atomic<int> asked{0};
  engine_->AnswerLookups([&](const reapi::Digest&) -> std::optional<reapi::ActionResult> {
    const int n = asked++;
    return ObjectResult(n % 3 == 0 ? giant : absent, n % 3 == 2 ? 1 : 0);
  });
  std::string output;
  absl::Status built = Build(&output);
  ASSERT_TRUE(built.ok()) << built << output;
  // Asked at several values, at most 12, then executed once.
  EXPECT_GE(engine_->lookups().size(), 3u) << output;
  EXPECT_LE(engine_->lookups().size(), 12u) << output;
  EXPECT_EQ(engine_->calls().size(), 1u) << output;
  EXPECT_FALSE(Read(giant));
  EXPECT_THAT(UnitLine(output), Not(HasSubstr("cached"))) << output;
  EXPECT_TRUE(std::filesystem::exists(root_ + "/out/libhostile.so"));
}

// An entry at another memory value than the unit's own, whose output the
// engine holds, is the unit's result: nothing is executed.
TEST_F(HostileEngineTest, AnActionCacheEntryAtAnotherMemoryValueIsTheUnitsResult) {
  const reapi::Digest object = engine_->Put(testing::EngineObjectBytes());
  std::atomic<int> asked{0};
  engine_->AnswerLookups([&](const reapi::Digest&) -> std::optional<reapi::ActionResult> {
    if (asked++ == 0) return std::nullopt;  // the unit's own value
    return ObjectResult(object, 0);
  });
  std::string output;
  absl::Status built = Build(&output);
  ASSERT_TRUE(built.ok()) << built << output;
  EXPECT_EQ(engine_->lookups().size(), 2u) << output;
  EXPECT_TRUE(engine_->calls().empty()) << output;
  EXPECT_THAT(UnitLine(output), HasSubstr("cached (the engine's ActionCache)")) << output;
  EXPECT_TRUE(std::filesystem::exists(root_ + "/out/libhostile.so"));
}

TEST_F(HostileEngineTest, AQuotaRefusalIsNotAMemoryKillAndItsPropertyNeverGrows) {
  engine_->Answer([](const EngineCall&, ScriptedEngine&) {
    reapi::ExecuteResponse response;
    response.mutable_status()->set_code(grpc::StatusCode::RESOURCE_EXHAUSTED);
    response.mutable_status()->set_message("quota of 100 actions a minute exceeded");
    return response;
  });
  std::string output;
  absl::Status built = Build(&output);
  EXPECT_FALSE(built.ok()) << output;
  EXPECT_THAT(output, HasSubstr("RESOURCE_EXHAUSTED: quota of 100 actions a minute exceeded"))
      << output;
  EXPECT_THAT(output, Not(HasSubstr("killed for memory"))) << output;
  // Lost, and tried again as any loss is (3 attempts), each time asking for
  // the same memory.
  std::vector<EngineCall> calls = engine_->calls();
  ASSERT_EQ(calls.size(), 3u) << output;
  for (const EngineCall& call : calls) {
    EXPECT_EQ(call.platform.at("memory"), calls[0].platform.at("memory"));
  }
}

TEST_F(HostileEngineTest, AMemoryKillTheEngineNamesRunsAgainWithALargerProperty) {
  engine_->Answer([](const EngineCall& call, ScriptedEngine& engine) {
    if (engine.calls().size() > 1) return ScriptedEngine::CompiledAnswer(call, engine);
    reapi::ExecuteResponse response;
    response.mutable_status()->set_code(grpc::StatusCode::RESOURCE_EXHAUSTED);
    response.mutable_status()->set_message("the action ran out of memory");
    return response;
  });
  std::string output;
  absl::Status built = Build(&output);
  ASSERT_TRUE(built.ok()) << built << output;
  std::vector<EngineCall> calls = engine_->calls();
  ASSERT_EQ(calls.size(), 2u) << output;
  int64_t first = 0, second = 0;
  ASSERT_TRUE(absl::SimpleAtoi(calls[0].platform.at("memory"), &first));
  ASSERT_TRUE(absl::SimpleAtoi(calls[1].platform.at("memory"), &second));
  EXPECT_GT(second, first) << output;
  EXPECT_LE(second, 8 * kGiB);
}

TEST_F(HostileEngineTest, AWorkerNameWithControlCharactersOrTooLongIsMadeSafe) {
  const std::string evil = "\x1b]0;owned\x07\x1b[2J" + std::string(100, 'b') + "\nforged line";
  engine_->Answer([&](const EngineCall& call, ScriptedEngine& engine) {
    reapi::ExecuteResponse response = ScriptedEngine::CompiledAnswer(call, engine);
    response.mutable_result()->mutable_execution_metadata()->set_worker(evil);
    return response;
  });
  std::string output;
  absl::Status built = Build(&output);
  ASSERT_TRUE(built.ok()) << built << output;
  EXPECT_EQ(output.find('\x1b'), std::string::npos) << output;
  EXPECT_EQ(output.find('\x07'), std::string::npos) << output;
  EXPECT_THAT(output, Not(HasSubstr("\nforged line"))) << output;
  // "engine/" and at most 64 characters of the engine's words.
  std::smatch shown;
  const std::string line = UnitLine(output);
  ASSERT_TRUE(std::regex_search(line, shown, std::regex(R"(engine/(\S+))"))) << output;
  EXPECT_LE(shown[1].length(), 64) << line;
  EXPECT_THAT(shown[1].str(), HasSubstr("bbbb")) << line;
}

TEST_F(HostileEngineTest, TimestampsOutOfRangeAreNotTakenAsTheCompilesTime) {
  struct Times {
    int64_t start_seconds, end_seconds;
  };
  for (const Times times : {Times{-100, 1'000'000'000'000}, Times{2'000, 1'000},
                            Times{1'000, 1'000 + 30 * 24 * 3600}}) {
    SetUp();
    engine_->Answer([times](const EngineCall& call, ScriptedEngine& engine) {
      reapi::ExecuteResponse response = ScriptedEngine::CompiledAnswer(call, engine);
      auto* metadata = response.mutable_result()->mutable_execution_metadata();
      metadata->mutable_execution_start_timestamp()->set_seconds(times.start_seconds);
      metadata->mutable_execution_completed_timestamp()->set_seconds(times.end_seconds);
      return response;
    });
    std::string output;
    absl::Status built = Build(&output);
    ASSERT_TRUE(built.ok()) << built << output;
    // The time the worker saw the engine take, seconds at most here.
    std::smatch seconds;
    const std::string line = UnitLine(output);
    ASSERT_TRUE(std::regex_search(line, seconds, std::regex(R"(\s(-?[0-9.]+) s\s+peak)")))
        << output;
    const double taken = std::stod(seconds[1]);
    EXPECT_GE(taken, 0) << line;
    EXPECT_LT(taken, 60) << line;
  }
}

// A unit whose upload to the engine hangs (a stalled link) and whose build
// is cancelled: the worker ends that task's transfer with its cancel (which
// reaches it with the next heartbeat) instead of holding the slot until the
// transfer's 10-minute deadline, and goes on to the next build.
TEST_F(HostileEngineTest, ACancelledUnitsTransferToTheEngineEndsWithIt) {
  // A coordinator and an engine-mode worker that outlive the build.
  coordinator::CoordinatorOptions coordinator_options;
  coordinator_options.state_dir = root_ + "/coordinator";
  auto coordinator = coordinator::Coordinator::Start(coordinator_options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  worker::WorkerOptions worker_options;
  worker_options.coordinator_address = (*coordinator)->address();
  worker_options.name = "engine";
  worker_options.slots = 1;
  worker_options.memory_cap_bytes = 8 * kGiB;
  worker_options.nvcc_path = testing::FakeNvccPath();
  worker_options.work_dir = root_ + "/worker";
  worker_options.remote_executor = EngineAddress{engine_->address(), false};
  worker_options.instance = "main";
  auto worker = worker::Worker::Start(worker_options);
  ASSERT_TRUE(worker.ok()) << worker.status();

  engine_->HoldUploadsOf("Kern<float, 1>");
  client::BuildOptions options = OptionsOfBuild();
  options.coordinator_address = (*coordinator)->address();
  CancelToken cancel;
  options.cancel = &cancel;
  std::string output;
  std::future<absl::Status> build =
      std::async(std::launch::async, [&options, &output] { return RunBuild(options, &output); });
  ASSERT_TRUE(engine_->AwaitHeldUpload(absl::Seconds(30))) << "the unit's upload never began";
  const absl::Time cancelled_at = absl::Now();
  cancel.Cancel("Ctrl-C");
  EXPECT_TRUE(engine_->AwaitHeldUploadsCancelled(absl::Seconds(15)))
      << "the cancelled unit's upload went on";
  std::cout << "the held upload ended " << absl::FormatDuration(absl::Now() - cancelled_at)
            << " after the cancel\n";
  absl::Status status = build.get();
  EXPECT_TRUE(absl::IsCancelled(status)) << status << output;

  // The worker is free: the same build compiles on it.
  engine_->HoldUploadsOf("");
  options.cancel = nullptr;
  absl::Status again = RunBuild(options, &output);
  EXPECT_TRUE(again.ok()) << again << output;
}

// Two tasks' uploads held by the engine at once: one task's cancel ends its
// own upload (CANCELLED), the other's goes on until its own cancel.
TEST_F(HostileEngineTest, ATasksCancelEndsOnlyItsOwnTransfers) {
  engine_->HoldUploadsOf("held by the engine");
  auto channel = OpenEngineChannel({engine_->address(), false}, std::nullopt, {});
  ReapiCasClient store(channel, "main");
  CancelToken first, second;
  auto upload = [&store](const CancelToken* task, const std::string& text) {
    BlobClient::TaskScope transfers(task);
    const std::string bytes = absl::StrCat(text, " held by the engine");
    return store.UploadMissing({BlobSource{DigestOf(bytes), "", bytes}}).status();
  };
  std::future<absl::Status> one =
      std::async(std::launch::async, [&] { return upload(&first, "one"); });
  std::future<absl::Status> two =
      std::async(std::launch::async, [&] { return upload(&second, "two"); });
  ASSERT_TRUE(engine_->AwaitHeldUploadsRunning(2, absl::Seconds(10)));
  first.Cancel("its build was cancelled");
  store.CancelTask(&first);
  EXPECT_TRUE(absl::IsCancelled(one.get()));
  EXPECT_TRUE(engine_->AwaitHeldUploadsRunning(1, absl::Seconds(10)));
  EXPECT_EQ(two.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout)
      << "the other task's upload ended too";
  second.Cancel("its build was cancelled");
  store.CancelTask(&second);
  EXPECT_TRUE(absl::IsCancelled(two.get()));
  EXPECT_TRUE(engine_->AwaitHeldUploadsCancelled(absl::Seconds(10)));
  // A transfer begun in a task already cancelled ends at once.
  const absl::Time start = absl::Now();
  EXPECT_TRUE(absl::IsCancelled(upload(&first, "three")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace distcc_cuda
