// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "coordinator/scheduler/ids.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::coordinator {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

v1::ToolchainFingerprint Toolchain(const std::string& release) {
  v1::ToolchainFingerprint toolchain;
  toolchain.set_nvcc_release(release);
  toolchain.set_digest("digest-" + release);
  return toolchain;
}

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// `count` units predicted at `peak` each; unit i takes walls[i] if given.
std::vector<PlannedUnit> Units(int count, int64_t peak = 100 * kMiB,
                               std::vector<int> wall_seconds = {}) {
  std::vector<PlannedUnit> units;
  for (int i = 0; i < count; ++i) {
    PlannedUnit unit;
    unit.unit.set_name(absl::StrCat("unit", i));
    unit.action_digest = absl::StrCat("action", i);
    unit.identity = absl::StrCat("identity", i);
    unit.family = "family";
    unit.demand.peak_bytes = peak;
    unit.demand.wall =
        absl::Seconds(i < static_cast<int>(wall_seconds.size()) ? wall_seconds[i] : 1);
    unit.demand.source = "default";
    units.push_back(unit);
  }
  return units;
}

// The two halves a unit "set_1of1" of four instantiations splits into.
std::vector<PlannedUnit> HalvesOfSet() {
  std::vector<PlannedUnit> halves = Units(2, 300 * kMiB);
  for (int i = 0; i < 2; ++i) {
    halves[i].unit.set_name(absl::StrCat("set_1of1_", i + 1, "of2"));
    halves[i].action_digest = absl::StrCat("half", i);
    halves[i].instantiations = 2;
  }
  return halves;
}

v1::TaskResult KilledForMemory(int64_t peak) {
  v1::TaskResult result;
  result.set_outcome(v1::TASK_KILLED_FOR_MEMORY);
  result.set_exit_code(-1);
  result.set_peak_memory_bytes(peak);
  return result;
}

v1::TaskResult Completed(int exit_code) {
  v1::TaskResult result;
  result.set_outcome(v1::TASK_COMPLETED);
  result.set_exit_code(exit_code);
  return result;
}

class SchedulerTest : public ::testing::Test {
 protected:
  // The tests' units are predicted as given, whatever their basis: no
  // careful start unless `careful_start_units` (CarefulStartTest).
  explicit SchedulerTest(int careful_start_units = 0)
      : history_(*PeakHistory::Open("", {})),
        scheduler_(
            [careful_start_units] {
              SchedulerOptions options{absl::Seconds(1), absl::Seconds(5), absl::Minutes(30), 3};
              options.careful_start_units = careful_start_units;
              return options;
            }(),
            [this](const std::string& action, const v1::TaskResult&) {
              recorded_.push_back(action);
            },
            history_.get()) {}

  std::string AddWorker(const std::string& name, const std::string& release = "13.0", int slots = 1,
                        int64_t cap = 8 * kGiB) {
    v1::RegisterWorkerRequest request;
    request.set_name(name);
    *request.mutable_toolchain() = Toolchain(release);
    request.set_memory_cap_bytes(cap);
    request.set_slots(slots);
    absl::StatusOr<std::string> id = scheduler_.RegisterWorker(request, kStart);
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  }

  absl::StatusOr<std::string> Submit(int units, std::map<int, v1::TaskResult> cached = {},
                                     const std::string& release = "13.0") {
    return SubmitUnits(Units(units), std::move(cached), release);
  }

  absl::StatusOr<std::string> SubmitUnits(std::vector<PlannedUnit> units,
                                          std::map<int, v1::TaskResult> cached = {},
                                          const std::string& release = "13.0") {
    return scheduler_.SubmitBuild(
        "test", Toolchain(release), std::move(units), std::move(cached),
        [this](const v1::BuildEvent& event) { events_.push_back(event); }, kStart);
  }

  // Asks for a lease that must be answered at once.
  // Leases the next task on `worker` and reports it killed for memory at
  // each of `peaks` in turn: a unit climbing the retry ladder.
  void KillEachLease(const std::string& worker, std::initializer_list<int64_t> peaks) {
    for (int64_t peak : peaks) {
      std::optional<v1::Task> task = LeaseNow(worker);
      ASSERT_TRUE(task);
      ASSERT_TRUE(Report(worker, *task, KilledForMemory(peak)).ok());
    }
  }

  std::optional<v1::Task> LeaseNow(const std::string& worker, absl::Time now = kStart) {
    std::optional<v1::Task> got;
    bool answered = false;
    EXPECT_TRUE(scheduler_
                    .RequestLease(
                        worker, now,
                        [&](std::optional<v1::Task> task) {
                          answered = true;
                          got = std::move(task);
                        },
                        now)
                    .ok());
    EXPECT_TRUE(answered);
    return got;
  }

  absl::Status Report(const std::string& worker, const v1::Task& task, const v1::TaskResult& result,
                      absl::Time now = kStart) {
    v1::ReportResultRequest request;
    request.set_worker_id(worker);
    request.set_task_id(task.task_id());
    *request.mutable_result() = result;
    // Workers stamp their toolchain; the tests' workers have 13.0 unless the
    // result says otherwise.
    if (result.toolchain_digest().empty()) {
      request.mutable_result()->set_toolchain_digest(Toolchain("13.0").digest());
    }
    return scheduler_.ReportResult(request, now);
  }

  std::string LastRequeueReason() const {
    for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
      if (it->has_unit_requeued()) return it->unit_requeued().reason();
    }
    return "";
  }

  int Count(v1::BuildEvent::EventCase kind) const {
    int n = 0;
    for (const auto& event : events_) n += event.event_case() == kind;
    return n;
  }
  const v1::BuildEvent::Finished* Finished() const {
    for (const auto& event : events_) {
      if (event.has_finished()) return &event.finished();
    }
    return nullptr;
  }

  std::unique_ptr<PeakHistory> history_;
  BuildScheduler scheduler_;
  std::vector<v1::BuildEvent> events_;
  std::vector<std::string> recorded_;
};

TEST_F(SchedulerTest, LeasesRunsAndFinishesABuild) {
  std::string worker = AddWorker("a", "13.0", 2);
  ASSERT_TRUE(Submit(2).ok());
  std::optional<v1::Task> first = LeaseNow(worker);
  std::optional<v1::Task> second = LeaseNow(worker);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->unit().name(), "unit0");
  EXPECT_EQ(second->unit().name(), "unit1");
  EXPECT_FALSE(LeaseNow(worker)) << "both slots are busy";
  ASSERT_TRUE(Report(worker, *first, Completed(0)).ok());
  ASSERT_TRUE(Report(worker, *second, Completed(0)).ok());
  ASSERT_NE(Finished(), nullptr);
  EXPECT_TRUE(Finished()->success());
  EXPECT_EQ(Count(v1::BuildEvent::kUnitStarted), 2);
  EXPECT_THAT(recorded_, ::testing::ElementsAre("action0", "action1"));
}

TEST_F(SchedulerTest, StatusShowsBuildsRunningAndEndedAndKeepsTheirUnitsSpans) {
  std::string worker = AddWorker("a", "13.0", 2);
  v1::TaskResult hit = Completed(0);
  absl::StatusOr<std::string> first = Submit(3, {{2, hit}});
  ASSERT_TRUE(first.ok()) << first.status();
  std::optional<v1::Task> one = LeaseNow(worker);
  std::optional<v1::Task> two = LeaseNow(worker);
  ASSERT_TRUE(one && two);
  v1::TaskResult compiled = Completed(0);
  compiled.set_peak_memory_bytes(300 * kMiB);
  ASSERT_TRUE(Report(worker, *one, compiled).ok());

  v1::ClusterStatus running = scheduler_.Status(kStart);
  ASSERT_EQ(running.builds_size(), 1);
  const v1::BuildRecord& now = running.builds(0);
  EXPECT_EQ(now.build_id(), *first);
  EXPECT_EQ(now.name(), "test");
  EXPECT_EQ(now.outcome(), "running");
  EXPECT_EQ(now.units_total(), 3);
  EXPECT_EQ(now.units_done(), 2);
  EXPECT_EQ(now.units_compiled(), 1);
  EXPECT_EQ(now.units_cached(), 1);
  EXPECT_EQ(now.spans_size(), 0) << "status carries no spans";
  std::optional<v1::BuildRecord> so_far = scheduler_.BuildRecordOf(*first);
  ASSERT_TRUE(so_far);
  EXPECT_EQ(so_far->spans_size(), 2);

  ASSERT_TRUE(Report(worker, *two, Completed(2)).ok());
  // A second build, cancelled while its unit runs.
  absl::StatusOr<std::string> second = Submit(1);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(LeaseNow(worker));
  scheduler_.CancelBuild(*second);

  v1::ClusterStatus after = scheduler_.Status(kStart);
  ASSERT_EQ(after.builds_size(), 2);
  EXPECT_EQ(after.builds(0).build_id(), *second) << "newest first";
  EXPECT_EQ(after.builds(0).outcome(), "cancelled");
  EXPECT_EQ(after.builds(1).outcome(), "failed");
  EXPECT_EQ(after.builds(1).units_failed(), 1);
  EXPECT_GT(after.builds(1).finished_unix_micros(), 0);
  std::optional<v1::BuildRecord> ended = scheduler_.BuildRecordOf(*first);
  ASSERT_TRUE(ended);
  ASSERT_EQ(ended->spans_size(), 3);
  std::map<std::string, v1::UnitSpan> spans;
  for (const v1::UnitSpan& span : ended->spans()) spans[span.unit_name()] = span;
  EXPECT_TRUE(spans["unit2"].cached());
  EXPECT_EQ(spans["unit2"].worker_name(), "");
  EXPECT_EQ(spans["unit2"].leased_unix_micros(), 0);
  EXPECT_EQ(spans["unit0"].worker_name(), "a");
  EXPECT_EQ(spans["unit0"].peak_memory_bytes(), 300 * kMiB);
  EXPECT_EQ(spans["unit0"].predicted_peak_bytes(), 100 * kMiB);
  EXPECT_GT(spans["unit0"].leased_unix_micros(), 0);
  EXPECT_LE(spans["unit0"].leased_unix_micros(), spans["unit0"].finished_unix_micros());
  EXPECT_TRUE(spans["unit1"].failed());
  EXPECT_FALSE(scheduler_.BuildRecordOf("b-unknown"));
}

TEST_F(SchedulerTest, TheMemoryAWorkerSaysItUsesIsKeptWithinItsCap) {
  std::string worker = AddWorker("a", "13.0", 1, 8 * kGiB);
  for (const auto& [said, kept] : std::vector<std::pair<int64_t, int64_t>>{
           {3 * kGiB, 3 * kGiB}, {-5, 0}, {int64_t{1} << 62, 8 * kGiB}}) {
    v1::HeartbeatRequest beat;
    beat.set_worker_id(worker);
    beat.set_memory_used_bytes(said);
    ASSERT_TRUE(scheduler_.Heartbeat(beat, kStart).ok());
    v1::ClusterStatus status = scheduler_.Status(kStart);
    ASSERT_EQ(status.workers_size(), 1);
    EXPECT_EQ(status.workers(0).memory_used_bytes(), kept) << said;
  }
}

TEST_F(SchedulerTest, CompileErrorFailsTheUnitWithoutRetryAndIsNotCached) {
  std::string worker = AddWorker("a");
  ASSERT_TRUE(Submit(1).ok());
  std::optional<v1::Task> task = LeaseNow(worker);
  ASSERT_TRUE(task);
  ASSERT_TRUE(Report(worker, *task, Completed(2)).ok());
  ASSERT_NE(Finished(), nullptr);
  EXPECT_FALSE(Finished()->success());
  EXPECT_EQ(Finished()->units_failed(), 1);
  EXPECT_TRUE(recorded_.empty());
  EXPECT_EQ(Count(v1::BuildEvent::kUnitRequeued), 0);
}

TEST_F(SchedulerTest, NoWorkerWithTheToolchainFailsAtOnceNamingBothSides) {
  AddWorker("old-node", "12.8");
  absl::StatusOr<std::string> build = Submit(1, {}, "13.0");
  EXPECT_EQ(build.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(build.status().message(), HasSubstr("nvcc 13.0"));
  EXPECT_THAT(build.status().message(), HasSubstr("old-node: nvcc 12.8"));
}

TEST_F(SchedulerTest, NoWorkerAtAllFailsAtOnce) {
  absl::StatusOr<std::string> build = Submit(1);
  EXPECT_EQ(build.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(build.status().message(), HasSubstr("no worker is connected"));
}

TEST_F(SchedulerTest, OnlyMatchingWorkersGetUnits) {
  std::string other = AddWorker("other", "12.8");
  std::string match = AddWorker("match", "13.0");
  ASSERT_TRUE(Submit(1).ok());
  EXPECT_FALSE(LeaseNow(other));
  EXPECT_TRUE(LeaseNow(match));
}

// A worker with a further served toolkit (--served-toolkit 13.0,12.8) takes
// units of builds of either toolchain, each task naming its build's; a
// worker with only one takes only that one's.
TEST_F(SchedulerTest, AWorkerWithAFurtherToolkitTakesUnitsOfBothToolchains) {
  v1::RegisterWorkerRequest both;
  both.set_name("both");
  *both.mutable_toolchain() = Toolchain("13.0");
  *both.add_more_toolchains() = Toolchain("12.8");
  both.set_memory_cap_bytes(8 * kGiB);
  both.set_slots(2);
  absl::StatusOr<std::string> worker = scheduler_.RegisterWorker(both, kStart);
  ASSERT_TRUE(worker.ok()) << worker.status();
  std::string only = AddWorker("only-13.0", "13.0", 1);
  // A 12.8 build is served: the worker with both has it.
  absl::StatusOr<std::string> old = Submit(1, {}, "12.8");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_FALSE(LeaseNow(only)) << "a 13.0-only worker took a 12.8 unit";
  std::optional<v1::Task> old_task = LeaseNow(*worker);
  ASSERT_TRUE(old_task);
  EXPECT_EQ(old_task->toolchain_digest(), "digest-12.8");
  ASSERT_TRUE(Submit(1, {}, "13.0").ok());
  std::optional<v1::Task> new_task = LeaseNow(*worker);
  ASSERT_TRUE(new_task);
  EXPECT_EQ(new_task->toolchain_digest(), "digest-13.0");
  v1::TaskResult compiled = Completed(0);
  compiled.set_toolchain_digest("digest-12.8");
  ASSERT_TRUE(Report(*worker, *old_task, compiled).ok());
  ASSERT_TRUE(Report(*worker, *new_task, Completed(0)).ok());
  EXPECT_EQ(recorded_.size(), 2u);
  // Both listed to engines and in status; capacity counts the worker for both.
  EXPECT_EQ(scheduler_.Toolchains().size(), 2u);
  EXPECT_EQ(scheduler_.Capacity("digest-12.8").total_slots, 2);
  EXPECT_EQ(scheduler_.Capacity("digest-13.0").total_slots, 3);
  v1::ClusterStatus status = scheduler_.Status(kStart);
  int listed = 0;
  for (const v1::WorkerStatus& w : status.workers()) listed += w.more_toolchains_size();
  EXPECT_EQ(listed, 1);
}

// A worker's further toolchains are checked as its own: at most eight, each
// with a digest, printable.
TEST_F(SchedulerTest, FurtherToolchainsAreCheckedAsTheWorkersOwn) {
  auto request = [] {
    v1::RegisterWorkerRequest request;
    request.set_name("w");
    *request.mutable_toolchain() = Toolchain("13.0");
    request.set_memory_cap_bytes(kGiB);
    request.set_slots(1);
    return request;
  };
  v1::RegisterWorkerRequest too_many = request();
  for (int i = 0; i < 9; ++i) *too_many.add_more_toolchains() = Toolchain(absl::StrCat("12.", i));
  EXPECT_THAT(scheduler_.RegisterWorker(too_many, kStart).status().message(),
              HasSubstr("at most 8"));
  v1::RegisterWorkerRequest no_digest = request();
  no_digest.add_more_toolchains()->set_nvcc_release("12.8");
  EXPECT_EQ(scheduler_.RegisterWorker(no_digest, kStart).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::RegisterWorkerRequest hostile = request();
  *hostile.add_more_toolchains() = Toolchain("12.8");
  hostile.mutable_more_toolchains(0)->set_host_compiler("g++ \x1b[2J");
  EXPECT_EQ(scheduler_.RegisterWorker(hostile, kStart).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::RegisterWorkerRequest fine = request();
  *fine.add_more_toolchains() = Toolchain("12.8");
  EXPECT_TRUE(scheduler_.RegisterWorker(fine, kStart).ok());
}

TEST_F(SchedulerTest, ResultOfAnotherToolchainIsNeitherCachedNorPassedOn) {
  // A worker whose nvcc was swapped under it after it registered.
  std::string swapped = AddWorker("swapped", "13.0", 1);
  ASSERT_TRUE(Submit(1).ok());
  std::optional<v1::Task> task = LeaseNow(swapped);
  ASSERT_TRUE(task);
  v1::TaskResult result = Completed(0);
  result.set_toolchain_digest(Toolchain("12.8").digest());
  ASSERT_TRUE(Report(swapped, *task, result).ok());
  EXPECT_TRUE(recorded_.empty());
  EXPECT_THAT(LastRequeueReason(), HasSubstr("compiled with toolchain [digest-12.8"));
  for (const v1::BuildEvent& event : events_) EXPECT_FALSE(event.has_unit_finished());
  // The worker is dropped (it registers again with its new toolchain); the
  // unit runs again on a worker of the build's and its result is taken.
  EXPECT_EQ(scheduler_.Status(kStart).workers_size(), 0);
  std::string right = AddWorker("right", "13.0", 1);
  task = LeaseNow(right);
  ASSERT_TRUE(task);
  ASSERT_TRUE(Report(right, *task, Completed(0)).ok());
  EXPECT_THAT(recorded_, ::testing::ElementsAre("action0"));
}

TEST_F(SchedulerTest, LastWorkerOfTheToolchainLeavingFailsTheBuildAfterAGracePeriod) {
  std::string other = AddWorker("other", "12.8");
  std::string last = AddWorker("last", "13.0");
  ASSERT_TRUE(Submit(2).ok());
  ASSERT_TRUE(LeaseNow(last));
  // Heartbeats only from the 12.8 worker: the 13.0 one is dropped.
  v1::HeartbeatRequest beat;
  beat.set_worker_id(other);
  for (int s : {4, 8, 12, 16}) {
    ASSERT_TRUE(scheduler_.Heartbeat(beat, kStart + absl::Seconds(s)).ok());
  }
  scheduler_.Tick(kStart + absl::Seconds(6));
  EXPECT_EQ(Finished(), nullptr) << "a worker may come back within twice the heartbeat timeout";
  scheduler_.Tick(kStart + absl::Seconds(17));
  ASSERT_FALSE(events_.empty());
  ASSERT_TRUE(events_.back().has_finished());
  EXPECT_FALSE(events_.back().finished().success());
  EXPECT_EQ(events_.back().finished().units_failed(), 2);
  int failed = 0;
  for (const v1::BuildEvent& event : events_) {
    if (!event.has_unit_finished()) continue;
    ++failed;
    EXPECT_THAT(event.unit_finished().result().error_message(),
                HasSubstr("no connected worker has the build's toolchain any more (the last, "
                          "last, sent no heartbeat for 5s, and none came back within 10s)"));
  }
  EXPECT_EQ(failed, 2);
  EXPECT_EQ(scheduler_.Status(kStart + absl::Seconds(17)).queued_units(), 0);
}

TEST_F(SchedulerTest, BuildWaitsForAWorkerThatComesBackWithinTheGracePeriod) {
  std::string paused = AddWorker("paused", "13.0");
  ASSERT_TRUE(Submit(1).ok());
  ASSERT_TRUE(LeaseNow(paused));
  scheduler_.Tick(kStart + absl::Seconds(6));  // dropped: its unit is queued again
  // It registers again (a laptop woke up) and the build goes on.
  v1::RegisterWorkerRequest again;
  again.set_name("paused");
  *again.mutable_toolchain() = Toolchain("13.0");
  again.set_memory_cap_bytes(8 * kGiB);
  again.set_slots(1);
  absl::StatusOr<std::string> back = scheduler_.RegisterWorker(again, kStart + absl::Seconds(8));
  ASSERT_TRUE(back.ok());
  scheduler_.Tick(kStart + absl::Seconds(9));
  std::optional<v1::Task> task = LeaseNow(*back, kStart + absl::Seconds(9));
  ASSERT_TRUE(task);
  v1::HeartbeatRequest beat;
  beat.set_worker_id(*back);
  beat.add_running_task_ids(task->task_id());
  for (int s : {12, 16}) {
    ASSERT_TRUE(scheduler_.Heartbeat(beat, kStart + absl::Seconds(s)).ok());
  }
  // Past the grace period counted from the drop: the build was not failed.
  scheduler_.Tick(kStart + absl::Seconds(17));
  EXPECT_EQ(Finished(), nullptr);
  ASSERT_TRUE(Report(*back, *task, Completed(0), kStart + absl::Seconds(17)).ok());
  ASSERT_NE(Finished(), nullptr);
  EXPECT_TRUE(Finished()->success());
}

TEST_F(SchedulerTest, SilentWorkerLosesItsLeasesAndTheUnitRunsElsewhere) {
  std::string doomed = AddWorker("doomed");
  ASSERT_TRUE(Submit(1).ok());
  std::optional<v1::Task> task = LeaseNow(doomed);
  ASSERT_TRUE(task);
  std::string healthy = AddWorker("healthy");
  // The healthy worker keeps its heartbeat; the doomed one goes silent.
  v1::HeartbeatRequest beat;
  beat.set_worker_id(healthy);
  ASSERT_TRUE(scheduler_.Heartbeat(beat, kStart + absl::Seconds(4)).ok());
  scheduler_.Tick(kStart + absl::Seconds(6));
  EXPECT_EQ(Count(v1::BuildEvent::kUnitRequeued), 1);
  std::optional<v1::Task> again = LeaseNow(healthy, kStart + absl::Seconds(6));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->unit().name(), "unit0");
  // The silent worker's late report is refused; the new lease completes.
  EXPECT_EQ(Report(doomed, *task, Completed(0)).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(Report(healthy, *again, Completed(0)).ok());
  ASSERT_NE(Finished(), nullptr);
  EXPECT_TRUE(Finished()->success());
  v1::HeartbeatRequest late;
  late.set_worker_id(doomed);
  EXPECT_EQ(scheduler_.Heartbeat(late, kStart + absl::Seconds(7)).code(),
            absl::StatusCode::kNotFound)
      << "a dropped worker must register again";
}

TEST_F(SchedulerTest, LeaseTheWorkerDoesNotRunIsTakenBack) {
  std::string worker = AddWorker("a");
  ASSERT_TRUE(Submit(1).ok());
  ASSERT_TRUE(LeaseNow(worker));
  v1::HeartbeatRequest beat;
  beat.set_worker_id(worker);  // reports no running task
  ASSERT_TRUE(scheduler_.Heartbeat(beat, kStart + absl::Milliseconds(500)).ok());
  EXPECT_EQ(Count(v1::BuildEvent::kUnitRequeued), 0) << "within the grace period";
  ASSERT_TRUE(scheduler_.Heartbeat(beat, kStart + absl::Seconds(3)).ok());
  EXPECT_EQ(Count(v1::BuildEvent::kUnitRequeued), 1);
}

TEST_F(SchedulerTest, FailedStartIsRetriedThenGivesUp) {
  std::string worker = AddWorker("a");
  ASSERT_TRUE(Submit(1).ok());
  v1::TaskResult broken;
  broken.set_outcome(v1::TASK_FAILED_TO_START);
  broken.set_error_message("disk full");
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::optional<v1::Task> task = LeaseNow(worker);
    ASSERT_TRUE(task) << "attempt " << attempt;
    ASSERT_TRUE(Report(worker, *task, broken).ok());
  }
  ASSERT_NE(Finished(), nullptr);
  EXPECT_FALSE(Finished()->success());
  EXPECT_EQ(Count(v1::BuildEvent::kUnitRequeued), 2);
}

TEST_F(SchedulerTest, ParkedLeaseIsAnsweredWhenWorkArrivesOrTheWaitEnds) {
  std::string worker = AddWorker("a", "13.0", 2);
  std::vector<std::optional<v1::Task>> answers;
  auto record = [&](std::optional<v1::Task> task) { answers.push_back(std::move(task)); };
  ASSERT_TRUE(scheduler_.RequestLease(worker, kStart + absl::Seconds(5), record, kStart).ok());
  ASSERT_TRUE(scheduler_.RequestLease(worker, kStart + absl::Seconds(5), record, kStart).ok());
  EXPECT_TRUE(answers.empty());
  ASSERT_TRUE(Submit(1).ok());
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_TRUE(answers[0].has_value());
  scheduler_.Tick(kStart + absl::Seconds(6));
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_FALSE(answers[1].has_value());
}

// A unit an engine's ActionCache answered (the client's --remote-executor)
// is cached, as the summary says, when an engine client's worker says so;
// the same words from another worker change nothing (they would dodge the
// cross-check).
TEST_F(SchedulerTest, AnEnginesCacheHitCountsAsCachedOnlyFromAnEngineClient) {
  v1::RegisterWorkerRequest request;
  request.set_name("engine-client");
  *request.mutable_toolchain() = Toolchain("13.0");
  request.set_memory_cap_bytes(8 * kGiB);
  request.set_slots(1);
  request.set_engine_client(true);
  absl::StatusOr<std::string> engine = scheduler_.RegisterWorker(request, kStart);
  ASSERT_TRUE(engine.ok()) << engine.status();
  v1::TaskResult hit = Completed(0);
  hit.set_engine_cache_hit(true);
  ASSERT_TRUE(Submit(1).ok());
  std::optional<v1::Task> task = LeaseNow(*engine);
  ASSERT_TRUE(task);
  ASSERT_TRUE(Report(*engine, *task, hit).ok());
  ASSERT_NE(Finished(), nullptr);
  EXPECT_EQ(Finished()->units_cached(), 1);
  events_.clear();

  std::string plain = AddWorker("plain");
  ASSERT_TRUE(Submit(1).ok());
  std::optional<v1::Task> other = LeaseNow(plain);
  ASSERT_TRUE(other);
  ASSERT_TRUE(Report(plain, *other, hit).ok());
  ASSERT_NE(Finished(), nullptr);
  EXPECT_EQ(Finished()->units_cached(), 0);
  for (const v1::BuildEvent& event : events_) {
    if (event.has_unit_finished()) EXPECT_FALSE(event.unit_finished().cached());
  }
}

TEST_F(SchedulerTest, CachedUnitsFinishWithoutAWorker) {
  AddWorker("a");
  ASSERT_TRUE(Submit(2, {{0, Completed(0)}, {1, Completed(0)}}).ok());
  ASSERT_NE(Finished(), nullptr);
  EXPECT_TRUE(Finished()->success());
  EXPECT_EQ(Finished()->units_cached(), 2);
  EXPECT_EQ(Count(v1::BuildEvent::kUnitStarted), 0);
}

TEST_F(SchedulerTest, CancelledBuildLeavesTheQueue) {
  std::string worker = AddWorker("a");
  absl::StatusOr<std::string> build = Submit(3);
  ASSERT_TRUE(build.ok());
  scheduler_.CancelBuild(*build);
  EXPECT_FALSE(LeaseNow(worker));
  EXPECT_EQ(scheduler_.Status(kStart).queued_units(), 0);
}

// `count` units named part<first>...: a part of a build submitted in parts.
std::vector<PlannedUnit> PartUnits(int first, int count, int wall_seconds = 1) {
  std::vector<PlannedUnit> units = Units(count, 100 * kMiB);
  for (int i = 0; i < count; ++i) {
    units[i].unit.set_name(absl::StrCat("part", first + i));
    units[i].action_digest = absl::StrCat("part-action", first + i);
    units[i].demand.wall = absl::Seconds(wall_seconds);
  }
  return units;
}

TEST_F(SchedulerTest, BuildSubmittedInPartsEndsOnlyAfterItsLastPart) {
  std::string worker = AddWorker("a", "13.0", 2);
  absl::StatusOr<std::string> build = scheduler_.SubmitBuild(
      "parts", Toolchain("13.0"), {}, {},
      [this](const v1::BuildEvent& event) { events_.push_back(event); }, kStart,
      /*more_to_come=*/true);
  ASSERT_TRUE(build.ok()) << build.status();
  ASSERT_EQ(Count(v1::BuildEvent::kAccepted), 1);
  EXPECT_EQ(Finished(), nullptr) << "an open build with no units yet is not done";

  ASSERT_TRUE(scheduler_.AddUnits(*build, PartUnits(0, 1), {}, {"a note"}, false, kStart).ok());
  ASSERT_EQ(Count(v1::BuildEvent::kUnitsAdded), 1);
  EXPECT_THAT(events_.back().units_added().unit_names(), ::testing::ElementsAre("part0"));
  EXPECT_THAT(events_.back().units_added().notes(), ::testing::ElementsAre("a note"));
  EXPECT_FALSE(events_.back().units_added().last());
  EXPECT_GT(events_.back().units_added().added_unix_micros(), 0) << "for the client's timeline";
  std::optional<v1::Task> first = LeaseNow(worker);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->unit().name(), "part0");
  ASSERT_TRUE(Report(worker, *first, Completed(0)).ok());
  EXPECT_EQ(Finished(), nullptr) << "every unit sent so far is done, but more may come";

  // A later part: one unit compiles, one is cached; the last part closes it.
  ASSERT_TRUE(
      scheduler_.AddUnits(*build, PartUnits(1, 2), {{1, Completed(0)}}, {}, false, kStart).ok());
  std::optional<v1::Task> second = LeaseNow(worker);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->unit().name(), "part1");
  EXPECT_FALSE(LeaseNow(worker)) << "part2 was cached";
  ASSERT_TRUE(scheduler_.AddUnits(*build, {}, {}, {}, /*last=*/true, kStart).ok());
  EXPECT_TRUE(events_.back().units_added().last());
  EXPECT_EQ(Finished(), nullptr) << "part1 still runs";
  ASSERT_TRUE(Report(worker, *second, Completed(0)).ok());
  ASSERT_NE(Finished(), nullptr);
  EXPECT_TRUE(Finished()->success());
  EXPECT_EQ(Finished()->units_total(), 3);
  EXPECT_EQ(Finished()->units_cached(), 1);
  EXPECT_THAT(recorded_, ::testing::ElementsAre("part-action0", "part-action1"));
  EXPECT_TRUE(absl::IsNotFound(scheduler_.AddUnits(*build, PartUnits(3, 1), {}, {}, true, kStart)))
      << "the build ended";
}

// A build of 8 entries arriving in parts on 8 slots: its first quarter
// takes 2 slots, not 8, and the longer units of later parts start before
// the rest of the first; once the last part is in, every slot is its.
TEST_F(SchedulerTest, ABuildStillArrivingKeepsSlotsForWhatIsToCome) {
  std::string worker = AddWorker("a", "13.0", 8, 64 * kGiB);
  absl::StatusOr<std::string> build = scheduler_.SubmitBuild(
      "parts", Toolchain("13.0"), {}, {},
      [this](const v1::BuildEvent& event) { events_.push_back(event); }, kStart,
      /*more_to_come=*/true);
  ASSERT_TRUE(build.ok()) << build.status();
  auto lease_all = [&] {
    std::vector<std::string> names;
    while (std::optional<v1::Task> task = LeaseNow(worker)) names.push_back(task->unit().name());
    return names;
  };
  scheduler_.HoldSlotsForTheRest(*build, 0.75);
  ASSERT_TRUE(scheduler_.AddUnits(*build, PartUnits(0, 4, 10), {}, {}, false, kStart).ok());
  EXPECT_THAT(lease_all(), ::testing::SizeIs(2)) << "a quarter of the build: a quarter of 8 slots";
  scheduler_.HoldSlotsForTheRest(*build, 0.25);
  ASSERT_TRUE(scheduler_.AddUnits(*build, PartUnits(4, 2, 100), {}, {}, false, kStart).ok());
  EXPECT_THAT(lease_all(), ::testing::UnorderedElementsAre("part4", "part5", "part2", "part3"))
      << "6 of 8 slots: the longer units of the later part first";
  ASSERT_TRUE(scheduler_.AddUnits(*build, PartUnits(6, 2, 1), {}, {}, /*last=*/true, kStart).ok());
  EXPECT_THAT(lease_all(), ::testing::UnorderedElementsAre("part6", "part7"))
      << "the last part is in: nothing is held back";
  // A build submitted whole holds nothing back, whatever it was told.
  absl::StatusOr<std::string> whole = Submit(2);
  ASSERT_TRUE(whole.ok());
  scheduler_.HoldSlotsForTheRest(*whole, 0.9);
  std::string other = AddWorker("b", "13.0", 2, 64 * kGiB);
  EXPECT_TRUE(LeaseNow(other));
  EXPECT_TRUE(LeaseNow(other));
}

TEST_F(SchedulerTest, LastPartOfCachedUnitsEndsTheBuildAtOnce) {
  AddWorker("a");
  absl::StatusOr<std::string> build = scheduler_.SubmitBuild(
      "parts", Toolchain("13.0"), PartUnits(0, 1), {{0, Completed(0)}},
      [this](const v1::BuildEvent& event) { events_.push_back(event); }, kStart, true);
  ASSERT_TRUE(build.ok()) << build.status();
  EXPECT_EQ(Finished(), nullptr);
  ASSERT_TRUE(scheduler_
                  .AddUnits(*build, PartUnits(1, 2), {{0, Completed(0)}, {1, Completed(0)}}, {},
                            true, kStart)
                  .ok());
  ASSERT_NE(Finished(), nullptr);
  EXPECT_EQ(Finished()->units_total(), 3);
  EXPECT_EQ(Finished()->units_cached(), 3);
}

TEST_F(SchedulerTest, APartWithANameTheBuildHasIsRefusedWhole) {
  std::string worker = AddWorker("a", "13.0", 4);
  absl::StatusOr<std::string> build = scheduler_.SubmitBuild(
      "parts", Toolchain("13.0"), PartUnits(0, 2), {},
      [this](const v1::BuildEvent& event) { events_.push_back(event); }, kStart, true);
  ASSERT_TRUE(build.ok());
  std::vector<PlannedUnit> again = PartUnits(5, 2);
  again[1].unit.set_name("part1");  // the first part's
  absl::Status status = scheduler_.AddUnits(*build, std::move(again), {}, {}, false, kStart);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("'part1'"));
  std::vector<PlannedUnit> twice = PartUnits(7, 2);
  twice[1].unit.set_name("part7");
  EXPECT_TRUE(absl::IsInvalidArgument(
      scheduler_.AddUnits(*build, std::move(twice), {}, {}, false, kStart)));
  EXPECT_EQ(Count(v1::BuildEvent::kUnitsAdded), 0);
  EXPECT_EQ(scheduler_.Status(kStart).queued_units() + scheduler_.Status(kStart).running_units(), 2)
      << "nothing of a refused part is queued";
}

TEST_F(SchedulerTest, OnlyAnOpenBuildTakesParts) {
  AddWorker("a");
  absl::StatusOr<std::string> whole = Submit(2);
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(
      scheduler_.AddUnits(*whole, PartUnits(0, 1), {}, {}, true, kStart)))
      << "submitted whole";
  EXPECT_TRUE(absl::IsNotFound(
      scheduler_.AddUnits("b-no-such-build", PartUnits(0, 1), {}, {}, true, kStart)));
  absl::StatusOr<std::string> open = scheduler_.SubmitBuild(
      "parts", Toolchain("13.0"), {}, {}, [](const v1::BuildEvent&) {}, kStart, true);
  ASSERT_TRUE(open.ok());
  ASSERT_TRUE(scheduler_.AddUnits(*open, PartUnits(0, 1), {}, {}, /*last=*/true, kStart).ok());
  EXPECT_TRUE(
      absl::IsFailedPrecondition(scheduler_.AddUnits(*open, PartUnits(1, 1), {}, {}, true, kStart)))
      << "after its last part";
  scheduler_.CancelBuild(*open);
  EXPECT_TRUE(absl::IsNotFound(scheduler_.AddUnits(*open, PartUnits(2, 1), {}, {}, true, kStart)));
}

TEST_F(SchedulerTest, AnOpenBuildNeedsAWorkerWithItsToolchainEvenWithNothingToCompileYet) {
  AddWorker("a", "12.8");
  absl::StatusOr<std::string> open = scheduler_.SubmitBuild(
      "parts", Toolchain("13.0"), {}, {}, [](const v1::BuildEvent&) {}, kStart, true);
  EXPECT_TRUE(absl::IsFailedPrecondition(open.status())) << open.status();
}

TEST_F(SchedulerTest, ALaterPartsLongerUnitsGoAheadOfQueuedShorterOnes) {
  std::string worker = AddWorker("a");
  absl::StatusOr<std::string> build = scheduler_.SubmitBuild(
      "parts", Toolchain("13.0"), PartUnits(0, 3, 10), {},
      [this](const v1::BuildEvent& event) { events_.push_back(event); }, kStart, true);
  ASSERT_TRUE(build.ok());
  std::optional<v1::Task> running = LeaseNow(worker);
  ASSERT_TRUE(running);
  ASSERT_TRUE(scheduler_.AddUnits(*build, PartUnits(3, 1, 60), {}, {}, true, kStart).ok());
  ASSERT_TRUE(Report(worker, *running, Completed(0)).ok());
  std::optional<v1::Task> next = LeaseNow(worker);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->unit().name(), "part3") << "predicted at 60 s against 10 s";
}

TEST_F(SchedulerTest, RejectsWorkersWithoutSlotsOrCap) {
  v1::RegisterWorkerRequest request;
  request.set_name("bad");
  *request.mutable_toolchain() = Toolchain("13.0");
  request.set_slots(0);
  request.set_memory_cap_bytes(1);
  EXPECT_EQ(scheduler_.RegisterWorker(request, kStart).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, UnitsStartOnlyWhileTheirReservationsFitTheCap) {
  // 1 GiB less 64 MiB headroom holds two 400 MiB units, not three.
  std::string worker = AddWorker("small", "13.0", 4, 1 * kGiB);
  ASSERT_TRUE(SubmitUnits(Units(3, 400 * kMiB)).ok());
  std::optional<v1::Task> first = LeaseNow(worker);
  std::optional<v1::Task> second = LeaseNow(worker);
  ASSERT_TRUE(first && second);
  EXPECT_FALSE(LeaseNow(worker)) << "a free slot, but no memory left";
  EXPECT_EQ(scheduler_.Status(kStart).workers(0).reserved_bytes(), 800 * kMiB);
  ASSERT_TRUE(Report(worker, *first, Completed(0)).ok());
  EXPECT_TRUE(LeaseNow(worker)) << "the finished unit's reservation is free again";
}

TEST_F(SchedulerTest, LongestPredictedUnitsGoFirstAndSmallOnesFillIn) {
  std::string worker = AddWorker("a", "13.0", 1);
  ASSERT_TRUE(SubmitUnits(Units(3, 100 * kMiB, {10, 30, 20})).ok());
  std::vector<std::string> order;
  for (int i = 0; i < 3; ++i) {
    std::optional<v1::Task> task = LeaseNow(worker);
    ASSERT_TRUE(task);
    order.push_back(task->unit().name());
    ASSERT_TRUE(Report(worker, *task, Completed(0)).ok());
  }
  EXPECT_THAT(order, ::testing::ElementsAre("unit1", "unit2", "unit0"));
}

TEST_F(SchedulerTest, SmallUnitsFillInBehindAWaitingLargeOneOnlyIfTheyDoNotDelayIt) {
  // 1 GiB cap, 960 MiB usable. "running" holds 600 MiB for 10 s; "large"
  // (800 MiB) must wait for it; "long" would hold 200 MiB past that time,
  // leaving the large unit too little; "short" ends before it and may run.
  std::string worker = AddWorker("w", "13.0", 4, 1 * kGiB);
  std::vector<PlannedUnit> first = Units(1, 600 * kMiB, {10});
  first[0].unit.set_name("running");
  ASSERT_TRUE(SubmitUnits(first).ok());
  ASSERT_TRUE(LeaseNow(worker));
  std::vector<PlannedUnit> rest = Units(3, 200 * kMiB, {30, 20, 5});
  rest[0].unit.set_name("large");
  rest[0].demand.peak_bytes = 800 * kMiB;
  rest[1].unit.set_name("long");
  rest[2].unit.set_name("short");
  ASSERT_TRUE(SubmitUnits(rest).ok());
  std::optional<v1::Task> task = LeaseNow(worker);
  ASSERT_TRUE(task);
  EXPECT_EQ(task->unit().name(), "short");
  EXPECT_FALSE(LeaseNow(worker)) << "'long' would delay 'large'";
}

TEST_F(SchedulerTest, MeasuredPeaksGoIntoTheHistory) {
  std::string worker = AddWorker("a");
  ASSERT_TRUE(Submit(1).ok());
  std::optional<v1::Task> task = LeaseNow(worker);
  v1::TaskResult done = Completed(0);
  done.set_peak_memory_bytes(321 * kMiB);
  done.set_wall_time_ms(4000);
  ASSERT_TRUE(Report(worker, *task, done, kStart + absl::Seconds(5)).ok());
  UnitDemand demand = history_->Predict("identity0", "family", 1);
  EXPECT_EQ(demand.source, "history");
  EXPECT_EQ(demand.peak_bytes, 321 * kMiB + 321 * kMiB / 20) << "plus the 5% margin";
  EXPECT_EQ(demand.wall, absl::Seconds(4));
}

v1::TaskResult Measured(int64_t peak, int64_t wall_ms) {
  v1::TaskResult result = Completed(0);
  result.set_peak_memory_bytes(peak);
  result.set_wall_time_ms(wall_ms);
  return result;
}

TEST_F(SchedulerTest, QueuedUnitsOfANeverBuiltFamilyLearnFromItsFirstRuns) {
  // Six cold units of one folder family, all at the 2 GiB default: three
  // forward kernels (closure "fwd") and three backward ones ("bwd").
  std::string worker = AddWorker("w", "13.0", 1, 16 * kGiB);
  std::vector<PlannedUnit> units = Units(6, 2 * kGiB);
  for (int i = 0; i < 6; ++i) units[i].closure = i < 3 ? "fwd" : "bwd";
  ASSERT_TRUE(SubmitUnits(units).ok());
  std::optional<v1::Task> fwd0 = LeaseNow(worker);
  ASSERT_TRUE(fwd0);
  EXPECT_EQ(fwd0->reserved_bytes(), 2 * kGiB) << "nothing measured yet: the default";
  ASSERT_TRUE(Report(worker, *fwd0, Measured(4 * kGiB, 3000)).ok());

  std::optional<v1::Task> fwd1 = LeaseNow(worker);
  ASSERT_TRUE(fwd1);
  EXPECT_EQ(fwd1->unit().name(), "unit1");
  EXPECT_EQ(fwd1->reserved_bytes(), 4 * kGiB + 4 * kGiB / 20)
      << "its closure's first run, plus the margin";
  ASSERT_TRUE(Report(worker, *fwd1, Measured(3 * kGiB, 2000)).ok());
  std::optional<v1::Task> fwd2 = LeaseNow(worker);
  ASSERT_TRUE(fwd2);
  EXPECT_EQ(fwd2->reserved_bytes(), 4 * kGiB + 4 * kGiB / 20)
      << "a high quantile of the closure's two runs";
  ASSERT_TRUE(Report(worker, *fwd2, Measured(4 * kGiB, 3000)).ok());

  // The backward kernels' closure was never measured: their folder's runs.
  std::optional<v1::Task> bwd0 = LeaseNow(worker);
  ASSERT_TRUE(bwd0);
  EXPECT_EQ(bwd0->unit().name(), "unit3");
  EXPECT_EQ(bwd0->reserved_bytes(), 4 * kGiB + 4 * kGiB / 20);
  ASSERT_TRUE(Report(worker, *bwd0, Measured(6 * kGiB, 5000)).ok());
  std::optional<v1::Task> bwd1 = LeaseNow(worker);
  ASSERT_TRUE(bwd1);
  EXPECT_EQ(bwd1->reserved_bytes(), 6 * kGiB + 6 * kGiB / 20)
      << "its own closure's run, not the forward kernels'";
  ASSERT_TRUE(Report(worker, *bwd1, Measured(6 * kGiB, 5000)).ok());

  std::map<std::string, std::string> sources;
  for (const auto& event : events_) {
    if (event.has_unit_finished()) {
      sources[event.unit_finished().unit_name()] = event.unit_finished().prediction_source();
    }
  }
  EXPECT_EQ(sources["unit0"], "default");
  EXPECT_EQ(sources["unit1"], "same closure");
  EXPECT_EQ(sources["unit3"], "similar units");
  EXPECT_EQ(sources["unit4"], "same closure");
}

class CarefulStartTest : public SchedulerTest {
 protected:
  CarefulStartTest() : SchedulerTest(2) {}
};

// Units that nothing measured predicts start two of a kind at a time until
// the first of them reports; then they are predicted from it and run at
// full speed. Units of a measured profile start at once.
TEST_F(CarefulStartTest, UnitsOfAKindNothingMeasuredStartAFewAtATimeUntilTheFirstReports) {
  std::string worker = AddWorker("w", "13.0", 8, 64 * kGiB);
  std::vector<PlannedUnit> units = Units(8, 2 * kGiB);
  for (int i = 0; i < 8; ++i) units[i].closure = "new-kind";
  for (int i = 6; i < 8; ++i) {
    units[i].closure = "profiled";
    units[i].demand.basis = PredictionBasis::kPrior;
    units[i].demand.source = "measured profile";
  }
  ASSERT_TRUE(SubmitUnits(units).ok());
  std::vector<v1::Task> leased;
  while (std::optional<v1::Task> task = LeaseNow(worker)) leased.push_back(*task);
  std::vector<std::string> names;
  for (const v1::Task& task : leased) names.push_back(task.unit().name());
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("unit0", "unit1", "unit6", "unit7"))
      << "8 slots and 64 GiB free, but two of the kind nothing measured";
  // The first report teaches the rest: they start together.
  ASSERT_TRUE(Report(worker, leased[0], Measured(3 * kGiB, 2000)).ok());
  int more = 0;
  while (LeaseNow(worker)) ++more;
  EXPECT_EQ(more, 4);
}

// A unit predicted from its measured profile keeps its own size when runs
// of its kind here come in: the profile, scaled by how they compared.
TEST_F(SchedulerTest, UnitsOfAMeasuredProfileAreScaledByTheRunsOfTheirKind) {
  std::string worker = AddWorker("w", "13.0", 1, 64 * kGiB);
  std::vector<PlannedUnit> units = Units(3, 4 * kGiB, {100, 200, 300});
  for (int i = 0; i < 3; ++i) {
    units[i].closure = "fwd";
    units[i].demand.basis = PredictionBasis::kPrior;
    units[i].demand.peak_bytes = (4 + 2 * i) * kGiB;  // 4, 6, 8 GiB
    units[i].prior = units[i].demand;
  }
  ASSERT_TRUE(SubmitUnits(units).ok());
  std::optional<v1::Task> first = LeaseNow(worker);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->unit().name(), "unit2") << "the longest first";
  // It took 1.5 x its profile's memory and half its time.
  ASSERT_TRUE(Report(worker, *first, Measured(12 * kGiB, 150'000)).ok());
  std::optional<v1::Task> second = LeaseNow(worker);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->unit().name(), "unit1");
  EXPECT_EQ(second->reserved_bytes(), 9 * kGiB) << "its own 6 GiB, times 1.5";
  ASSERT_TRUE(Report(worker, *second, Measured(6 * kGiB, 100'000)).ok());
  std::optional<v1::Task> third = LeaseNow(worker);
  ASSERT_TRUE(third);
  EXPECT_EQ(third->reserved_bytes(), 6 * kGiB) << "its own 4 GiB times the largest ratio, 1.5";
  std::string source;
  for (const auto& event : events_) {
    if (event.has_unit_started() && event.unit_started().unit_name() == "unit1") {
      source = "started";
    }
    if (event.has_unit_finished() && event.unit_finished().unit_name() == "unit1") {
      source = event.unit_finished().prediction_source();
    }
  }
  EXPECT_EQ(source, "measured profile, scaled by 1 run here");
}

// The first runs of a kind to report are its smallest: a unit of another
// size is never predicted below its own profile because they came in under
// theirs; its time follows them.
TEST_F(SchedulerTest, RunsBelowTheirProfileDoNotShrinkTheOthersMemory) {
  std::string worker = AddWorker("w", "13.0", 1, 64 * kGiB);
  std::vector<PlannedUnit> units = Units(2, 4 * kGiB, {300, 200});
  for (PlannedUnit& unit : units) {
    unit.closure = "fwd";
    unit.demand.basis = PredictionBasis::kPrior;
    unit.prior = unit.demand;
  }
  ASSERT_TRUE(SubmitUnits(units).ok());
  std::optional<v1::Task> first = LeaseNow(worker);
  ASSERT_TRUE(first);
  ASSERT_TRUE(Report(worker, *first, Measured(2 * kGiB, 150'000)).ok());
  std::optional<v1::Task> second = LeaseNow(worker);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->reserved_bytes(), 4 * kGiB) << "not halved";
  ASSERT_TRUE(Report(worker, *second, Measured(2 * kGiB, 100'000)).ok());
  for (const auto& event : events_) {
    if (event.has_unit_finished() && event.unit_finished().unit_name() == "unit1") {
      EXPECT_EQ(event.unit_finished().prediction_source(),
                "measured profile, scaled by 1 run here");
    }
  }
}

TEST_F(SchedulerTest, UnitsLearnedToBeLongMoveAheadInTheQueue) {
  // Four cold units, equal by the default: the queue keeps their order
  // until the first runs of their closures show which are long.
  std::string worker = AddWorker("w", "13.0", 1, 16 * kGiB);
  std::vector<PlannedUnit> units = Units(4, 1 * kGiB);
  for (int i = 0; i < 4; ++i) units[i].closure = i % 2 == 0 ? "short" : "long";
  ASSERT_TRUE(SubmitUnits(units).ok());
  std::vector<std::string> order;
  for (int64_t wall_ms : {2000, 50000, 0, 0}) {
    std::optional<v1::Task> task = LeaseNow(worker);
    ASSERT_TRUE(task);
    order.push_back(task->unit().name());
    // Reported 100 s after the lease: times are clamped to how long it was held.
    ASSERT_TRUE(Report(worker, *task, Measured(1 * kGiB, wall_ms > 0 ? wall_ms : 1000),
                       kStart + absl::Seconds(100))
                    .ok());
  }
  EXPECT_THAT(order, ::testing::ElementsAre("unit0", "unit1", "unit3", "unit2"))
      << "unit3 shares the 50 s closure of unit1 and goes before unit2 (2 s)";
}

TEST_F(SchedulerTest, AMemoryKillTeachesTheQueuedUnitsOfItsFamily) {
  std::string worker = AddWorker("w", "13.0", 1, 16 * kGiB);
  ASSERT_TRUE(SubmitUnits(Units(3, 2 * kGiB)).ok());
  std::optional<v1::Task> first = LeaseNow(worker);
  ASSERT_TRUE(first);
  ASSERT_TRUE(Report(worker, *first, KilledForMemory(5 * kGiB)).ok());
  // The killed unit retries first, with a larger reservation of its own;
  // the next, never run, reserves what the kill showed its family needs.
  std::optional<v1::Task> retry = LeaseNow(worker);
  ASSERT_TRUE(retry);
  EXPECT_EQ(retry->unit().name(), "unit0");
  ASSERT_TRUE(Report(worker, *retry, Measured(5 * kGiB, 1000)).ok());
  std::optional<v1::Task> next = LeaseNow(worker);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->unit().name(), "unit1");
  EXPECT_GE(next->reserved_bytes(), 5 * kGiB) << "not the 2 GiB default";
}

TEST_F(SchedulerTest, UnitsPredictedFromTheirOwnRunsKeepTheirPrediction) {
  std::string worker = AddWorker("w", "13.0", 1, 16 * kGiB);
  std::vector<PlannedUnit> units = Units(2, 1 * kGiB);
  units[1].demand.basis = PredictionBasis::kOwnHistory;
  units[1].demand.source = "history";
  ASSERT_TRUE(SubmitUnits(units).ok());
  std::optional<v1::Task> first = LeaseNow(worker);
  ASSERT_TRUE(first);
  ASSERT_TRUE(Report(worker, *first, Measured(7 * kGiB, 1000)).ok());
  std::optional<v1::Task> second = LeaseNow(worker);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->reserved_bytes(), 1 * kGiB) << "its own history knows it better";
}

TEST_F(SchedulerTest, MemoryKillClimbsTheRetryLadderAndFailsNamingThePeak) {
  std::string small = AddWorker("small", "13.0", 2, 1 * kGiB);
  ASSERT_TRUE(SubmitUnits(Units(1, 200 * kMiB)).ok());
  // Rung 1: a larger reservation, above the measured peak.
  std::optional<v1::Task> task = LeaseNow(small);
  ASSERT_TRUE(task);
  ASSERT_TRUE(Report(small, *task, KilledForMemory(300 * kMiB)).ok());
  EXPECT_THAT(LastRequeueReason(), HasSubstr("killed for memory on small at 300 MiB"));
  EXPECT_THAT(LastRequeueReason(), HasSubstr("retrying with 375 MiB reserved"));
  task = LeaseNow(small);
  ASSERT_TRUE(task);
  EXPECT_EQ(scheduler_.Status(kStart).workers(0).reserved_bytes(), 375 * kMiB);
  // Rung 2: alone on a worker.
  ASSERT_TRUE(Report(small, *task, KilledForMemory(600 * kMiB)).ok());
  EXPECT_THAT(LastRequeueReason(), HasSubstr("retrying alone on a worker"));
  task = LeaseNow(small);
  ASSERT_TRUE(task);
  EXPECT_EQ(scheduler_.Status(kStart).workers(0).reserved_bytes(), 1 * kGiB - 64 * kMiB);
  // Rung 3: a worker with a larger cap, once one exists.
  std::string big = AddWorker("big", "13.0", 2, 4 * kGiB);
  ASSERT_TRUE(Report(small, *task, KilledForMemory(950 * kMiB)).ok());
  EXPECT_THAT(LastRequeueReason(), HasSubstr("retrying on a worker with a cap above 1.0 GiB"));
  EXPECT_FALSE(LeaseNow(small)) << "the small worker may not take it again";
  task = LeaseNow(big);
  ASSERT_TRUE(task);
  // Last: killed on the largest worker too.
  ASSERT_TRUE(Report(big, *task, KilledForMemory(3900 * kMiB)).ok());
  ASSERT_NE(Finished(), nullptr);
  EXPECT_FALSE(Finished()->success());
  const v1::TaskResult* failed = nullptr;
  for (const auto& event : events_) {
    if (event.has_unit_finished()) failed = &event.unit_finished().result();
  }
  ASSERT_NE(failed, nullptr);
  EXPECT_THAT(failed->error_message(), HasSubstr("unit unit0 peaked at 3.9 GiB"));
  EXPECT_THAT(failed->error_message(), HasSubstr("largest cap 4.0 GiB"));
  EXPECT_EQ(Count(v1::BuildEvent::kUnitRequeued), 3);
  EXPECT_TRUE(recorded_.empty()) << "no result to cache";
}

TEST_F(SchedulerTest, ThreadedUnitOfSeveralTargetsKilledOnTheLargestWorkerCompilesPerTarget) {
  std::string only = AddWorker("only", "13.0", 4, 1 * kGiB);
  std::vector<PlannedUnit> units = Units(1, 200 * kMiB);
  units[0].unit.set_name("mha");
  units[0].parallel = 4;  // --threads 4 over four targets
  units[0].split = []() -> absl::StatusOr<std::vector<PlannedUnit>> {
    std::vector<PlannedUnit> parts = Units(4, 100 * kMiB);
    for (int i = 0; i < 4; ++i) {
      parts[i].unit.set_name(absl::StrCat("mha@sm_", 80 + 10 * i));
      parts[i].unit.mutable_architecture_part()->set_of("mha");
      parts[i].action_digest = absl::StrCat("part", i);
    }
    return parts;
  };
  ASSERT_TRUE(SubmitUnits(std::move(units)).ok());
  ASSERT_NO_FATAL_FAILURE(KillEachLease(only, {300 * kMiB, 900 * kMiB, 960 * kMiB}));
  const v1::BuildEvent::UnitSplit* split = nullptr;
  for (const auto& event : events_) {
    if (event.has_unit_split()) split = &event.unit_split();
  }
  ASSERT_NE(split, nullptr);
  EXPECT_THAT(split->reason(), HasSubstr("its 4 targets compile as units of their own"));
  // Each part runs one target where the whole ran four at once: it reserves
  // a quarter of the whole's peak, so all four fit the worker together.
  std::vector<v1::Task> parts;
  for (int i = 0; i < 4; ++i) {
    std::optional<v1::Task> task = LeaseNow(only);
    ASSERT_TRUE(task) << "part " << i;
    EXPECT_EQ(task->reserved_bytes(), 240 * kMiB);
    parts.push_back(*task);
  }
  for (const v1::Task& task : parts) ASSERT_TRUE(Report(only, task, Completed(0)).ok());
  ASSERT_NE(Finished(), nullptr);
  EXPECT_TRUE(Finished()->success());
}

TEST_F(SchedulerTest, UnitOfSeveralInstantiationsKilledOnTheLargestWorkerIsSplit) {
  std::string only = AddWorker("only", "13.0", 2, 1 * kGiB);
  std::vector<PlannedUnit> units = Units(1, 200 * kMiB);
  units[0].unit.set_name("set_1of1");
  units[0].instantiations = 4;
  int splits = 0;
  units[0].split = [&splits]() -> absl::StatusOr<std::vector<PlannedUnit>> {
    ++splits;
    return HalvesOfSet();
  };
  ASSERT_TRUE(SubmitUnits(std::move(units)).ok());
  // A larger reservation, then alone; no worker has a larger cap.
  for (int64_t peak : {300 * kMiB, 900 * kMiB}) {
    std::optional<v1::Task> task = LeaseNow(only);
    ASSERT_TRUE(task);
    ASSERT_TRUE(Report(only, *task, KilledForMemory(peak)).ok());
    EXPECT_EQ(splits, 0);
  }
  std::optional<v1::Task> task = LeaseNow(only);
  ASSERT_TRUE(task);
  ASSERT_TRUE(Report(only, *task, KilledForMemory(950 * kMiB)).ok());
  EXPECT_EQ(splits, 1);
  const v1::BuildEvent::UnitSplit* split = nullptr;
  for (const auto& event : events_) {
    if (event.has_unit_split()) split = &event.unit_split();
  }
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(split->unit_name(), "set_1of1");
  EXPECT_THAT(split->into(), ::testing::ElementsAre("set_1of1_1of2", "set_1of1_2of2"));
  EXPECT_THAT(split->reason(), HasSubstr("its 4 instantiations are split"));
  EXPECT_EQ(Finished(), nullptr) << "the build goes on";
  // Both halves fit the worker together and finish the build. Each reserves
  // at least its share of what the parent was seen to need (960 MiB alone).
  std::optional<v1::Task> first = LeaseNow(only);
  std::optional<v1::Task> second = LeaseNow(only);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->reserved_bytes(), 480 * kMiB);
  EXPECT_EQ(second->reserved_bytes(), 480 * kMiB);
  ASSERT_TRUE(Report(only, *first, Completed(0)).ok());
  ASSERT_TRUE(Report(only, *second, Completed(0)).ok());
  ASSERT_NE(Finished(), nullptr);
  EXPECT_TRUE(Finished()->success());
  EXPECT_EQ(Finished()->units_total(), 2);
  EXPECT_THAT(recorded_, ::testing::UnorderedElementsAre("half0", "half1"));
}

TEST_F(SchedulerTest, HalfThatFailsToCompileFailsTheBuildOnce) {
  std::string only = AddWorker("only", "13.0", 2, 1 * kGiB);
  std::vector<PlannedUnit> units = Units(1, 200 * kMiB);
  units[0].instantiations = 2;
  units[0].split = []() -> absl::StatusOr<std::vector<PlannedUnit>> {
    std::vector<PlannedUnit> halves = Units(2, 100 * kMiB);
    for (int i = 0; i < 2; ++i) halves[i].unit.set_name(absl::StrCat("half", i));
    return halves;
  };
  ASSERT_TRUE(SubmitUnits(std::move(units)).ok());
  ASSERT_NO_FATAL_FAILURE(KillEachLease(only, {300 * kMiB, 900 * kMiB, 950 * kMiB}));
  std::optional<v1::Task> first = LeaseNow(only);
  std::optional<v1::Task> second = LeaseNow(only);
  ASSERT_TRUE(first && second);
  ASSERT_TRUE(Report(only, *first, Completed(2)).ok());  // a compile error
  EXPECT_EQ(Finished(), nullptr);
  ASSERT_TRUE(Report(only, *second, Completed(0)).ok());
  ASSERT_NE(Finished(), nullptr);
  EXPECT_FALSE(Finished()->success());
  EXPECT_EQ(Finished()->units_total(), 2);
  EXPECT_EQ(Finished()->units_failed(), 1);
  EXPECT_EQ(Finished()->message(), "1 of 2 units failed");
  EXPECT_EQ(Count(v1::BuildEvent::kFinished), 1);
}

TEST(SchedulerSplitTest, HalvesBuiltBeforeComeFromTheResultCache) {
  std::vector<std::string> looked_up;
  std::vector<v1::BuildEvent> events;
  BuildScheduler scheduler(SchedulerOptions{}, nullptr, nullptr,
                           [&](const std::string& action) -> std::optional<v1::TaskResult> {
                             looked_up.push_back(action);
                             if (action != "half0") return std::nullopt;
                             v1::TaskResult result = Completed(0);
                             result.set_worker_name("earlier");
                             return result;
                           });
  v1::RegisterWorkerRequest request;
  request.set_name("only");
  *request.mutable_toolchain() = Toolchain("13.0");
  request.set_memory_cap_bytes(1 * kGiB);
  request.set_slots(1);
  std::string worker = *scheduler.RegisterWorker(request, kStart);
  std::vector<PlannedUnit> units = Units(1, 200 * kMiB);
  units[0].instantiations = 2;
  units[0].split = []() -> absl::StatusOr<std::vector<PlannedUnit>> {
    std::vector<PlannedUnit> halves = Units(2, 100 * kMiB);
    for (int i = 0; i < 2; ++i) halves[i].action_digest = absl::StrCat("half", i);
    for (int i = 0; i < 2; ++i) halves[i].unit.set_name(absl::StrCat("half", i));
    return halves;
  };
  ASSERT_TRUE(scheduler
                  .SubmitBuild(
                      "test", Toolchain("13.0"), std::move(units), {},
                      [&](const v1::BuildEvent& event) { events.push_back(event); }, kStart)
                  .ok());
  auto lease = [&]() {
    std::optional<v1::Task> got;
    EXPECT_TRUE(scheduler
                    .RequestLease(
                        worker, kStart, [&](std::optional<v1::Task> task) { got = task; }, kStart)
                    .ok());
    return got;
  };
  auto report = [&](const v1::Task& task, const v1::TaskResult& result) {
    v1::ReportResultRequest done;
    done.set_worker_id(worker);
    done.set_task_id(task.task_id());
    *done.mutable_result() = result;
    done.mutable_result()->set_toolchain_digest(Toolchain("13.0").digest());
    return scheduler.ReportResult(done, kStart);
  };
  for (int64_t peak : {300 * kMiB, 900 * kMiB, 950 * kMiB}) {
    std::optional<v1::Task> task = lease();
    ASSERT_TRUE(task);
    ASSERT_TRUE(report(*task, KilledForMemory(peak)).ok());
  }
  EXPECT_THAT(looked_up, ::testing::ElementsAre("half0", "half1"));
  // half0 was answered from the cache; only half1 runs.
  std::optional<v1::Task> task = lease();
  ASSERT_TRUE(task);
  EXPECT_EQ(task->unit().name(), "half1");
  EXPECT_FALSE(lease()) << "nothing else is queued";
  ASSERT_TRUE(report(*task, Completed(0)).ok());
  ASSERT_TRUE(events.back().has_finished());
  EXPECT_TRUE(events.back().finished().success());
  EXPECT_EQ(events.back().finished().units_total(), 2);
  EXPECT_EQ(events.back().finished().units_cached(), 1);
}

TEST_F(SchedulerTest, UnitOfOneInstantiationIsNotSplit) {
  std::string only = AddWorker("only", "13.0", 1, 1 * kGiB);
  std::vector<PlannedUnit> units = Units(1, 200 * kMiB);
  bool called = false;
  units[0].split = [&called]() -> absl::StatusOr<std::vector<PlannedUnit>> {
    called = true;
    return absl::InternalError("a unit of one instantiation has nothing to split");
  };
  ASSERT_TRUE(SubmitUnits(std::move(units)).ok());
  ASSERT_NO_FATAL_FAILURE(KillEachLease(only, {300 * kMiB, 900 * kMiB, 950 * kMiB}));
  ASSERT_NE(Finished(), nullptr);
  EXPECT_FALSE(Finished()->success());
  EXPECT_TRUE(called) << "the splitter decides; it said no";
  EXPECT_EQ(Count(v1::BuildEvent::kUnitSplit), 0);
}

TEST_F(SchedulerTest, MemoryKillsDoNotCountAsLostLeases) {
  std::string worker = AddWorker("a", "13.0", 1, 16 * kGiB);
  ASSERT_TRUE(SubmitUnits(Units(1, 100 * kMiB)).ok());
  ASSERT_NO_FATAL_FAILURE(KillEachLease(worker, {200 * kMiB, 300 * kMiB}));
  std::optional<v1::Task> task = LeaseNow(worker);
  ASSERT_TRUE(task) << "two kills and still queued";
  ASSERT_TRUE(Report(worker, *task, Completed(0)).ok());
  ASSERT_NE(Finished(), nullptr);
  EXPECT_TRUE(Finished()->success());
}

}  // namespace
}  // namespace distcc_cuda::coordinator

namespace distcc_cuda::coordinator {
namespace {

// The trust rules of the worker protocol: ids cannot be guessed, a lease
// answers only to the worker that holds it, and a result counts only with
// exactly the unit's declared outputs.
class SchedulerTrustTest : public SchedulerTest {
 protected:
  std::string AddWorkerAs(const std::string& name, const WorkerPeer& peer, int64_t cap = 8 * kGiB) {
    v1::RegisterWorkerRequest request;
    request.set_name(name);
    *request.mutable_toolchain() = Toolchain("13.0");
    request.set_memory_cap_bytes(cap);
    request.set_slots(1);
    absl::StatusOr<std::string> id = scheduler_.RegisterWorker(request, kStart, peer);
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  }

  // A unit whose object is obj/unit<i>.o.
  std::vector<PlannedUnit> UnitsWithOutputs(int count) {
    std::vector<PlannedUnit> units = Units(count);
    for (int i = 0; i < count; ++i) units[i].unit.add_output_paths(absl::StrCat("unit", i, ".o"));
    return units;
  }

  v1::TaskResult CompletedWith(const std::string& path) {
    v1::TaskResult result = Completed(0);
    auto* output = result.add_outputs();
    output->set_path(path);
    output->mutable_digest()->set_hash(std::string(64, 'a'));
    output->mutable_digest()->set_size_bytes(10);
    return result;
  }

  absl::Status ReportAs(const std::string& worker, const v1::Task& task,
                        const v1::TaskResult& result, const WorkerPeer& peer,
                        absl::Time now = kStart + absl::Seconds(1)) {
    v1::ReportResultRequest request;
    request.set_worker_id(worker);
    request.set_task_id(task.task_id());
    *request.mutable_result() = result;
    request.mutable_result()->set_toolchain_digest(Toolchain("13.0").digest());
    return scheduler_.ReportResult(request, now, peer);
  }
};

TEST_F(SchedulerTrustTest, AnotherPeerCannotDeregisterAWorker) {
  WorkerPeer alice{"alice", true};
  WorkerPeer mallory{"mallory", true};
  std::string worker = AddWorkerAs("alice", alice);
  EXPECT_EQ(scheduler_.DeregisterWorker(worker, kStart, mallory).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(scheduler_.Status(kStart).workers_size(), 1);
  EXPECT_EQ(scheduler_.DeregisterWorker("w-made-up", kStart, mallory).code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(scheduler_.DeregisterWorker(worker, kStart, alice).ok());
  EXPECT_EQ(scheduler_.Status(kStart).workers_size(), 0);
}

// A worker that says "cancelled" of a unit nobody cancelled cannot keep it
// from ever finishing: each such report is a loss, and the unit fails
// after the usual attempts.
TEST_F(SchedulerTrustTest, UnpromptedCancelledReportsCountAsLosses) {
  WorkerPeer mallory{"mallory", true};
  std::string worker = AddWorkerAs("mallory", mallory);
  ASSERT_TRUE(SubmitUnits(UnitsWithOutputs(1)).ok());
  v1::TaskResult cancelled;
  cancelled.set_outcome(v1::TASK_CANCELLED);
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::optional<v1::Task> task;
    ASSERT_TRUE(
        scheduler_
            .RequestLease(
                worker, kStart, [&](std::optional<v1::Task> got) { task = got; }, kStart, mallory)
            .ok());
    ASSERT_TRUE(task) << attempt;
    ASSERT_TRUE(ReportAs(worker, *task, cancelled, mallory).ok());
  }
  ASSERT_FALSE(events_.empty());
  ASSERT_TRUE(events_.back().has_finished());
  EXPECT_FALSE(events_.back().finished().success());
  EXPECT_TRUE(recorded_.empty());
}

TEST_F(SchedulerTrustTest, IdsAreRandomAndCarryTheEpoch) {
  std::string a = AddWorker("zulu");
  std::string b = AddWorker("yankee");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find("zulu"), std::string::npos) << "the name is not part of the id: " << a;
  ASSERT_TRUE(IdEpoch(a).has_value()) << a;
  EXPECT_EQ(IdEpoch(a), IdEpoch(b));
  EXPECT_NEAR(static_cast<double>(*IdEpoch(a)), absl::ToUnixSeconds(absl::Now()), 3600);
  ASSERT_TRUE(Submit(2).ok());
  std::optional<v1::Task> first = LeaseNow(a);
  std::optional<v1::Task> second = LeaseNow(b);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->task_id().size(), second->task_id().size());
  EXPECT_NE(first->task_id().substr(first->task_id().find('-')),
            second->task_id().substr(second->task_id().find('-')));
  EXPECT_EQ(first->task_id()[0], 't');
}

TEST_F(SchedulerTrustTest, AnotherPeerCannotUseAWorkersIdOrItsLease) {
  WorkerPeer alice{"alice", true};
  WorkerPeer mallory{"mallory", true};
  std::string worker = AddWorkerAs("alice", alice);
  ASSERT_TRUE(SubmitUnits(UnitsWithOutputs(1)).ok());
  std::optional<v1::Task> task;
  ASSERT_TRUE(
      scheduler_
          .RequestLease(
              worker, kStart, [&](std::optional<v1::Task> got) { task = got; }, kStart, alice)
          .ok());
  ASSERT_TRUE(task);

  // The stranger's heartbeat that would drop the lease, its lease request
  // and its report are all refused.
  v1::HeartbeatRequest beat;
  beat.set_worker_id(worker);
  EXPECT_EQ(scheduler_.Heartbeat(beat, kStart + absl::Seconds(10), mallory).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(scheduler_
                .RequestLease(
                    worker, kStart, [](std::optional<v1::Task>) {}, kStart, mallory)
                .code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReportAs(worker, *task, CompletedWith("unit0.o"), mallory).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(recorded_.empty());
  // The lease is still the real worker's, whose report counts.
  EXPECT_EQ(scheduler_.Status(kStart).running_units(), 1);
  ASSERT_TRUE(ReportAs(worker, *task, CompletedWith("unit0.o"), alice).ok());
  EXPECT_EQ(recorded_.size(), 1u);
}

TEST_F(SchedulerTrustTest, ReportWithOtherOutputsIsRefusedAndTheUnitRunsElsewhere) {
  WorkerPeer peer{"local", true};
  std::string liar = AddWorkerAs("liar", peer);
  std::string honest = AddWorkerAs("honest", peer);
  ASSERT_TRUE(SubmitUnits(UnitsWithOutputs(1)).ok());
  std::optional<v1::Task> task = LeaseNow(liar);
  ASSERT_TRUE(task);
  absl::Status refused = ReportAs(liar, *task, CompletedWith("../../evil.o"), peer);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(LastRequeueReason(), HasSubstr("was refused"));
  EXPECT_TRUE(recorded_.empty());
  EXPECT_FALSE(LeaseNow(liar)) << "the unit does not go back to the worker that lied";
  std::optional<v1::Task> again = LeaseNow(honest);
  ASSERT_TRUE(again);
  ASSERT_TRUE(ReportAs(honest, *again, CompletedWith("unit0.o"), peer).ok());
  EXPECT_EQ(recorded_.size(), 1u);
}

TEST_F(SchedulerTrustTest, MissingOrExtraOutputsAreRefused) {
  WorkerPeer peer;
  std::string worker = AddWorkerAs("w", peer);
  std::string other = AddWorkerAs("x", peer);
  ASSERT_TRUE(SubmitUnits(UnitsWithOutputs(1)).ok());
  std::optional<v1::Task> task = LeaseNow(worker);
  ASSERT_TRUE(task);
  v1::TaskResult two = CompletedWith("unit0.o");
  *two.add_outputs() = two.outputs(0);
  EXPECT_EQ(ReportAs(worker, *task, two, peer).code(), absl::StatusCode::kInvalidArgument);
  task = LeaseNow(other);
  ASSERT_TRUE(task);
  EXPECT_EQ(ReportAs(other, *task, Completed(0), peer).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(recorded_.empty());
}

TEST_F(SchedulerTrustTest, ReportedPeaksAreClampedToTheWorkersCap) {
  std::string worker = AddWorkerAs("w", {}, 2 * kGiB);
  ASSERT_TRUE(SubmitUnits(UnitsWithOutputs(1)).ok());
  std::optional<v1::Task> task = LeaseNow(worker);
  ASSERT_TRUE(task);
  v1::TaskResult huge = CompletedWith("unit0.o");
  huge.set_peak_memory_bytes(int64_t{1} << 50);
  huge.set_wall_time_ms(int64_t{1} << 40);
  ASSERT_TRUE(ReportAs(worker, *task, huge, {}, kStart + absl::Seconds(3)).ok());
  UnitDemand demand = history_->Predict("identity0", "family", 1);
  EXPECT_LE(demand.peak_bytes, 2 * kGiB + 2 * kGiB / 20) << "the cap plus the 5% margin";
  EXPECT_LE(demand.wall, absl::Seconds(3));
}

TEST_F(SchedulerTrustTest, OnlyAuthenticatedWorkersResultsAreCached) {
  std::string anonymous = AddWorkerAs("anon", {"anonymous", false});
  ASSERT_TRUE(SubmitUnits(UnitsWithOutputs(1)).ok());
  std::optional<v1::Task> task;
  ASSERT_TRUE(scheduler_
                  .RequestLease(anonymous, kStart, [&](std::optional<v1::Task> got) { task = got; },
                                kStart, {"anonymous", false})
                  .ok());
  ASSERT_TRUE(task);
  ASSERT_TRUE(ReportAs(anonymous, *task, CompletedWith("unit0.o"), {"anonymous", false}).ok());
  EXPECT_TRUE(recorded_.empty());
  EXPECT_TRUE(events_.back().has_finished());
  EXPECT_TRUE(events_.back().finished().success()) << "the build itself still uses the result";
}

TEST_F(SchedulerTrustTest, WorkerNamesAndDescriptionsMustBePlain) {
  for (const std::string& name :
       {std::string(""), std::string("a b"), std::string("\x1b[2J"), std::string(65, 'x')}) {
    v1::RegisterWorkerRequest request;
    request.set_name(name);
    *request.mutable_toolchain() = Toolchain("13.0");
    request.set_memory_cap_bytes(kGiB);
    request.set_slots(1);
    EXPECT_EQ(scheduler_.RegisterWorker(request, kStart).status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  }
  v1::RegisterWorkerRequest request;
  request.set_name("ok");
  *request.mutable_toolchain() = Toolchain("13.0");
  request.set_memory_cap_bytes(kGiB);
  request.set_slots(1);
  request.set_sandbox("\x1b]0;pwned\x07");
  EXPECT_EQ(scheduler_.RegisterWorker(request, kStart).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.set_sandbox("fine");
  request.set_slots(1 << 20);
  EXPECT_EQ(scheduler_.RegisterWorker(request, kStart).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A worker that says it is an engine client could call any result an
// engine's cache hit, which is never cross-checked: a coordinator that
// cross-checks refuses it at registration, naming what to do.
TEST_F(SchedulerTrustTest, ACrossCheckingCoordinatorRefusesAnEngineClient) {
  SchedulerOptions options;
  options.cross_check_rate = 0.5;
  BuildScheduler scheduler(options, nullptr);
  v1::RegisterWorkerRequest request;
  request.set_name("claims-an-engine");
  *request.mutable_toolchain() = Toolchain("13.0");
  request.set_memory_cap_bytes(kGiB);
  request.set_slots(1);
  request.set_engine_client(true);
  absl::StatusOr<std::string> refused = scheduler.RegisterWorker(request, kStart);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("--cross-check-rate"));
  request.set_engine_client(false);
  EXPECT_TRUE(scheduler.RegisterWorker(request, kStart).ok());
}

// --max-output: what a report brings back is cut, with a marker, whatever
// the worker sends.
TEST_F(SchedulerTrustTest, OutputOfAReportIsCutAtTheLimit) {
  SchedulerOptions options;
  options.max_output_bytes = 100;
  std::vector<v1::BuildEvent> events;
  BuildScheduler scheduler(options, nullptr);
  v1::RegisterWorkerRequest request;
  request.set_name("w");
  *request.mutable_toolchain() = Toolchain("13.0");
  request.set_memory_cap_bytes(kGiB);
  request.set_slots(1);
  std::string worker = *scheduler.RegisterWorker(request, kStart);
  ASSERT_TRUE(scheduler
                  .SubmitBuild(
                      "b", Toolchain("13.0"), Units(1), {},
                      [&](const v1::BuildEvent& event) { events.push_back(event); }, kStart)
                  .ok());
  std::optional<v1::Task> task;
  ASSERT_TRUE(scheduler
                  .RequestLease(
                      worker, kStart, [&](std::optional<v1::Task> got) { task = got; }, kStart)
                  .ok());
  ASSERT_TRUE(task);
  v1::ReportResultRequest report;
  report.set_worker_id(worker);
  report.set_task_id(task->task_id());
  report.mutable_result()->set_outcome(v1::TASK_COMPLETED);
  report.mutable_result()->set_exit_code(1);
  report.mutable_result()->set_stderr_text(std::string(1 << 20, 'e'));
  report.mutable_result()->set_toolchain_digest(Toolchain("13.0").digest());
  ASSERT_TRUE(scheduler.ReportResult(report, kStart).ok());
  const v1::BuildEvent* finished = nullptr;
  for (const v1::BuildEvent& event : events) {
    if (event.has_unit_finished()) finished = &event;
  }
  ASSERT_NE(finished, nullptr);
  const std::string& text = finished->unit_finished().result().stderr_text();
  EXPECT_LT(text.size(), 300u);
  EXPECT_THAT(text, HasSubstr("cut this output at 100 B (--max-output)"));
}

TEST_F(SchedulerTest,
       CancelledBuildsTasksAreKilledThroughTheHeartbeatAndHoldTheirSlotUntilReported) {
  std::string worker = AddWorker("w1", "13.0", /*slots=*/2);
  absl::StatusOr<std::string> build = Submit(3);
  ASSERT_TRUE(build.ok()) << build.status();
  std::optional<v1::Task> first = LeaseNow(worker);
  std::optional<v1::Task> second = LeaseNow(worker);
  ASSERT_TRUE(first && second);
  v1::HeartbeatRequest beat;
  beat.set_worker_id(worker);
  beat.add_running_task_ids(first->task_id());
  beat.add_running_task_ids(second->task_id());
  v1::HeartbeatResponse response;
  ASSERT_TRUE(scheduler_.Heartbeat(beat, kStart, {}, &response).ok());
  EXPECT_EQ(response.cancel_task_ids_size(), 0);

  EXPECT_EQ(scheduler_.CancelBuild(*build), 2);
  EXPECT_EQ(scheduler_.Status(kStart).queued_units(), 0);
  // Until the worker confirms, its slots and memory stay taken.
  EXPECT_EQ(scheduler_.Status(kStart).running_units(), 2);
  response.Clear();
  ASSERT_TRUE(scheduler_.Heartbeat(beat, kStart + absl::Milliseconds(500), {}, &response).ok());
  EXPECT_THAT(std::vector<std::string>(response.cancel_task_ids().begin(),
                                       response.cancel_task_ids().end()),
              ::testing::UnorderedElementsAre(first->task_id(), second->task_id()));

  // One was killed; the other had finished just before: its result is kept
  // for the next build, not thrown away.
  v1::TaskResult cancelled;
  cancelled.set_outcome(v1::TASK_CANCELLED);
  ASSERT_TRUE(Report(worker, *first, cancelled).ok());
  v1::TaskResult done = Completed(0);
  auto* output = done.add_outputs();
  output->set_path("out.o");
  output->mutable_digest()->set_hash(std::string(64, 'a'));
  output->mutable_digest()->set_size_bytes(1);
  recorded_.clear();
  // The unit declares no outputs here, so a result with one is not whole.
  ASSERT_TRUE(Report(worker, *second, done).ok());
  EXPECT_TRUE(recorded_.empty());
  v1::ClusterStatus status = scheduler_.Status(kStart);
  EXPECT_EQ(status.running_units(), 0);
  EXPECT_EQ(status.workers(0).reserved_bytes(), 0);
  EXPECT_EQ(status.active_builds(), 0);
}

TEST_F(SchedulerTest, AResultThatFinishedDespiteTheCancelEntersTheCache) {
  std::string worker = AddWorker("w1");
  absl::StatusOr<std::string> build = Submit(1);
  ASSERT_TRUE(build.ok());
  std::optional<v1::Task> task = LeaseNow(worker);
  ASSERT_TRUE(task);
  scheduler_.CancelBuild(*build);
  recorded_.clear();
  ASSERT_TRUE(Report(worker, *task, Completed(0)).ok());
  EXPECT_THAT(recorded_, ::testing::ElementsAre("action0"));
  // A failed compile is not a result to keep.
  build = Submit(1);
  ASSERT_TRUE(build.ok());
  std::optional<v1::Task> again = LeaseNow(worker);
  ASSERT_TRUE(again);
  scheduler_.CancelBuild(*build);
  recorded_.clear();
  ASSERT_TRUE(Report(worker, *again, Completed(2)).ok());
  EXPECT_TRUE(recorded_.empty());
}

// For tests of a scheduler of their own: a worker of one slot and 8 GiB
// with toolchain 13.0, a lease answered at once, a compiled unit's report.
absl::StatusOr<std::string> RegisterOneSlotWorker(BuildScheduler& scheduler,
                                                  int64_t memory_cap = 8 * kGiB) {
  v1::RegisterWorkerRequest request;
  request.set_name("w1");
  *request.mutable_toolchain() = Toolchain("13.0");
  request.set_memory_cap_bytes(memory_cap);
  request.set_slots(1);
  return scheduler.RegisterWorker(request, kStart);
}

std::optional<v1::Task> LeaseAtOnce(BuildScheduler& scheduler, const std::string& worker) {
  std::optional<v1::Task> task;
  EXPECT_TRUE(
      scheduler
          .RequestLease(
              worker, kStart, [&](std::optional<v1::Task> t) { task = std::move(t); }, kStart)
          .ok());
  return task;
}

absl::Status ReportCompiled(BuildScheduler& scheduler, const std::string& worker,
                            const v1::Task& task, absl::Time now) {
  v1::ReportResultRequest report;
  report.set_worker_id(worker);
  report.set_task_id(task.task_id());
  *report.mutable_result() = Completed(0);
  report.mutable_result()->set_toolchain_digest(Toolchain("13.0").digest());
  return scheduler.ReportResult(report, now);
}

// Asks, from another thread, for a scheduler's status each time it is
// called: answered within a bounded wait only if the scheduler's lock is
// free, which it records.
class LockProbe {
 public:
  void Watch(BuildScheduler* scheduler) { scheduler_ = scheduler; }
  void operator()() {
    calls_.push_back(std::async(std::launch::async, [this] { scheduler_->Status(kStart); }));
    lock_was_free_.push_back(calls_.back().wait_for(std::chrono::seconds(5)) ==
                             std::future_status::ready);
  }
  // Once the scheduler's call returned: every asked status answered.
  const std::vector<bool>& LockWasFree() {
    for (std::future<void>& call : calls_) call.wait();
    return lock_was_free_;
  }

 private:
  BuildScheduler* scheduler_ = nullptr;
  std::vector<std::future<void>> calls_;  // kept: a future's end waits for its thread
  std::vector<bool> lock_was_free_;
};

// A scheduler with one one-slot worker and a build of one unit, leased.
struct OneLeasedUnit {
  std::string worker;
  v1::Task task;
};
absl::StatusOr<OneLeasedUnit> LeaseOneUnit(BuildScheduler& scheduler) {
  ASSIGN_OR_RETURN(std::string worker, RegisterOneSlotWorker(scheduler));
  RETURN_IF_ERROR(
      scheduler
          .SubmitBuild(
              "test", Toolchain("13.0"), Units(1), {}, [](const v1::BuildEvent&) {}, kStart)
          .status());
  std::optional<v1::Task> task = LeaseAtOnce(scheduler, worker);
  if (!task) return absl::InternalError("no lease");
  return OneLeasedUnit{worker, *task};
}

// The result cache writes a file and syncs it: that must not happen while
// the scheduler's lock is held, where every lease and heartbeat waits.
TEST(SchedulerLockTest, AResultIsRecordedAfterTheLockIsReleased) {
  std::unique_ptr<PeakHistory> history = *PeakHistory::Open("", {});
  LockProbe probe;
  BuildScheduler scheduler(
      SchedulerOptions{}, [&probe](const std::string&, const v1::TaskResult&) { probe(); },
      history.get());
  probe.Watch(&scheduler);
  absl::StatusOr<OneLeasedUnit> leased = LeaseOneUnit(scheduler);
  ASSERT_TRUE(leased.ok()) << leased.status();
  EXPECT_TRUE(ReportCompiled(scheduler, leased->worker, leased->task, kStart).ok());
  EXPECT_THAT(probe.LockWasFree(), ::testing::ElementsAre(true));
}

// What a client hears and when: a unit that compiled is announced as
// finished only once its result is in the result cache, so that a
// coordinator killed in between has told no client of a unit its restart
// has forgotten (the client would keep the unit as done, and the build
// resubmitted after the restart would compile it again).
struct AnnouncedUnits {
  std::mutex mu;
  std::vector<std::string> finished;  // unit names, as announced
  std::vector<std::string> recorded;  // action digests, as recorded
  int finished_when_recorded = -1;    // announcements made at the last record
};

TEST(SchedulerDurabilityTest, AUnitIsAnnouncedOnlyOnceItsResultIsRecorded) {
  std::unique_ptr<PeakHistory> history = *PeakHistory::Open("", {});
  AnnouncedUnits seen;
  BuildScheduler scheduler(
      SchedulerOptions{},
      [&seen](const std::string& digest, const v1::TaskResult&) {
        std::lock_guard<std::mutex> lock(seen.mu);
        seen.recorded.push_back(digest);
        seen.finished_when_recorded = static_cast<int>(seen.finished.size());
      },
      history.get());
  absl::StatusOr<std::string> worker = RegisterOneSlotWorker(scheduler);
  ASSERT_TRUE(worker.ok()) << worker.status();
  ASSERT_TRUE(scheduler
                  .SubmitBuild(
                      "test", Toolchain("13.0"), Units(1), {},
                      [&seen](const v1::BuildEvent& event) {
                        if (!event.has_unit_finished()) return;
                        std::lock_guard<std::mutex> lock(seen.mu);
                        seen.finished.push_back(event.unit_finished().unit_name());
                      },
                      kStart)
                  .ok());
  std::optional<v1::Task> task = LeaseAtOnce(scheduler, *worker);
  ASSERT_TRUE(task.has_value());
  ASSERT_TRUE(ReportCompiled(scheduler, *worker, *task, kStart).ok());
  ASSERT_EQ(seen.recorded.size(), 1u);
  EXPECT_EQ(seen.finished_when_recorded, 0) << "the unit was announced before it was recorded";
  EXPECT_EQ(seen.finished.size(), 1u) << "the unit was not announced after it was recorded";
}

// The worker is gone between the record and the announcement (the record
// is written outside the lock): the unit runs again elsewhere, and the
// result recorded stays, as the valid result of the worker that earned it.
TEST(SchedulerDurabilityTest, AWorkerLostWhileItsResultIsRecordedLeavesTheUnitQueued) {
  std::unique_ptr<PeakHistory> history = *PeakHistory::Open("", {});
  BuildScheduler* scheduler_seen = nullptr;
  std::string worker_id;
  int records = 0;
  BuildScheduler scheduler(
      SchedulerOptions{},
      [&](const std::string&, const v1::TaskResult&) {
        ++records;
        EXPECT_TRUE(scheduler_seen->DeregisterWorker(worker_id, kStart).ok());
      },
      history.get());
  scheduler_seen = &scheduler;
  absl::StatusOr<OneLeasedUnit> leased = LeaseOneUnit(scheduler);
  ASSERT_TRUE(leased.ok()) << leased.status();
  worker_id = leased->worker;
  ASSERT_TRUE(ReportCompiled(scheduler, leased->worker, leased->task, kStart).ok());
  EXPECT_EQ(records, 1);
  v1::ClusterStatus status = scheduler.Status(kStart);
  EXPECT_EQ(status.queued_units(), 1) << "the unit neither finished nor ran again";
  EXPECT_EQ(status.running_units(), 0);
}

// A unit split after memory kills: planning its parts writes their
// generated sources to the store, and each part is looked up in the result
// cache (a file read): both after the lock is released.
TEST(SchedulerLockTest, ASplitIsPlannedAndLookedUpAfterTheLockIsReleased) {
  LockProbe probe;
  BuildScheduler scheduler(SchedulerOptions{}, nullptr, nullptr,
                           [&probe](const std::string&) -> std::optional<v1::TaskResult> {
                             probe();
                             return std::nullopt;
                           });
  probe.Watch(&scheduler);
  absl::StatusOr<std::string> worker = RegisterOneSlotWorker(scheduler, 1 * kGiB);
  ASSERT_TRUE(worker.ok()) << worker.status();
  std::vector<PlannedUnit> units = Units(1, 200 * kMiB);
  units[0].unit.set_name("set_1of1");
  units[0].instantiations = 4;
  units[0].split = [&probe]() -> absl::StatusOr<std::vector<PlannedUnit>> {
    probe();
    return HalvesOfSet();
  };
  std::vector<v1::BuildEvent> events;
  ASSERT_TRUE(scheduler
                  .SubmitBuild(
                      "test", Toolchain("13.0"), std::move(units), {},
                      [&events](const v1::BuildEvent& event) { events.push_back(event); }, kStart)
                  .ok());
  // A larger reservation, then alone, then split: no worker is larger.
  for (int64_t peak : {300 * kMiB, 900 * kMiB, 950 * kMiB}) {
    std::optional<v1::Task> task = LeaseAtOnce(scheduler, *worker);
    ASSERT_TRUE(task);
    v1::ReportResultRequest report;
    report.set_worker_id(*worker);
    report.set_task_id(task->task_id());
    *report.mutable_result() = KilledForMemory(peak);
    ASSERT_TRUE(scheduler.ReportResult(report, kStart).ok());
  }
  int splits = 0;
  for (const v1::BuildEvent& event : events) {
    if (event.has_unit_split()) ++splits;
  }
  EXPECT_EQ(splits, 1);
  // The split itself, then one lookup per half.
  EXPECT_THAT(probe.LockWasFree(), ::testing::ElementsAre(true, true, true));
  // Both halves are queued and leased.
  EXPECT_TRUE(LeaseAtOnce(scheduler, *worker));
}

// A sink that calls `probe` for each line it is given.
class ProbingSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ProbingSink(std::function<void()> probe) : probe_(std::move(probe)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg&) override { probe_(); }
  void flush_() override {}

 private:
  std::function<void()> probe_;
};

// spdlog writes to stderr as it is called: not while the scheduler's lock is
// held.
TEST(SchedulerLockTest, LogLinesAreWrittenAfterTheLockIsReleased) {
  BuildScheduler scheduler(SchedulerOptions{}, nullptr);
  absl::StatusOr<OneLeasedUnit> leased = LeaseOneUnit(scheduler);
  ASSERT_TRUE(leased.ok()) << leased.status();
  LockProbe probe;
  probe.Watch(&scheduler);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "probe", std::make_shared<ProbingSink>([&probe] { probe(); })));
  // The worker stops: it is dropped and its unit re-queued, a line each;
  // then the build is cancelled, one more.
  EXPECT_TRUE(scheduler.DeregisterWorker(leased->worker, kStart).ok());
  scheduler.CancelBuild(scheduler.Status(kStart).builds(0).build_id());
  spdlog::set_default_logger(previous);
  EXPECT_GE(probe.LockWasFree().size(), 3u);
  EXPECT_THAT(probe.LockWasFree(), ::testing::Each(true));
}

// A peer that uses another's worker id is refused and the operator is told,
// in a line written after the lock is released, although the call returns
// its error from inside it.
TEST(SchedulerLockTest, ARefusedPeersWarningIsWrittenAfterTheLockIsReleased) {
  BuildScheduler scheduler(SchedulerOptions{}, nullptr);
  absl::StatusOr<std::string> worker = RegisterOneSlotWorker(scheduler);
  ASSERT_TRUE(worker.ok()) << worker.status();
  LockProbe probe;
  probe.Watch(&scheduler);
  auto previous = spdlog::default_logger();
  auto sink = std::make_shared<ProbingSink>([&probe] { probe(); });
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("probe", sink));
  const WorkerPeer intruder{"intruder", true};
  absl::Status lease = scheduler.RequestLease(
      *worker, kStart, [](std::optional<v1::Task>) {}, kStart, intruder);
  v1::HeartbeatResponse response;
  v1::HeartbeatRequest beat;
  beat.set_worker_id(*worker);
  absl::Status heartbeat = scheduler.Heartbeat(beat, kStart, intruder, &response);
  spdlog::set_default_logger(previous);
  EXPECT_EQ(lease.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(heartbeat.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(probe.LockWasFree(), ::testing::ElementsAre(true, true));
}

TEST(SchedulerClockTest, TheTimesKeptForPeopleComeFromItsClock) {
  absl::Time wall = kStart + absl::Hours(1);
  SchedulerOptions options;
  options.clock = [&wall] { return wall; };
  BuildScheduler scheduler(options, nullptr);
  absl::StatusOr<std::string> worker = RegisterOneSlotWorker(scheduler);
  ASSERT_TRUE(worker.ok());
  std::vector<v1::BuildEvent> events;
  absl::StatusOr<std::string> build = scheduler.SubmitBuild(
      "test", Toolchain("13.0"), Units(1), {},
      [&events](v1::BuildEvent event) { events.push_back(std::move(event)); }, kStart);
  ASSERT_TRUE(build.ok());
  std::optional<v1::Task> task = LeaseAtOnce(scheduler, *worker);
  ASSERT_TRUE(task);
  wall += absl::Seconds(5);
  ASSERT_TRUE(ReportCompiled(scheduler, *worker, *task, kStart + absl::Seconds(5)).ok());
  int64_t leased = 0, finished = 0;
  for (const v1::BuildEvent& event : events) {
    if (event.has_unit_started()) leased = event.unit_started().leased_unix_micros();
    if (event.has_unit_finished()) finished = event.unit_finished().finished_unix_micros();
  }
  EXPECT_EQ(leased, absl::ToUnixMicros(kStart + absl::Hours(1)));
  EXPECT_EQ(finished, absl::ToUnixMicros(kStart + absl::Hours(1) + absl::Seconds(5)));
  std::optional<v1::BuildRecord> record = scheduler.BuildRecordOf(*build);
  ASSERT_TRUE(record);
  EXPECT_EQ(record->started_unix_micros(), absl::ToUnixMicros(kStart + absl::Hours(1)));
  EXPECT_EQ(record->finished_unix_micros(),
            absl::ToUnixMicros(kStart + absl::Hours(1) + absl::Seconds(5)));
}

TEST_F(SchedulerTest, ACancelledTaskTheWorkerNeverStartedIsFreedAfterTwoHeartbeats) {
  std::string worker = AddWorker("w1");
  absl::StatusOr<std::string> build = Submit(1);
  ASSERT_TRUE(build.ok());
  std::optional<v1::Task> task = LeaseNow(worker);
  ASSERT_TRUE(task);
  scheduler_.CancelBuild(*build);
  v1::HeartbeatRequest beat;  // the lease answer never arrived
  beat.set_worker_id(worker);
  v1::HeartbeatResponse response;
  ASSERT_TRUE(scheduler_.Heartbeat(beat, kStart + absl::Milliseconds(100), {}, &response).ok());
  EXPECT_EQ(response.cancel_task_ids_size(), 1);
  EXPECT_EQ(scheduler_.Status(kStart).running_units(), 1);
  ASSERT_TRUE(scheduler_.Heartbeat(beat, kStart + absl::Seconds(3), {}, &response).ok());
  EXPECT_EQ(scheduler_.Status(kStart).running_units(), 0);
}

TEST_F(SchedulerTest, ADeregisteredWorkersUnitsRunElsewhereWithoutCountingAsLosses) {
  std::string stopping = AddWorker("w1");
  absl::StatusOr<std::string> build = Submit(1);
  ASSERT_TRUE(build.ok());
  // Stopped three times in a row (three attempts would fail a lost unit).
  for (int i = 0; i < 3; ++i) {
    std::string worker = i == 0 ? stopping : AddWorker(absl::StrCat("w", i + 2));
    std::optional<v1::Task> task = LeaseNow(worker);
    ASSERT_TRUE(task) << i;
    ASSERT_TRUE(scheduler_.DeregisterWorker(worker, kStart).ok());
    EXPECT_THAT(LastRequeueReason(), HasSubstr("stopped"));
  }
  EXPECT_EQ(scheduler_.Status(kStart).workers_size(), 0);
  std::string last = AddWorker("w9");
  std::optional<v1::Task> task = LeaseNow(last);
  ASSERT_TRUE(task);
  ASSERT_TRUE(Report(last, *task, Completed(0)).ok());
  ASSERT_FALSE(events_.empty());
  ASSERT_TRUE(events_.back().has_finished());
  EXPECT_TRUE(events_.back().finished().success());
  EXPECT_EQ(scheduler_.DeregisterWorker(stopping, kStart).code(), absl::StatusCode::kNotFound);
}

// A worker whose toolkit changed under it leaves to register again: its unit
// runs elsewhere, and the re-queue line says why rather than "stopped".
TEST_F(SchedulerTest, AWorkerLeavingForAChangedToolchainSaysSo) {
  std::string upgraded = AddWorker("upgraded");
  ASSERT_TRUE(Submit(1).ok());
  ASSERT_TRUE(LeaseNow(upgraded));
  ASSERT_TRUE(
      scheduler_
          .DeregisterWorker(upgraded, kStart, {}, BuildScheduler::Departure::kToolchainChanged)
          .ok());
  EXPECT_EQ(LastRequeueReason(),
            "worker upgraded left to register again with its changed toolchain");
  EXPECT_EQ(scheduler_.Status(kStart).queued_units(), 1);
}

}  // namespace
}  // namespace distcc_cuda::coordinator
