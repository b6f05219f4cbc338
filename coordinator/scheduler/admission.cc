// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/admission.h"

#include <algorithm>
#include <utility>

namespace distcc_cuda::coordinator {

int64_t AdmissionHeadroom(int64_t cap_bytes) {
  return std::max<int64_t>(cap_bytes / 50, int64_t{64} << 20);
}

int64_t ReservationOn(const WorkerLoad& worker, int64_t peak_bytes) {
  int64_t usable = std::max<int64_t>(0, worker.cap_bytes - AdmissionHeadroom(worker.cap_bytes));
  return std::min(peak_bytes, usable);
}

bool Admits(const WorkerLoad& worker, int64_t reservation) {
  if (worker.running >= worker.slots) return false;
  int64_t usable = worker.cap_bytes - AdmissionHeadroom(worker.cap_bytes);
  return worker.reserved_bytes + reservation <= usable;
}

std::optional<int64_t> Admission(const UnitNeeds& unit, const WorkerLoad& load,
                                 bool memory_admission) {
  if (!memory_admission) {
    return load.running < load.slots ? std::optional<int64_t>(0) : std::nullopt;
  }
  if (unit.needs_cap_above > 0 && load.cap_bytes <= unit.needs_cap_above) return std::nullopt;
  if (unit.alone) {
    // The whole worker, and only when nothing else runs there.
    if (load.running > 0) return std::nullopt;
    return ReservationOn(load, load.cap_bytes);
  }
  int64_t reservation = ReservationOn(load, std::max(unit.peak_bytes, unit.reservation_floor));
  if (!Admits(load, reservation)) return std::nullopt;
  return reservation;
}

std::optional<BackfillWindow> WindowFor(const UnitNeeds& head, const WorkerLoad& load,
                                        std::vector<RunningUnit> running, absl::Time now) {
  if (head.alone || (head.needs_cap_above > 0 && load.cap_bytes <= head.needs_cap_above)) {
    return std::nullopt;
  }
  const int64_t need = ReservationOn(load, std::max(head.peak_bytes, head.reservation_floor));
  const int64_t usable = load.cap_bytes - AdmissionHeadroom(load.cap_bytes);
  // The running units in the order their predicted ends free their memory.
  std::vector<std::pair<absl::Time, int64_t>> ends;
  for (const RunningUnit& unit : running) {
    ends.emplace_back(std::max(now, unit.leased_at + unit.wall), unit.reserved_bytes);
  }
  std::sort(ends.begin(), ends.end());
  int64_t reserved = load.reserved_bytes;
  for (const auto& [end, bytes] : ends) {
    reserved -= bytes;
    if (usable - reserved >= need) return BackfillWindow{end, usable - reserved - need};
  }
  return std::nullopt;
}

bool BackfillAllows(const std::optional<BackfillWindow>& window, const UnitNeeds& unit,
                    int64_t reservation, absl::Time now) {
  return !window || now + unit.wall <= window->start || reservation <= window->leftover_bytes;
}

}  // namespace distcc_cuda::coordinator
