// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/admission.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace distcc_cuda::coordinator {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

struct AdmissionCase {
  const char* name;
  WorkerLoad worker;
  int64_t predicted_peak;
  bool admitted;
  int64_t reservation;
};

class AdmissionTest : public ::testing::TestWithParam<AdmissionCase> {};

TEST_P(AdmissionTest, ReservesAndAdmits) {
  const AdmissionCase& c = GetParam();
  int64_t reservation = ReservationOn(c.worker, c.predicted_peak);
  EXPECT_EQ(reservation, c.reservation);
  EXPECT_EQ(Admits(c.worker, reservation), c.admitted);
}

// An 8 GiB worker keeps 2% (163.8 MiB) as headroom: 8028.16 MiB usable.
const int64_t kUsable8 = 8 * kGiB - 8 * kGiB / 50;

INSTANTIATE_TEST_SUITE_P(
    Table, AdmissionTest,
    ::testing::Values(
        AdmissionCase{"FitsAnEmptyWorker", {8 * kGiB, 0, 4, 0}, 3 * kGiB, true, 3 * kGiB},
        AdmissionCase{"FitsBesideOthers", {8 * kGiB, 4 * kGiB, 4, 1}, 3 * kGiB, true, 3 * kGiB},
        AdmissionCase{
            "DoesNotFitBesideOthers", {8 * kGiB, 6 * kGiB, 4, 2}, 3 * kGiB, false, 3 * kGiB},
        AdmissionCase{"ExactlyUpToTheHeadroom",
                      {8 * kGiB, 5 * kGiB, 4, 1},
                      kUsable8 - 5 * kGiB,
                      true,
                      kUsable8 - 5 * kGiB},
        AdmissionCase{"OneByteIntoTheHeadroom",
                      {8 * kGiB, 5 * kGiB, 4, 1},
                      kUsable8 - 5 * kGiB + 1,
                      false,
                      kUsable8 - 5 * kGiB + 1},
        AdmissionCase{"NoFreeSlot", {8 * kGiB, 1 * kGiB, 2, 2}, 100 * kMiB, false, 100 * kMiB},
        AdmissionCase{
            "LargerThanTheCapTakesTheWholeWorker", {8 * kGiB, 0, 4, 0}, 20 * kGiB, true, kUsable8},
        AdmissionCase{"LargerThanTheCapWaitsForAnIdleWorker",
                      {8 * kGiB, 1 * kGiB, 4, 1},
                      20 * kGiB,
                      false,
                      kUsable8},
        AdmissionCase{"SmallCapHasAtLeast64MiBHeadroom",
                      {1 * kGiB, 0, 1, 0},
                      1 * kGiB - 64 * kMiB,
                      true,
                      1 * kGiB - 64 * kMiB}),
    [](const auto& info) { return std::string(info.param.name); });

struct LadderCase {
  const char* name;
  UnitNeeds unit;
  WorkerLoad worker;
  std::optional<int64_t> reservation;  // nullopt: it may not start there now
  bool memory_admission = true;
};

class AdmissionLadderTest : public ::testing::TestWithParam<LadderCase> {};

// What the memory retry ladder adds to a prediction changes where and with
// how much a unit may start.
TEST_P(AdmissionLadderTest, ReservesWhatTheLadderAsks) {
  const LadderCase& c = GetParam();
  EXPECT_EQ(Admission(c.unit, c.worker, c.memory_admission), c.reservation);
}

UnitNeeds Predicted(int64_t peak) { return UnitNeeds{peak, absl::Seconds(60)}; }
UnitNeeds WithFloor(int64_t peak, int64_t floor) {
  UnitNeeds unit = Predicted(peak);
  unit.reservation_floor = floor;
  return unit;
}
UnitNeeds Alone(int64_t peak) {
  UnitNeeds unit = Predicted(peak);
  unit.alone = true;
  return unit;
}
UnitNeeds CapAbove(int64_t peak, int64_t cap) {
  UnitNeeds unit = Predicted(peak);
  unit.needs_cap_above = cap;
  return unit;
}

INSTANTIATE_TEST_SUITE_P(
    Rungs, AdmissionLadderTest,
    ::testing::Values(
        LadderCase{"ThePrediction", Predicted(kGiB), {8 * kGiB, 0, 4, 0}, kGiB},
        LadderCase{"AFloorRaisesIt", WithFloor(kGiB, 3 * kGiB), {8 * kGiB, 0, 4, 0}, 3 * kGiB},
        LadderCase{"AFloorAboveWhatIsLeftWaits",
                   WithFloor(kGiB, 3 * kGiB),
                   {8 * kGiB, 6 * kGiB, 4, 1},
                   std::nullopt},
        LadderCase{"AloneTakesAnIdleWorkerWhole", Alone(kGiB), {8 * kGiB, 0, 4, 0}, kUsable8},
        LadderCase{
            "AloneWaitsWhileAnythingRuns", Alone(kGiB), {8 * kGiB, 100 * kMiB, 4, 1}, std::nullopt},
        LadderCase{"ALargerCapSkipsThisWorker",
                   CapAbove(6 * kGiB, 8 * kGiB),
                   {8 * kGiB, 0, 4, 0},
                   std::nullopt},
        LadderCase{"ALargerCapStartsOnOne",
                   CapAbove(10 * kGiB, 8 * kGiB),
                   {16 * kGiB, 0, 4, 0},
                   10 * kGiB},
        LadderCase{"WithoutMemoryAdmissionOnlySlotsCount",
                   Predicted(100 * kGiB),
                   {8 * kGiB, 7 * kGiB, 2, 1},
                   0,
                   false},
        LadderCase{"WithoutMemoryAdmissionAFullWorkerWaits",
                   Predicted(kMiB),
                   {8 * kGiB, 0, 2, 2},
                   std::nullopt,
                   false}),
    [](const auto& info) { return std::string(info.param.name); });

// An 8 GiB worker runs A (4 GiB, predicted to end in 10 s) and B (3 GiB, in
// 60 s); the head of the queue waits for memory there.
class BackfillTest : public ::testing::Test {
 protected:
  const absl::Time now_ = absl::FromUnixSeconds(1000000);
  const WorkerLoad worker_{8 * kGiB, 7 * kGiB, 4, 2};
  const std::vector<RunningUnit> running_ = {
      {now_ - absl::Seconds(50), absl::Seconds(110), 3 * kGiB},  // B
      {now_ - absl::Seconds(20), absl::Seconds(30), 4 * kGiB},   // A
  };
};

TEST_F(BackfillTest, TheHeadStartsWhenTheFirstEndsThatLeavesItRoom) {
  std::optional<BackfillWindow> small = WindowFor(Predicted(4 * kGiB), worker_, running_, now_);
  ASSERT_TRUE(small.has_value());
  EXPECT_EQ(small->start, now_ + absl::Seconds(10)) << "A's end frees enough";
  EXPECT_EQ(small->leftover_bytes, kUsable8 - 3 * kGiB - 4 * kGiB);
  std::optional<BackfillWindow> large = WindowFor(Predicted(5 * kGiB), worker_, running_, now_);
  ASSERT_TRUE(large.has_value());
  EXPECT_EQ(large->start, now_ + absl::Seconds(60)) << "only B's end frees enough";
  EXPECT_EQ(large->leftover_bytes, kUsable8 - 5 * kGiB);
  std::optional<BackfillWindow> whole = WindowFor(Predicted(50 * kGiB), worker_, running_, now_);
  ASSERT_TRUE(whole.has_value()) << "larger than the worker: the idle worker";
  EXPECT_EQ(whole->start, now_ + absl::Seconds(60));
  EXPECT_EQ(whole->leftover_bytes, 0);
}

TEST_F(BackfillTest, AUnitOverdueByItsPredictionFreesItsMemoryNow) {
  std::vector<RunningUnit> overdue = {{now_ - absl::Seconds(90), absl::Seconds(30), 4 * kGiB}};
  std::optional<BackfillWindow> window =
      WindowFor(Predicted(4 * kGiB), WorkerLoad{8 * kGiB, 4 * kGiB, 4, 1}, overdue, now_);
  ASSERT_TRUE(window.has_value());
  EXPECT_EQ(window->start, now_);
}

TEST_F(BackfillTest, NoWindowForAUnitThatWaitsForNoEndHere) {
  EXPECT_FALSE(WindowFor(Alone(kGiB), worker_, running_, now_).has_value());
  EXPECT_FALSE(WindowFor(CapAbove(kGiB, 8 * kGiB), worker_, running_, now_).has_value());
  EXPECT_FALSE(WindowFor(Predicted(kGiB), WorkerLoad{8 * kGiB, 0, 0, 0}, {}, now_).has_value());
}

TEST_F(BackfillTest, SmallerUnitsFillInOnlyIfTheyEndFirstOrLeaveTheHeadItsRoom) {
  const std::optional<BackfillWindow> window =
      WindowFor(Predicted(4 * kGiB), worker_, running_, now_);  // in 10 s, 0.84 GiB left
  ASSERT_TRUE(window.has_value());
  UnitNeeds quick{512 * kMiB, absl::Seconds(5)};
  UnitNeeds slow{512 * kMiB, absl::Seconds(30)};
  UnitNeeds slow_and_large{kGiB, absl::Seconds(30)};
  EXPECT_TRUE(BackfillAllows(window, quick, kGiB, now_)) << "ends before the head starts";
  EXPECT_TRUE(BackfillAllows(window, slow, 512 * kMiB, now_)) << "leaves the head its room";
  EXPECT_FALSE(BackfillAllows(window, slow_and_large, kGiB, now_))
      << "would still hold the head's memory when it could start";
  EXPECT_TRUE(BackfillAllows(std::nullopt, slow_and_large, kGiB, now_)) << "no head waits";
}

}  // namespace
}  // namespace distcc_cuda::coordinator
