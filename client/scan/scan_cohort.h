// SPDX-License-Identifier: Apache-2.0
// The launcher calls a build tool starts together, reaching the coordinator
// together. Each launcher call is a build of its own, submitted when its
// include scan ends; a host compile scans in a fraction of a second, an
// nvcc one in seconds, so without this the short calls of a burst (ninja
// starting every job at once) took the free slots before the longest units
// had even been submitted, and the coordinator's longest-first queue never
// saw them side by side. A call ready to be submitted (scanned, its inputs
// hashed) waits while a call of its cohort (every call that came before
// it, or at most kCohortWindow after it) is still on its way there, for at
// most kMostGatherWait; then the cohort's units are queued together and
// ordered by their predicted walls. A call that comes alone, or after the
// others are ready, does not wait.
#pragma once

#include <cstdint>
#include <map>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/cancellation.h"

namespace distcc_cuda::client {

class ScanCohort {
 public:
  // Calls that come within this of each other were started together.
  static constexpr absl::Duration kCohortWindow = absl::Seconds(1);
  // The longest a ready call waits: slots may stand idle
  // meanwhile (about five nvcc dependency passes, one after another).
  static constexpr absl::Duration kMostGatherWait = absl::Seconds(10);
  // A call whose scan took less waits this long after its arrival anyway:
  // a burst's later calls (processes a build tool is still starting) must
  // have arrived to be waited for.
  static constexpr absl::Duration kSettle = absl::Milliseconds(100);

  // A call in the cohort, scanning from its arrival until it is ready to
  // be submitted (Ready, or its destruction: a call refused on the way).
  class Member {
   public:
    Member(ScanCohort& cohort, absl::Time arrived);
    ~Member();
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;

    // It is ready to be submitted; it no longer holds back others.
    void Ready();
    // Ready, then waits until kSettle after its arrival and no call
    // that came before it, or within kCohortWindow after it, is still
    // on its way, or `most` has passed, or `cancel` (may be null) is
    // cancelled. Returns how long it waited.
    absl::Duration AwaitCohort(absl::Duration most = kMostGatherWait,
                               const CancelToken* cancel = nullptr);

   private:
    ScanCohort& cohort_;
    const absl::Time arrived_;
    uint64_t id_;
    bool scanning_ = true;
  };

  // How many calls are on their way now (not yet ready; for tests).
  int Scanning() const;

 private:
  // Whether a call arrived by `latest` is still on its way.
  bool AnyScanningBy(absl::Time latest) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  // The calls on their way: their ids, by arrival.
  std::multimap<absl::Time, uint64_t> scanning_ ABSL_GUARDED_BY(mu_);
};

}  // namespace distcc_cuda::client
