// SPDX-License-Identifier: Apache-2.0
// Gives the memory of large requests back to the system. glibc keeps freed
// heap for reuse: a coordinator that parsed a few hundred megabytes of a
// request it then refused kept them for ever (536 MB after a battery of such
// requests, 21 MB before). Handlers note a large request as it arrives and
// as its planning ends; the ticker trims the heap (malloc_trim) once
// `settle` has passed since the last note, when the request is freed.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace distcc_cuda::coordinator {

// A request whose message is larger than this is noted.
inline constexpr int64_t kLargeRequestBytes = 1 << 20;

class MemoryRelease {
 public:
  explicit MemoryRelease(absl::Duration settle = absl::Seconds(1)) : settle_(settle) {}

  // A large request was read, or its planning ended, at `now`.
  void Note(absl::Time now);
  // Trims the heap if a note is `settle` old; returns whether it did.
  bool ReleaseIfDue(absl::Time now);

 private:
  const absl::Duration settle_;
  absl::Mutex mu_;
  std::optional<absl::Time> noted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace distcc_cuda::coordinator
