// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

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

std::vector<PlannedUnit> Units(int count) {
  std::vector<PlannedUnit> units;
  for (int i = 0; i < count; ++i) {
    PlannedUnit unit;
    unit.unit.set_name(absl::StrCat("unit", i));
    unit.action_digest = absl::StrCat("action", i);
    units.push_back(unit);
  }
  return units;
}

v1::TaskResult Completed(int exit_code) {
  v1::TaskResult result;
  result.set_outcome(v1::TASK_COMPLETED);
  result.set_exit_code(exit_code);
  return result;
}

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest()
      : scheduler_(SchedulerOptions{absl::Seconds(1), absl::Seconds(5), absl::Minutes(30), 3},
                   [this](const std::string& action, const v1::TaskResult&) {
                     recorded_.push_back(action);
                   }) {}

  std::string AddWorker(const std::string& name, const std::string& release = "13.0",
                        int slots = 1) {
    v1::RegisterWorkerRequest request;
    request.set_name(name);
    *request.mutable_toolchain() = Toolchain(release);
    request.set_memory_cap_bytes(int64_t{8} << 30);
    request.set_slots(slots);
    absl::StatusOr<std::string> id = scheduler_.RegisterWorker(request, kStart);
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  }

  absl::StatusOr<std::string> Submit(int units, std::map<int, v1::TaskResult> cached = {},
                                     const std::string& release = "13.0") {
    return scheduler_.SubmitBuild(
        "test", Toolchain(release), Units(units), std::move(cached),
        [this](const v1::BuildEvent& event) { events_.push_back(event); }, kStart);
  }

  // Asks for a lease that must be answered at once.
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
    return scheduler_.ReportResult(request, now);
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

TEST_F(SchedulerTest, RejectsWorkersWithoutSlotsOrCap) {
  v1::RegisterWorkerRequest request;
  request.set_name("bad");
  *request.mutable_toolchain() = Toolchain("13.0");
  request.set_slots(0);
  request.set_memory_cap_bytes(1);
  EXPECT_EQ(scheduler_.RegisterWorker(request, kStart).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace distcc_cuda::coordinator
