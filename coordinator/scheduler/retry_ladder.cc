// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/retry_ladder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "coordinator/scheduler/admission.h"

namespace distcc_cuda::coordinator {

RetryStep NextRetry(const MemoryKill& kill) {
  const int64_t usable = kill.worker_cap - AdmissionHeadroom(kill.worker_cap);
  const int64_t more = kill.peak_seen * 5 / 4;
  if (kill.kills == 1 && more < usable) return {RetryRung::kReserveMore, more, 0};
  if (!kill.alone) return {RetryRung::kRunAlone, 0, 0};
  const int64_t above = std::max(kill.worker_cap, kill.needs_cap_above);
  if (kill.largest_cap > above) return {RetryRung::kLargerWorker, 0, above};
  if (kill.splittable) return {RetryRung::kSplit, 0, 0};
  return {RetryRung::kGiveUp, 0, 0};
}

std::string DescribeRetry(const RetryStep& step, int64_t worker_cap) {
  switch (step.rung) {
    case RetryRung::kReserveMore:
      return absl::StrCat("retrying with ", FormatByteSize(step.reservation_floor), " reserved");
    case RetryRung::kRunAlone:
      return "retrying alone on a worker";
    case RetryRung::kLargerWorker:
      return absl::StrCat("retrying on a worker with a cap above ", FormatByteSize(worker_cap));
    case RetryRung::kSplit:
    case RetryRung::kGiveUp:
      break;
  }
  return "";
}

}  // namespace distcc_cuda::coordinator
