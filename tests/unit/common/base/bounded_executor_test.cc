// SPDX-License-Identifier: Apache-2.0
#include "common/base/bounded_executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

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

TEST(BoundedExecutorTest, RunOnOrHereRunsHereOnlyWhenTheExecutorTakesNoMore) {
  const std::thread::id here = std::this_thread::get_id();
  std::thread::id ran_on;
  auto note = [&ran_on] { ran_on = std::this_thread::get_id(); };
  RunOnOrHere(nullptr, note);
  EXPECT_EQ(ran_on, here) << "no executor";
  BoundedExecutor executor(1, 1);
  absl::Notification release, started;
  RunOnOrHere(&executor, [&] {
    started.Notify();
    release.WaitForNotification();
  });
  started.WaitForNotification();
  RunOnOrHere(&executor, note);  // queued
  std::thread::id queued_ran_on = ran_on;
  RunOnOrHere(&executor, [&] { queued_ran_on = std::this_thread::get_id(); });  // full: here
  EXPECT_EQ(queued_ran_on, here) << "a full executor: run here at once";
  release.Notify();
  executor.Shutdown();
  EXPECT_NE(ran_on, here) << "the queued task ran on the executor's thread";
  RunOnOrHere(&executor, note);
  EXPECT_EQ(ran_on, here) << "a shut down executor: run here";
}

}  // namespace
}  // namespace distcc_cuda
