// SPDX-License-Identifier: Apache-2.0
// SchedulerOptions::arrival_grace: units that reach an empty queue wait a
// moment before the first is offered, so that units submitted together
// (a launcher session's burst) start longest first.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/scheduler/scheduler.h"

namespace distcc_cuda::coordinator {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);
constexpr int64_t kMiB = int64_t{1} << 20;

v1::ToolchainFingerprint Toolchain() {
  v1::ToolchainFingerprint toolchain;
  toolchain.set_nvcc_release("13.0");
  toolchain.set_digest("digest-13.0");
  return toolchain;
}

// A unit named `name`, predicted to take `wall`.
PlannedUnit UnitNamed(const std::string& name, absl::Duration wall) {
  PlannedUnit unit;
  unit.unit.set_name(name);
  unit.action_digest = "action-" + name;
  unit.identity = "identity-" + name;
  unit.family = "family";
  unit.demand.peak_bytes = 100 * kMiB;
  unit.demand.wall = wall;
  unit.demand.source = "default";
  return unit;
}

class ArrivalGraceTest : public ::testing::Test {
 protected:
  void Start(absl::Duration grace, absl::Time now = kStart) {
    SchedulerOptions options;
    options.arrival_grace = grace;
    scheduler_.emplace(options, nullptr);
    v1::RegisterWorkerRequest request;
    request.set_name("w");
    *request.mutable_toolchain() = Toolchain();
    request.set_memory_cap_bytes(8 * 1024 * kMiB);
    request.set_slots(2);
    absl::StatusOr<std::string> id = scheduler_->RegisterWorker(request, now);
    ASSERT_TRUE(id.ok()) << id.status();
    worker_ = *id;
  }

  // A build of one unit named `name`, predicted to take `wall`.
  void Submit(const std::string& name, absl::Duration wall, absl::Time now) {
    ASSERT_TRUE(
        scheduler_
            ->SubmitBuild(
                name, Toolchain(), {UnitNamed(name, wall)}, {}, [](const v1::BuildEvent&) {}, now)
            .ok());
  }

  // The worker asks for work at `now` and waits up to a minute.
  void AskForWork(absl::Time now) {
    leased_.reset();
    ASSERT_TRUE(scheduler_
                    ->RequestLease(
                        worker_, now + absl::Minutes(1),
                        [this](std::optional<v1::Task> task) {
                          leased_ = task ? task->unit().name() : "nothing";
                        },
                        now)
                    .ok());
  }

  std::optional<BuildScheduler> scheduler_;
  std::string worker_;
  std::optional<std::string> leased_;  // the unit its request got, once answered
};

TEST_F(ArrivalGraceTest, UnitsArrivingTogetherStartLongestFirst) {
  Start(absl::Seconds(1));
  AskForWork(kStart);
  Submit("short", absl::Seconds(10), kStart);
  EXPECT_FALSE(leased_) << "offered during the grace";
  Submit("long", absl::Seconds(100), kStart + absl::Milliseconds(500));
  scheduler_->Tick(kStart + absl::Milliseconds(900));
  EXPECT_FALSE(leased_) << "offered during the grace";
  scheduler_->Tick(kStart + absl::Seconds(1));
  EXPECT_EQ(leased_, "long");
}

TEST_F(ArrivalGraceTest, WithoutAGraceTheFirstToArriveStartsFirst) {
  Start(absl::ZeroDuration());
  AskForWork(kStart);
  Submit("short", absl::Seconds(10), kStart);
  EXPECT_EQ(leased_, "short");
}

// What arrives during a grace does not extend it (a steady stream of
// arrivals would hold every unit back), and a worker that asks during it
// waits for its end too.
TEST_F(ArrivalGraceTest, AGraceIsNotExtendedByWhatArrivesDuringIt) {
  Start(absl::Seconds(1));
  Submit("first", absl::Seconds(10), kStart);
  Submit("later", absl::Seconds(20), kStart + absl::Milliseconds(900));
  AskForWork(kStart + absl::Milliseconds(950));
  EXPECT_FALSE(leased_) << "offered during the grace";
  scheduler_->Tick(kStart + absl::Seconds(1));
  EXPECT_EQ(leased_, "later");
}

// A build arriving in parts starts no grace: it keeps its slots by
// HoldSlotsForTheRest, and a grace made its longest units start all at
// once (more memory kills in bench/scheduler.sh's fa96x5).
TEST_F(ArrivalGraceTest, ABuildArrivingInPartsStartsNoGrace) {
  Start(absl::Seconds(1));
  absl::StatusOr<std::string> build = scheduler_->SubmitBuild(
      "parts", Toolchain(), {}, {}, [](const v1::BuildEvent&) {}, kStart,
      /*more_to_come=*/true);
  ASSERT_TRUE(build.ok()) << build.status();
  auto part = [](const std::string& name) {
    return std::vector<PlannedUnit>{UnitNamed(name, absl::Seconds(10))};
  };
  AskForWork(kStart);
  ASSERT_TRUE(scheduler_->AddUnits(*build, part("first"), {}, {}, false, kStart).ok());
  EXPECT_EQ(leased_, "first") << "a part waited for a grace";
  ASSERT_TRUE(scheduler_->AddUnits(*build, part("second"), {}, {}, true, kStart).ok());
  AskForWork(kStart);
  EXPECT_EQ(leased_, "second") << "a part waited for a grace";
}

// The coordinator's timer offers the units held back as the grace ends,
// not at the next tick.
TEST_F(ArrivalGraceTest, TheTimerOffersWhenTheGraceEnds) {
  const absl::Time now = absl::Now();
  Start(absl::Milliseconds(100), now);
  AskForWork(now);
  Submit("unit", absl::Seconds(10), now);
  EXPECT_FALSE(leased_);
  scheduler_->OfferAfterGrace(absl::Seconds(30));
  EXPECT_EQ(leased_, "unit");
  EXPECT_GE(absl::Now(), now + absl::Milliseconds(100));
}

}  // namespace
}  // namespace distcc_cuda::coordinator
