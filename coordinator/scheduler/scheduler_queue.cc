// SPDX-License-Identifier: Apache-2.0
// The scheduler's queue: longest predicted first, merged as parts arrive,
// and reordered as the first runs of a family never built before teach the
// units still waiting (history relearning).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/scheduler/scheduler.h"
#include "spdlog/fmt/fmt.h"

namespace distcc_cuda::coordinator {

void BuildScheduler::WaitForHistory(const std::string& build_id, int unit_index) {
  if (history_ == nullptr) return;
  const PlannedUnit& planned = builds_.at(build_id).units[unit_index].planned;
  const PredictionBasis basis = planned.demand.basis;
  if (basis < PredictionBasis::kSameClosure) waiting_.Wait(planned.closure, {build_id, unit_index});
  if (basis < PredictionBasis::kSimilarUnits) waiting_.Wait(planned.family, {build_id, unit_index});
}

namespace {

// `prior` (a measured profile's prediction) scaled by how runs of its
// group here compared with theirs: its memory only ever up (the first runs
// to report are the smallest; a unit of another size may not shrink as
// they did), its time both ways.
UnitDemand ScaledPrior(const UnitDemand& prior, const HistoryWaits::PriorScale& scale) {
  return UnitDemand{
      static_cast<int64_t>(static_cast<double>(prior.peak_bytes) * std::max(1.0, scale.peak)),
      prior.wall * scale.wall,
      absl::StrCat("measured profile, scaled by ", scale.runs, " run", scale.runs == 1 ? "" : "s",
                   " here"),
      PredictionBasis::kPrior};
}

}  // namespace

void BuildScheduler::LearnFrom(const PlannedUnit& measured, int64_t peak_bytes, absl::Duration wall,
                               Deferred& deferred) {
  const std::pair<const std::string*, PredictionBasis> keys[] = {
      {&measured.closure, PredictionBasis::kSameClosure},
      {&measured.family, PredictionBasis::kSimilarUnits}};
  for (const auto& [key, level] : keys) {
    if (measured.prior.has_value() && measured.prior->peak_bytes > 0 &&
        measured.prior->wall > absl::ZeroDuration()) {
      waiting_.CompareWithPrior(
          *key, static_cast<double>(peak_bytes) / static_cast<double>(measured.prior->peak_bytes),
          absl::FDivDuration(wall, measured.prior->wall));
    }
    std::optional<HistoryWaits::Round> round = waiting_.Measured(*key);
    if (!round) continue;
    // The same for every unit of one instantiation: asked once.
    std::optional<UnitDemand> one = history_->PredictFromGroup(*key, level, 1);
    if (!one && round->scale == nullptr) continue;
    std::vector<HistoryWaits::UnitRef> still;
    for (const auto& [build_id, index] : *round->units) {
      auto build = builds_.find(build_id);
      if (build == builds_.end()) continue;
      UnitState& unit = build->second.units[index];
      PlannedUnit& planned = unit.planned;
      // Running or done units keep what they reserved; a unit predicted
      // from something closer to it (its own runs, its closure family's
      // once its family waits) keeps that. For the rest this group is what
      // Predict would find.
      if (unit.phase != UnitPhase::kQueued || unit.split || planned.demand.basis > level) continue;
      const absl::Duration before = planned.demand.wall;
      if (planned.prior.has_value() && round->scale != nullptr) {
        // Its own profile, as runs of its kind here bear it out: units of
        // one closure differ in size (flash-attention's head dimensions).
        planned.demand = ScaledPrior(*planned.prior, *round->scale);
      } else if (!one || (planned.prior.has_value() && level == PredictionBasis::kSimilarUnits)) {
        // Nothing measured, or only its folder's other kinds, which its
        // own kind's profile knows better (PeakHistory::Predict).
        continue;
      } else {
        planned.demand = planned.instantiations <= 1
                             ? *one
                             : *history_->PredictFromGroup(*key, level, planned.instantiations);
        if (level == PredictionBasis::kSimilarUnits) {
          planned.demand = history_->AtLeastDefaultForOtherClosure(
              planned.demand, planned.closure, planned.parallel, planned.instantiations);
        }
      }
      // A unit moves when its predicted time changed by more than a second
      // and a fifth: the order is coarse, and moving costs a pass over the queue.
      const absl::Duration change = absl::AbsDuration(planned.demand.wall - before);
      if (change > std::max(absl::Seconds(1), before / 5) && !unit.moving) {
        unit.moving = true;
        moving_.emplace_back(build_id, index);
      }
      still.emplace_back(build_id, index);
    }
    const int runs = round->runs;
    if (!still.empty()) {
      deferred.Info(fmt::format("{} queued units predicted again from {} measured run{} of {} {}",
                                still.size(), runs, runs == 1 ? "" : "s",
                                level == PredictionBasis::kSameClosure
                                    ? "units with the same headers as"
                                    : "units similar to",
                                measured.unit.name()));
    }
    waiting_.Keep(*key, std::move(still), runs);
  }
}

void BuildScheduler::PlaceMovedUnits() {
  if (moving_.empty()) return;
  // Only what is in the queue moves (a queued unit is there unless its
  // build is being taken out of it).
  queue_.Reorder(
      [this](const QueuedUnit& unit) { return builds_.at(unit.first).units[unit.second].moving; });
  for (const auto& [build_id, index] : moving_) {
    if (auto build = builds_.find(build_id); build != builds_.end()) {
      build->second.units[index].moving = false;
    }
  }
  moving_.clear();
}

void BuildScheduler::Enqueue(const std::string& build_id, const std::vector<int>& units) {
  std::vector<std::pair<std::string, int>> fresh;
  const absl::Time now = Now();
  std::vector<UnitState>& held = builds_.at(build_id).units;
  for (int index : units) {
    held[index].queued_at = now;
    fresh.emplace_back(build_id, index);
    WaitForHistory(build_id, index);
  }
  queue_.Merge(std::move(fresh));
}

}  // namespace distcc_cuda::coordinator
