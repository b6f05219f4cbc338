// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/parked_leases.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace distcc_cuda::coordinator {
namespace {

// Parks requests whose callbacks note, in order, "<request>:<task or none>".
class ParkedLeasesTest : public ::testing::Test {
 protected:
  void Park(const std::string& request, const std::string& worker, int deadline_s) {
    parked_.Park(worker, absl::FromUnixSeconds(deadline_s), [this, request](auto task) {
      answered_.push_back(request + ":" + (task ? task->task_id() : "none"));
    });
  }
  // Calls the answers, as the scheduler does after its lock.
  void Answer(std::vector<LeaseAnswer>& answers) {
    for (auto& [callback, task] : answers) callback(std::move(task));
    answers.clear();
  }
  static bool NoneGone(const std::string&) { return false; }

  ParkedLeases parked_;
  std::vector<std::string> answered_;
};

TEST_F(ParkedLeasesTest, UnitsGoToTheOldestRequestsOfWorkersThatMayTakeThem) {
  Park("a1", "a", 100);
  Park("b1", "b", 100);
  Park("a2", "a", 100);
  Park("c1", "c", 100);
  // Two units wait, neither fits worker b.
  int waiting = 2;
  std::vector<LeaseAnswer> answers;
  parked_.Serve(
      NoneGone,
      [&](const std::string& worker) -> std::optional<v1::Task> {
        if (worker == "b") return std::nullopt;
        v1::Task task;
        task.set_task_id("t" + std::to_string(waiting--));
        return task;
      },
      [&] { return waiting > 0; }, answers);
  Answer(answers);
  EXPECT_EQ(answered_, (std::vector<std::string>{"a1:t2", "a2:t1"}));
  EXPECT_EQ(parked_.size(), 2u) << "b1 and c1 still wait";
}

TEST_F(ParkedLeasesTest, AGoneWorkersRequestsAreAnsweredWithNothing) {
  Park("a1", "a", 100);
  Park("b1", "b", 100);
  std::vector<LeaseAnswer> answers;
  parked_.Serve([](const std::string& worker) { return worker == "a"; },
                [](const std::string&) -> std::optional<v1::Task> { return std::nullopt; },
                [] { return true; }, answers);
  Answer(answers);
  EXPECT_EQ(answered_, (std::vector<std::string>{"a1:none"}));
  EXPECT_EQ(parked_.size(), 1u);
}

TEST_F(ParkedLeasesTest, NothingIsOfferedWhileNoUnitWaits) {
  Park("a1", "a", 100);
  std::vector<LeaseAnswer> answers;
  parked_.Serve([](const std::string&) { return true; },
                [](const std::string&) -> std::optional<v1::Task> {
                  ADD_FAILURE() << "asked for a unit while none waits";
                  return std::nullopt;
                },
                [] { return false; }, answers);
  EXPECT_TRUE(answers.empty());
  EXPECT_EQ(parked_.size(), 1u);
}

TEST_F(ParkedLeasesTest, WaitsRunOutAtTheirDeadlineAndCancelledCallsAreAnswered) {
  Park("a1", "a", 10);
  Park("b1", "b", 20);
  Park("a2", "a", 30);
  Park("c1", "c", 30);
  std::vector<LeaseAnswer> answers;
  parked_.Expire(absl::FromUnixSeconds(20), NoneGone, answers);
  Answer(answers);
  EXPECT_EQ(answered_, (std::vector<std::string>{"a1:none", "b1:none"}));
  parked_.Expire(
      absl::FromUnixSeconds(21), [](const std::string& w) { return w == "c"; }, answers);
  Answer(answers);
  EXPECT_EQ(answered_.back(), "c1:none");
  parked_.Release("a", answers);
  Answer(answers);
  EXPECT_EQ(answered_.back(), "a2:none");
  EXPECT_EQ(parked_.size(), 0u);
}

}  // namespace
}  // namespace distcc_cuda::coordinator
