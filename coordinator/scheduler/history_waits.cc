// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/history_waits.h"

#include <algorithm>
#include <iterator>

namespace distcc_cuda::coordinator {

void HistoryWaits::Wait(const std::string& key, UnitRef unit) {
  if (key.empty()) return;
  waiting_[key].units.push_back(std::move(unit));
}

void HistoryWaits::Forget(const std::string& build_id) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    std::vector<UnitRef>& units = it->second.units;
    units.erase(std::remove_if(units.begin(), units.end(),
                               [&](const UnitRef& unit) { return unit.first == build_id; }),
                units.end());
    it = units.empty() ? waiting_.erase(it) : std::next(it);
  }
}

std::optional<HistoryWaits::Round> HistoryWaits::Measured(const std::string& key) {
  auto waiting = waiting_.find(key);
  if (key.empty() || waiting == waiting_.end()) return std::nullopt;
  const int runs = ++waiting->second.measured;
  if ((runs & (runs - 1)) != 0) return std::nullopt;  // on the 1st, 2nd, 4th, ... run
  const PriorScale& scale = waiting->second.scale;
  return Round{&waiting->second.units, runs, scale.runs > 0 ? &scale : nullptr};
}

void HistoryWaits::CompareWithPrior(const std::string& key, double peak_ratio, double wall_ratio) {
  auto waiting = waiting_.find(key);
  if (key.empty() || waiting == waiting_.end()) return;
  PriorScale& scale = waiting->second.scale;
  scale.peak = std::max(scale.peak, peak_ratio);
  scale.wall = (scale.wall * scale.runs + wall_ratio) / (scale.runs + 1);
  ++scale.runs;
}

void HistoryWaits::Keep(const std::string& key, std::vector<UnitRef> still, int runs) {
  auto waiting = waiting_.find(key);
  if (waiting == waiting_.end()) return;
  // Later runs refine the quantile; after kRelearnRuns it has settled.
  if (still.empty() || runs >= kRelearnRuns) {
    waiting_.erase(waiting);
  } else {
    waiting->second.units = std::move(still);
  }
}

}  // namespace distcc_cuda::coordinator
