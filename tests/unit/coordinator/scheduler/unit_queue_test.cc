// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/unit_queue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

namespace distcc_cuda::coordinator {
namespace {

using ::testing::ElementsAre;

// A queue over units whose predicted walls (in seconds) a test sets.
class UnitQueueTest : public ::testing::Test {
 protected:
  std::vector<QueuedUnit> Order() const { return {queue_.begin(), queue_.end()}; }
  std::map<QueuedUnit, int> seconds_;
  UnitQueue queue_{[this](const QueuedUnit& unit) { return absl::Seconds(seconds_.at(unit)); }};
};

TEST_F(UnitQueueTest, LongestFirstAndFirstComeAmongEquals) {
  seconds_ = {{{"a", 0}, 5}, {{"a", 1}, 9}, {{"a", 2}, 5}, {{"b", 0}, 5}, {{"b", 1}, 20}};
  queue_.Merge({{"a", 0}, {"a", 1}, {"a", 2}});
  // A later part's units go behind the queued ones of equal prediction.
  queue_.Merge({{"b", 0}, {"b", 1}});
  EXPECT_THAT(Order(), ElementsAre(QueuedUnit{"b", 1}, QueuedUnit{"a", 1}, QueuedUnit{"a", 0},
                                   QueuedUnit{"a", 2}, QueuedUnit{"b", 0}));
  EXPECT_EQ(queue_.size(), 5u);
}

TEST_F(UnitQueueTest, ARequeuedUnitGoesFirstAndABuildIsTakenOutWhole) {
  seconds_ = {{{"a", 0}, 5}, {{"a", 1}, 9}, {{"b", 0}, 7}, {{"b", 1}, 1}};
  queue_.Merge({{"a", 0}, {"b", 0}, {"b", 1}});
  queue_.PushFront({"a", 1});
  EXPECT_THAT(Order(), ElementsAre(QueuedUnit{"a", 1}, QueuedUnit{"b", 0}, QueuedUnit{"a", 0},
                                   QueuedUnit{"b", 1}));
  EXPECT_THAT(queue_.TakeBuild("b"), ElementsAre(0, 1));
  EXPECT_THAT(Order(), ElementsAre(QueuedUnit{"a", 1}, QueuedUnit{"a", 0}));
  EXPECT_TRUE(queue_.TakeBuild("gone").empty());
}

// History relearning: units whose prediction changed move to their new
// place; the others keep theirs.
TEST_F(UnitQueueTest, ReorderMovesOnlyTheUnitsWhosePredictionChanged) {
  seconds_ = {{{"a", 0}, 2}, {{"a", 1}, 2}, {{"a", 2}, 8}, {{"a", 3}, 4}};
  queue_.Merge({{"a", 0}, {"a", 1}, {"a", 2}, {"a", 3}});
  EXPECT_THAT(Order(), ElementsAre(QueuedUnit{"a", 2}, QueuedUnit{"a", 3}, QueuedUnit{"a", 0},
                                   QueuedUnit{"a", 1}));
  seconds_[{"a", 1}] = 30;
  seconds_[{"a", 2}] = 1;
  queue_.Reorder([](const QueuedUnit& unit) { return unit.second == 1 || unit.second == 2; });
  EXPECT_THAT(Order(), ElementsAre(QueuedUnit{"a", 1}, QueuedUnit{"a", 3}, QueuedUnit{"a", 0},
                                   QueuedUnit{"a", 2}));
}

TEST_F(UnitQueueTest, ErasingTheLeasedUnitKeepsTheRestInOrder) {
  seconds_ = {{{"a", 0}, 3}, {{"a", 1}, 2}, {{"a", 2}, 1}};
  queue_.Merge({{"a", 0}, {"a", 1}, {"a", 2}});
  auto second = std::next(queue_.begin());
  queue_.erase(second);
  EXPECT_THAT(Order(), ElementsAre(QueuedUnit{"a", 0}, QueuedUnit{"a", 2}));
  EXPECT_FALSE(queue_.empty());
}

}  // namespace
}  // namespace distcc_cuda::coordinator
