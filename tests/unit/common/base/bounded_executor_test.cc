// SPDX-License-Identifier: Apache-2.0
#include "common/base/bounded_executor.h"

#include <gtest/gtest.h>

#include <atomic>

#include "absl/synchronization/notification.h"

namespace distcc_cuda {
namespace {

TEST(BoundedExecutorTest, RunsEveryAcceptedTaskBeforeShutdownReturns) {
  std::atomic<int> ran{0};
  BoundedExecutor executor(2, 100);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(executor.Submit([&] { ++ran; }));
  executor.Shutdown();
  EXPECT_EQ(ran.load(), 50);
  EXPECT_FALSE(executor.Submit([&] { ++ran; })) << "no tasks after Shutdown";
}

TEST(BoundedExecutorTest, FullQueueRefusesInsteadOfGrowing) {
  absl::Notification release, started;
  std::atomic<int> ran{0};
  BoundedExecutor executor(1, 2);
  ASSERT_TRUE(executor.Submit([&] {
    started.Notify();
    release.WaitForNotification();
    ++ran;
  }));
  started.WaitForNotification();  // the only thread is busy; the queue is empty
  EXPECT_TRUE(executor.Submit([&] { ++ran; }));
  EXPECT_TRUE(executor.Submit([&] { ++ran; }));
  EXPECT_FALSE(executor.Submit([&] { ++ran; })) << "queue limit 2 reached";
  release.Notify();
  executor.Shutdown();
  EXPECT_EQ(ran.load(), 3);
}

}  // namespace
}  // namespace distcc_cuda
