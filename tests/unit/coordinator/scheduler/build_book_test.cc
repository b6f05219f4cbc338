// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/build_book.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace distcc_cuda::coordinator {
namespace {

PlannedUnit Planned(const std::string& name) {
  PlannedUnit planned;
  planned.unit.set_name(name);
  planned.unit.add_arguments("-gencode");
  planned.unit.add_arguments("arch=compute_100,code=sm_100");
  planned.unit.add_arguments("-c");
  planned.unit.add_arguments(name + ".cu");
  planned.unit.add_output_paths(name + ".o");
  planned.unit.mutable_architecture_part()->set_of(name);
  planned.unit.mutable_architecture_part()->set_label("sm_100");
  planned.action_digest = "action-" + name;
  return planned;
}

TEST(BuildBookTest, AWaitingUnitIsHeldCompactAndGivenBackWhole) {
  const PlannedUnit planned = Planned("fwd");
  UnitState held = HoldUnit(planned, /*cached=*/false);
  // What the scheduler reads stays readable; the rest waits as bytes.
  EXPECT_EQ(held.planned.unit.name(), "fwd");
  EXPECT_EQ(held.planned.unit.output_paths(0), "fwd.o");
  EXPECT_EQ(held.planned.unit.architecture_part().label(), "sm_100");
  EXPECT_EQ(held.planned.unit.arguments_size(), 0);
  EXPECT_EQ(held.planned.action_digest, "action-fwd");
  EXPECT_FALSE(held.unit_bytes.empty());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(WholeUnit(held), planned.unit));
}

TEST(BuildBookTest, ACachedUnitFinishesAtOnceAndIsHeldWhole) {
  std::vector<UnitState> held =
      HoldUnits({Planned("a"), Planned("b")}, std::map<int, v1::TaskResult>{{1, {}}});
  ASSERT_EQ(held.size(), 2u);
  EXPECT_FALSE(held[0].unit_bytes.empty());
  EXPECT_TRUE(held[1].unit_bytes.empty());
  EXPECT_EQ(held[1].planned.unit.arguments_size(), 4) << "its whole unit goes in its event";
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(WholeUnit(held[1]), Planned("b").unit));
  EXPECT_EQ(held[0].phase, UnitPhase::kQueued);
}

TEST(BuildBookTest, AFinishedUnitKeepsOnlyWhatIsReadOfIt) {
  PlannedUnit planned = Planned("fwd");
  planned.split = [] { return std::vector<PlannedUnit>{}; };
  UnitState unit = HoldUnit(planned, /*cached=*/true);
  ForgetAllButWhatIsRead(unit);
  EXPECT_EQ(unit.planned.unit.name(), "fwd");
  EXPECT_EQ(unit.planned.unit.output_paths(0), "fwd.o");
  EXPECT_EQ(unit.planned.unit.arguments_size(), 0);
  EXPECT_TRUE(unit.unit_bytes.empty());
  EXPECT_FALSE(unit.planned.split) << "its split holds its build's plan";
}

}  // namespace
}  // namespace distcc_cuda::coordinator
