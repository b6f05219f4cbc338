// SPDX-License-Identifier: Apache-2.0
#include "client/scan/scan_cohort.h"

#include <algorithm>

namespace distcc_cuda::client {

ScanCohort::Member::Member(ScanCohort& cohort, absl::Time arrived)
    : cohort_(cohort), arrived_(arrived) {
  absl::MutexLock lock(&cohort_.mu_);
  id_ = cohort_.next_id_++;
  cohort_.scanning_.emplace(arrived_, id_);
}

ScanCohort::Member::~Member() { Ready(); }

void ScanCohort::Member::Ready() {
  if (!scanning_) return;
  scanning_ = false;
  absl::MutexLock lock(&cohort_.mu_);
  auto [first, last] = cohort_.scanning_.equal_range(arrived_);
  for (auto it = first; it != last; ++it) {
    if (it->second == id_) {
      cohort_.scanning_.erase(it);
      break;
    }
  }
}

absl::Duration ScanCohort::Member::AwaitCohort(absl::Duration most, const CancelToken* cancel) {
  Ready();
  const absl::Time began = absl::Now();
  const absl::Time deadline = began + most;
  absl::SleepFor(std::min(arrived_ + kSettle, deadline) - began);
  struct Waiting {
    const ScanCohort* cohort;
    absl::Time latest;
    bool Done() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return !cohort->AnyScanningBy(latest); }
  } waiting{&cohort_, arrived_ + kCohortWindow};
  absl::MutexLock lock(&cohort_.mu_);
  // In slices, to see a cancelled build (Ctrl-C) within a moment.
  while (!waiting.Done() && absl::Now() < deadline && (cancel == nullptr || !cancel->cancelled())) {
    cohort_.mu_.AwaitWithDeadline(absl::Condition(&waiting, &Waiting::Done),
                                  std::min(deadline, absl::Now() + absl::Milliseconds(100)));
  }
  return absl::Now() - began;
}

int ScanCohort::Scanning() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(scanning_.size());
}

bool ScanCohort::AnyScanningBy(absl::Time latest) const {
  return !scanning_.empty() && scanning_.begin()->first <= latest;
}

}  // namespace distcc_cuda::client
