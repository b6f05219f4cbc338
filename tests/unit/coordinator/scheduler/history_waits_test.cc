// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/history_waits.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace distcc_cuda::coordinator {
namespace {

using UnitRef = HistoryWaits::UnitRef;

TEST(HistoryWaitsTest, ItsUnitsArePredictedAgainOnTheFirstSecondFourthRunsUpTo16) {
  HistoryWaits waits;
  waits.Wait("fwd", {"b1", 0});
  waits.Wait("fwd", {"b1", 1});
  std::vector<int> rounds;
  for (int run = 1; run <= 20; ++run) {
    std::optional<HistoryWaits::Round> round = waits.Measured("fwd");
    if (!round) continue;
    EXPECT_EQ(round->runs, run);
    EXPECT_EQ(*round->units, (std::vector<UnitRef>{{"b1", 0}, {"b1", 1}}));
    rounds.push_back(run);
    waits.Keep("fwd", *round->units, round->runs);
  }
  EXPECT_EQ(rounds, (std::vector<int>{1, 2, 4, 8, 16})) << "then its figures have settled";
  EXPECT_EQ(waits.groups(), 0u);
}

TEST(HistoryWaitsTest, OnlyTheUnitsStillPredictedFromLessKeepWaiting) {
  HistoryWaits waits;
  waits.Wait("fwd", {"b1", 0});
  waits.Wait("fwd", {"b1", 1});
  std::optional<HistoryWaits::Round> first = waits.Measured("fwd");
  ASSERT_TRUE(first.has_value());
  waits.Keep("fwd", {{"b1", 1}}, first->runs);  // unit 0 started meanwhile
  std::optional<HistoryWaits::Round> second = waits.Measured("fwd");
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(*second->units, (std::vector<UnitRef>{{"b1", 1}}));
  waits.Keep("fwd", {}, second->runs);
  EXPECT_EQ(waits.groups(), 0u) << "a group nobody waits for is forgotten";
  EXPECT_FALSE(waits.Measured("fwd").has_value());
}

TEST(HistoryWaitsTest, AnEndedBuildsUnitsWaitNoMore) {
  HistoryWaits waits;
  waits.Wait("fwd", {"b1", 0});
  waits.Wait("fwd", {"b2", 0});
  waits.Wait("bwd", {"b1", 3});
  waits.Forget("b1");
  EXPECT_EQ(waits.groups(), 1u) << "bwd had only b1's unit";
  std::optional<HistoryWaits::Round> round = waits.Measured("fwd");
  ASSERT_TRUE(round.has_value());
  EXPECT_EQ(*round->units, (std::vector<UnitRef>{{"b2", 0}}));
}

TEST(HistoryWaitsTest, NoGroupIsNoWait) {
  HistoryWaits waits;
  waits.Wait("", {"b1", 0});
  EXPECT_EQ(waits.groups(), 0u);
  EXPECT_FALSE(waits.Measured("").has_value());
  EXPECT_FALSE(waits.Measured("never-waited-for").has_value());
}

}  // namespace
}  // namespace distcc_cuda::coordinator
