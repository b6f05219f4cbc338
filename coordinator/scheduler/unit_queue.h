// SPDX-License-Identifier: Apache-2.0
// The units waiting for a worker, in the order the scheduler offers them:
// re-queued units first, then the longest predicted wall time first (a
// long unit started last makes the build's tail), and among equal
// predictions, what was queued first. The queue knows a unit by its build
// and index only; its predicted wall comes from the scheduler (WallOf),
// looked up once per unit each time the queue is merged.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace distcc_cuda::coordinator {

// A queued unit: its build's id and its index in that build.
using QueuedUnit = std::pair<std::string, int>;

class UnitQueue {
 public:
  using WallOf = std::function<absl::Duration(const QueuedUnit&)>;
  using iterator = std::deque<QueuedUnit>::iterator;
  using const_iterator = std::deque<QueuedUnit>::const_iterator;

  explicit UnitQueue(WallOf wall_of) : wall_of_(std::move(wall_of)) {}

  // Adds `fresh` in its place by predicted wall; a unit arriving with the
  // same prediction as one queued goes behind it.
  void Merge(std::vector<QueuedUnit> fresh);
  // Puts a re-queued unit before all others: it has waited once already.
  void PushFront(QueuedUnit unit) { units_.push_front(std::move(unit)); }
  // Takes out every unit of `build_id`; returns their indexes, in order.
  std::vector<int> TakeBuild(const std::string& build_id);
  // Takes out the units `moved` names and merges them back by their
  // predicted walls now (which have changed: history relearning).
  void Reorder(const std::function<bool(const QueuedUnit&)>& moved);

  // In the order offered; erase() takes one out (the one leased).
  iterator begin() { return units_.begin(); }
  iterator end() { return units_.end(); }
  const_iterator begin() const { return units_.begin(); }
  const_iterator end() const { return units_.end(); }
  iterator erase(iterator unit) { return units_.erase(unit); }
  size_t size() const { return units_.size(); }
  bool empty() const { return units_.empty(); }

 private:
  const WallOf wall_of_;
  std::deque<QueuedUnit> units_;
};

}  // namespace distcc_cuda::coordinator
