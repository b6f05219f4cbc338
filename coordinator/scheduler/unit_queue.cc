// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/unit_queue.h"

#include <algorithm>

namespace distcc_cuda::coordinator {

void UnitQueue::Merge(std::vector<QueuedUnit> fresh) {
  // Each entry with its predicted wall, looked up once (a build's lookup
  // per comparison made sorting 100,000 units take a third of a second).
  using Keyed = std::pair<absl::Duration, QueuedUnit>;
  auto keyed = [this](QueuedUnit unit) {
    const absl::Duration wall = wall_of_(unit);
    return Keyed(wall, std::move(unit));
  };
  std::vector<Keyed> arriving;
  arriving.reserve(fresh.size());
  for (QueuedUnit& unit : fresh) arriving.push_back(keyed(std::move(unit)));
  std::vector<Keyed> queued;
  queued.reserve(units_.size());
  for (QueuedUnit& unit : units_) queued.push_back(keyed(std::move(unit)));
  auto longer = [](const Keyed& a, const Keyed& b) { return a.first > b.first; };
  // Longest first; among equal predictions, what came first stays first.
  std::stable_sort(arriving.begin(), arriving.end(), longer);
  std::deque<QueuedUnit> merged;
  auto next = queued.begin();
  for (Keyed& entry : arriving) {
    for (; next != queued.end() && !longer(entry, *next); ++next) {
      merged.push_back(std::move(next->second));
    }
    merged.push_back(std::move(entry.second));
  }
  for (; next != queued.end(); ++next) merged.push_back(std::move(next->second));
  units_ = std::move(merged);
}

std::vector<int> UnitQueue::TakeBuild(const std::string& build_id) {
  // One pass: erasing each from the middle of the queue was quadratic.
  std::vector<int> taken;
  std::deque<QueuedUnit> kept;
  for (QueuedUnit& unit : units_) {
    if (unit.first == build_id) {
      taken.push_back(unit.second);
    } else {
      kept.push_back(std::move(unit));
    }
  }
  units_ = std::move(kept);
  return taken;
}

void UnitQueue::Reorder(const std::function<bool(const QueuedUnit&)>& moved) {
  std::deque<QueuedUnit> kept;
  std::vector<QueuedUnit> moving;
  for (QueuedUnit& unit : units_) {
    if (moved(unit)) {
      moving.push_back(std::move(unit));
    } else {
      kept.push_back(std::move(unit));
    }
  }
  units_ = std::move(kept);
  Merge(std::move(moving));
}

}  // namespace distcc_cuda::coordinator
