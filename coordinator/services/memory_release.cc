// SPDX-License-Identifier: Apache-2.0
#include "coordinator/services/memory_release.h"

#include <malloc.h>

namespace distcc_cuda::coordinator {

void MemoryRelease::Note(absl::Time now) {
  absl::MutexLock lock(&mu_);
  noted_ = now;
}

bool MemoryRelease::ReleaseIfDue(absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    if (!noted_ || now - *noted_ < settle_) return false;
    noted_.reset();
  }
  // Outside the lock: a trim walks the heap (milliseconds for hundreds of
  // megabytes).
  malloc_trim(0);
  return true;
}

}  // namespace distcc_cuda::coordinator
