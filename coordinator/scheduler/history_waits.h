// SPDX-License-Identifier: Apache-2.0
// Queued units waiting for the first measured runs of a group they were
// predicted without (a family never built before, or a closure family whose
// family alone was known), so that the scheduler predicts them again from
// those runs: on the group's 1st, 2nd, 4th, ... run, up to kRelearnRuns,
// after which the group's figures have settled. Not thread-safe: the
// scheduler holds it under its lock.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace distcc_cuda::coordinator {

class HistoryWaits {
 public:
  static constexpr int kRelearnRuns = 16;
  using UnitRef = std::pair<std::string, int>;  // build id, unit index

  // Notes `unit` as waiting for runs of the group `key` ("" is no group).
  void Wait(const std::string& key, UnitRef unit);
  // Forgets the units of `build_id` (it ended or was cancelled).
  void Forget(const std::string& build_id);

  // How the group's runs compared with what their measured profiles
  // (UnitPriors) predicted: the largest ratio of peaks (memory errs on the
  // safe side) and the mean ratio of wall times.
  struct PriorScale {
    double peak = 0;
    double wall = 0;
    int runs = 0;
  };
  // A run of the group `key` whose profile predicted `prior_peak` and
  // `prior_wall` took `peak` and `wall`; before Measured. Nothing for a
  // group no unit waits for.
  void CompareWithPrior(const std::string& key, double peak_ratio, double wall_ratio);

  // A run of the group `key` was measured. When it is one to learn from:
  // the units waiting for the group (valid until the next call), how many
  // of its runs were measured and how they compared with their profiles
  // (null: none had one); else nullopt.
  struct Round {
    const std::vector<UnitRef>* units;
    int runs;
    const PriorScale* scale;
  };
  std::optional<Round> Measured(const std::string& key);
  // After a round of `key`: the units still waiting (those predicted again;
  // the others were running, done or predicted from closer). The group is
  // forgotten when none is left or it has had kRelearnRuns runs.
  void Keep(const std::string& key, std::vector<UnitRef> still, int runs);

  // How many groups have units waiting.
  size_t groups() const { return waiting_.size(); }

 private:
  struct Waiting {
    std::vector<UnitRef> units;
    int measured = 0;
    PriorScale scale;
  };
  std::map<std::string, Waiting> waiting_;
};

}  // namespace distcc_cuda::coordinator
