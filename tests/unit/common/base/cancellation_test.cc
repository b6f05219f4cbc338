// SPDX-License-Identifier: Apache-2.0
#include "common/base/cancellation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace distcc_cuda {
namespace {

TEST(CancelWatchTest, ACancelRunsItOnceWhileTheWatchLives) {
  CancelToken token;
  std::atomic<int> runs{0};
  absl::Notification ran;
  {
    CancelWatch watch(&token, [&] {
      ++runs;
      ran.Notify();
    });
    token.Cancel("Ctrl-C");
    ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
    token.Cancel("again");
  }
  EXPECT_EQ(runs.load(), 1);
}

TEST(CancelWatchTest, AnAlreadyCancelledTokenRunsItAtOnce) {
  CancelToken token;
  token.Cancel("before");
  absl::Notification ran;
  CancelWatch watch(&token, [&] { ran.Notify(); });
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

TEST(CancelWatchTest, AWatchThatEndedNeverRuns) {
  CancelToken token;
  std::atomic<int> runs{0};
  {
    CancelWatch watch(&token, [&] { ++runs; });
  }
  token.Cancel("after the watch");
  EXPECT_EQ(runs.load(), 0);
  {
    CancelWatch watch(nullptr, [&] { ++runs; });
  }
  EXPECT_EQ(runs.load(), 0) << "a null token watches nothing";
}

// What the watch is for: a compile's stream, or a build's command, ends and
// the caller goes on at once. A watch that looked every 50 or 100 ms (as
// they once did) makes 50 of these take seconds.
TEST(CancelWatchTest, EndingTheWatchDoesNotWaitForAPoll) {
  CancelToken token;
  std::vector<absl::Duration> ends;
  for (int i = 0; i < 50; ++i) {
    std::optional<CancelWatch> watch;
    watch.emplace(&token, [] {});
    absl::SleepFor(absl::Microseconds(200));  // the watch is in its poll
    const absl::Time ending = absl::Now();
    watch.reset();
    ends.push_back(absl::Now() - ending);
  }
  // The median: a poll of 50 ms would make it about 25 ms; a loaded machine
  // delays some ends, not most.
  std::sort(ends.begin(), ends.end());
  EXPECT_LT(ends[ends.size() / 2], absl::Milliseconds(10));
}

}  // namespace
}  // namespace distcc_cuda
