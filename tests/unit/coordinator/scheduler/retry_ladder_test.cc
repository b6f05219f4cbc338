// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/retry_ladder.h"

#include <gtest/gtest.h>

#include <vector>

namespace distcc_cuda::coordinator {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

struct LadderCase {
  const char* name;
  MemoryKill kill;
  RetryStep expected;
  const char* told;  // what the client reads, "" for a split or a failure
};

class RetryLadderTest : public ::testing::TestWithParam<LadderCase> {};

TEST_P(RetryLadderTest, TakesTheNextRungTheFactsAllow) {
  const LadderCase& c = GetParam();
  const RetryStep step = NextRetry(c.kill);
  EXPECT_EQ(step.rung, c.expected.rung);
  EXPECT_EQ(step.reservation_floor, c.expected.reservation_floor);
  EXPECT_EQ(step.needs_cap_above, c.expected.needs_cap_above);
  EXPECT_EQ(DescribeRetry(step, c.kill.worker_cap), c.told);
}

// A 1 GiB worker keeps 64 MiB of headroom: 960 MiB usable.
INSTANTIATE_TEST_SUITE_P(
    Rungs, RetryLadderTest,
    ::testing::Values(LadderCase{"FirstKillReservesAQuarterAboveThePeak",
                                 {1, 300 * kMiB, 1 * kGiB, 4 * kGiB, false, 0, true},
                                 {RetryRung::kReserveMore, 375 * kMiB, 0},
                                 "retrying with 375 MiB reserved"},
                      LadderCase{"FirstKillWhoseQuarterMoreWouldNotFitRunsAlone",
                                 {1, 800 * kMiB, 1 * kGiB, 4 * kGiB, false, 0, true},
                                 {RetryRung::kRunAlone, 0, 0},
                                 "retrying alone on a worker"},
                      LadderCase{"SecondKillRunsAloneEvenIfMoreWouldFit",
                                 {2, 300 * kMiB, 1 * kGiB, 1 * kGiB, false, 0, false},
                                 {RetryRung::kRunAlone, 0, 0},
                                 "retrying alone on a worker"},
                      LadderCase{"KilledAloneGoesToALargerWorker",
                                 {3, 950 * kMiB, 1 * kGiB, 4 * kGiB, true, 0, true},
                                 {RetryRung::kLargerWorker, 0, 1 * kGiB},
                                 "retrying on a worker with a cap above 1.0 GiB"},
                      LadderCase{"KilledOnTheLargerWorkerGoesToALargerOneStill",
                                 {4, 3900 * kMiB, 4 * kGiB, 8 * kGiB, true, 1 * kGiB, true},
                                 {RetryRung::kLargerWorker, 0, 4 * kGiB},
                                 "retrying on a worker with a cap above 4.0 GiB"},
                      LadderCase{"KilledAloneOnTheLargestWorkerIsSplit",
                                 {4, 3900 * kMiB, 4 * kGiB, 4 * kGiB, true, 1 * kGiB, true},
                                 {RetryRung::kSplit, 0, 0},
                                 ""},
                      LadderCase{"KilledAloneOnTheLargestWorkerGivesUpIfItCannotSplit",
                                 {4, 3900 * kMiB, 4 * kGiB, 4 * kGiB, true, 1 * kGiB, false},
                                 {RetryRung::kGiveUp, 0, 0},
                                 ""},
                      LadderCase{"ALargerWorkerThatLeftIsNotWaitedFor",
                                 {3, 950 * kMiB, 1 * kGiB, 1 * kGiB, true, 0, false},
                                 {RetryRung::kGiveUp, 0, 0},
                                 ""}),
    [](const ::testing::TestParamInfo<LadderCase>& info) { return info.param.name; });

TEST(RetryLadderTest, AUnitClimbsEveryRungInOrder) {
  MemoryKill kill{0, 200 * kMiB, 1 * kGiB, 4 * kGiB, false, 0, true};
  std::vector<RetryRung> climbed;
  for (int i = 0; i < 6; ++i) {
    ++kill.kills;
    const RetryStep step = NextRetry(kill);
    climbed.push_back(step.rung);
    if (step.rung == RetryRung::kRunAlone) kill.alone = true;
    if (step.rung == RetryRung::kLargerWorker) {
      kill.needs_cap_above = step.needs_cap_above;
      kill.worker_cap = 4 * kGiB;  // it ran on the larger worker next
    }
    if (step.rung == RetryRung::kSplit || step.rung == RetryRung::kGiveUp) break;
  }
  EXPECT_EQ(climbed, (std::vector<RetryRung>{RetryRung::kReserveMore, RetryRung::kRunAlone,
                                             RetryRung::kLargerWorker, RetryRung::kSplit}));
}

}  // namespace
}  // namespace distcc_cuda::coordinator
