// SPDX-License-Identifier: Apache-2.0
#include "client/scan/scan_cohort.h"

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <thread>

namespace distcc_cuda::client {
namespace {

constexpr absl::Duration kLong = absl::Seconds(30);

// A ready call waits while one that came with it is still on its way, and
// goes once that one is ready.
TEST(ScanCohortTest, AReadyCallWaitsForTheCallsThatCameWithIt) {
  ScanCohort cohort;
  const absl::Time now = absl::Now();
  ScanCohort::Member host(cohort, now);
  ScanCohort::Member kernel(cohort, now + absl::Milliseconds(300));
  std::atomic<bool> kernel_ready{false}, host_went{false};
  bool went_after_kernel = false;
  std::thread waiting([&] {
    host.AwaitCohort(kLong);
    went_after_kernel = kernel_ready.load();
    host_went = true;
  });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(host_went.load()) << "it went while the kernel was still scanning";
  kernel_ready = true;
  kernel.Ready();
  waiting.join();
  EXPECT_TRUE(went_after_kernel);
  EXPECT_EQ(cohort.Scanning(), 0);
}

// A call refused on its way (its Member destroyed) holds back no one.
TEST(ScanCohortTest, ACallRefusedOnItsWayHoldsBackNoOne) {
  ScanCohort cohort;
  const absl::Time now = absl::Now();
  ScanCohort::Member ready(cohort, now);
  std::optional<ScanCohort::Member> refused(std::in_place, cohort, now - absl::Seconds(5));
  std::atomic<bool> went{false};
  std::thread waiting([&] {
    ready.AwaitCohort(kLong);
    went = true;
  });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(went.load()) << "a call that came earlier is still on its way";
  refused.reset();
  waiting.join();
  EXPECT_EQ(cohort.Scanning(), 0);
}

// A call that came more than the window later is another burst (a build
// tool's next job): it holds back no one.
TEST(ScanCohortTest, ACallThatCameLaterThanTheWindowIsNotWaitedFor) {
  ScanCohort cohort;
  const absl::Time now = absl::Now();
  ScanCohort::Member first(cohort, now);
  ScanCohort::Member later(cohort, now + ScanCohort::kCohortWindow + absl::Milliseconds(1));
  const absl::Duration waited = first.AwaitCohort(kLong);
  EXPECT_LT(waited, kLong / 2);
  EXPECT_EQ(cohort.Scanning(), 1) << "the later call is still on its way";
}

// However long the others take, a ready call waits at most what it is
// given; and even alone, until kSettle after its arrival (a burst's later
// processes may not have arrived yet).
TEST(ScanCohortTest, AReadyCallWaitsAtMostWhatItIsGivenAndAtLeastTheSettle) {
  ScanCohort cohort;
  const absl::Time now = absl::Now();
  ScanCohort::Member ready(cohort, now);
  ScanCohort::Member stuck(cohort, now);
  EXPECT_GE(ready.AwaitCohort(absl::Milliseconds(200)), absl::Milliseconds(200));
  EXPECT_EQ(cohort.Scanning(), 1);

  ScanCohort alone_cohort;
  const absl::Time arrived = absl::Now();
  ScanCohort::Member alone(alone_cohort, arrived);
  alone.AwaitCohort(kLong);
  EXPECT_GE(absl::Now(), arrived + ScanCohort::kSettle);
}

// A build cancelled (Ctrl-C) while a call waits for its cohort ends the
// wait within a moment, not at its end.
TEST(ScanCohortTest, ACancelledBuildEndsTheWait) {
  ScanCohort cohort;
  const absl::Time now = absl::Now();
  ScanCohort::Member ready(cohort, now);
  ScanCohort::Member stuck(cohort, now);
  CancelToken cancel;
  std::thread cancelling([&] {
    absl::SleepFor(absl::Milliseconds(300));
    cancel.Cancel("interrupted");
  });
  const absl::Duration waited = ready.AwaitCohort(kLong, &cancel);
  cancelling.join();
  EXPECT_LT(waited, kLong / 2);
  EXPECT_EQ(cohort.Scanning(), 1);
}

}  // namespace
}  // namespace distcc_cuda::client
