// SPDX-License-Identifier: Apache-2.0
#include "common/base/machine_slots.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"

namespace distcc_cuda {
namespace {

TEST(MachineSlotsTest, NoMoreAreHeldThanThereAreAndAFreedOneGoesToAWaiter) {
  MachineSlots slots(2);
  std::optional<MachineSlots::Held> first = slots.Acquire();
  std::optional<MachineSlots::Held> second = slots.Acquire();
  ASSERT_TRUE(first.has_value() && second.has_value());
  EXPECT_EQ(slots.in_use(), 2);
  std::atomic<bool> third_held{false};
  std::thread waiter([&] {
    std::optional<MachineSlots::Held> third = slots.Acquire();
    third_held = third.has_value();
  });
  absl::SleepFor(absl::Milliseconds(250));
  EXPECT_FALSE(third_held) << "a third slot was held while two of two were";
  first.reset();
  waiter.join();
  EXPECT_TRUE(third_held);
  EXPECT_EQ(slots.most_in_use(), 2);
  second.reset();
  EXPECT_EQ(slots.in_use(), 0);
}

TEST(MachineSlotsTest, AWaiterThatIsCancelledGivesUpWithoutASlot) {
  MachineSlots slots(1);
  std::optional<MachineSlots::Held> held = slots.Acquire();
  CancelToken cancel;
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(150));
    cancel.Cancel("stop");
  });
  EXPECT_FALSE(slots.Acquire(&cancel).has_value());
  canceller.join();
  EXPECT_EQ(slots.in_use(), 1);
  // A moved slot is released once.
  MachineSlots::Held moved = std::move(*held);
  held.reset();
  EXPECT_EQ(slots.in_use(), 1);
}

}  // namespace
}  // namespace distcc_cuda
