// SPDX-License-Identifier: Apache-2.0
// The scheduler's book of builds: a build submitted whole or in parts, its
// units held compact, finished (cached or compiled) and cancelled, its end,
// and the records people read of it.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/nvcc/toolchain.h"
#include "coordinator/scheduler/ids.h"
#include "coordinator/scheduler/scheduler.h"
#include "spdlog/fmt/fmt.h"

namespace distcc_cuda::coordinator {

bool BuildScheduler::StartingUpLocked(absl::Time now) const {
  return workers_.empty() && options_.startup_grace > absl::ZeroDuration() &&
         now - created_ < options_.startup_grace;
}

absl::Status BuildScheduler::ToolchainServedLocked(const v1::ToolchainFingerprint& toolchain,
                                                   absl::Time now, int& eligible) const {
  eligible = 0;
  std::vector<std::string> others;
  for (const auto& [worker_id, worker] : workers_) {
    if (HasToolchain(worker.info, toolchain.digest())) {
      ++eligible;
      continue;
    }
    std::vector<std::string> its;
    for (const v1::ToolchainFingerprint* had : ToolchainsOf(worker.info)) {
      its.push_back(DescribeToolchain(*had));
    }
    others.push_back(absl::StrCat(worker.info.name(), ": ", absl::StrJoin(its, " and ")));
  }
  if (eligible > 0 || StartingUpLocked(now)) return absl::OkStatus();
  // Typed (TOOLCHAIN, the toolchain's digest): a client can tell it from
  // missing inputs, which an upload would help.
  const std::vector<std::string> subject = {absl::StrCat("toolchains/", toolchain.digest())};
  if (workers_.empty()) {
    return PreconditionError(
        "no worker is connected to the coordinator; start one with "
        "distcc-cuda-worker --coordinator HOST:PORT",
        kToolchainUnserved, subject);
  }
  return PreconditionError(
      absl::StrCat("no connected worker has the build's toolchain ", DescribeToolchain(toolchain),
                   "; connected workers have: ", absl::StrJoin(others, "; ")),
      kToolchainUnserved, subject);
}

absl::Status BuildScheduler::ToolchainServed(const v1::ToolchainFingerprint& toolchain,
                                             absl::Time now) const {
  LockedSection lock(this);
  int eligible = 0;
  return ToolchainServedLocked(toolchain, now, eligible);
}

absl::StatusOr<std::string> BuildScheduler::SubmitBuild(const std::string& build_name,
                                                        const v1::ToolchainFingerprint& toolchain,
                                                        std::vector<PlannedUnit> units,
                                                        std::map<int, v1::TaskResult> cached,
                                                        BuildEventSink sink, absl::Time now,
                                                        bool more_to_come) {
  const size_t count = units.size();
  const bool all_cached = !more_to_come && cached.size() == count;
  // Held, and named for the client, before the lock (see AddUnits).
  std::vector<UnitState> held = HoldUnits(std::move(units), cached);
  v1::BuildEvent accepted;
  for (const UnitState& unit : held) {
    accepted.mutable_accepted()->add_unit_names(unit.planned.unit.name());
  }
  Deferred deferred;
  std::string id;
  {
    LockedSection lock(this, &deferred);
    int eligible = 0;
    absl::Status served = ToolchainServedLocked(toolchain, now, eligible);
    if (!served.ok() && !all_cached) return served;
    const bool starting_up = StartingUpLocked(now);
    id = NewId('b', epoch_);
    BuildState& build = builds_[id];
    build.id = id;
    build.toolchain_digest = toolchain.digest();
    build.sink = std::move(sink);
    build.remaining = count;
    build.open = more_to_come;
    build.log.emplace(id, build_name, Now());
    if (eligible == 0 && starting_up) {
      build.stranded_since = now;
      build.stranded_reason = "the coordinator has just started and no worker had registered yet";
    }
    accepted.mutable_accepted()->set_build_id(id);
    accepted.mutable_accepted()->set_eligible_workers(eligible);
    if (build.open) {
      for (const UnitState& unit : held) build.names.insert(unit.planned.unit.name());
    }
    build.units = std::move(held);
    deferred.events.emplace_back(build.sink, std::move(accepted));
    LogFields fields{{"build", id}};
    deferred.Info(fmt::format("build {} ('{}'): {} units, {} cached, {} eligible workers{}", id,
                              build_name, build.units.size(), cached.size(), eligible,
                              build.open ? "; more units follow" : ""));
    if (build.units.empty() && !build.open) {
      v1::BuildEvent done;
      done.mutable_finished()->set_success(true);
      done.mutable_finished()->set_message("nothing to build");
      deferred.events.emplace_back(build.sink, std::move(done));
      KeepRecord(build, "succeeded");
      builds_.erase(id);
    } else {
      AdmitUnits(id, 0, std::move(cached), now, deferred);
    }
  }
  RunDeferred(deferred);
  return id;
}

absl::Status BuildScheduler::AddUnits(const std::string& build_id, std::vector<PlannedUnit> units,
                                      std::map<int, v1::TaskResult> cached,
                                      std::vector<std::string> notes, bool last, absl::Time now) {
  // Held before the lock: serializing 100,000 units took half a second
  // that every lease, heartbeat and status call waited for.
  const size_t count = units.size();
  std::vector<UnitState> held = HoldUnits(std::move(units), cached);
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    auto it = builds_.find(build_id);
    if (it == builds_.end()) {
      return absl::NotFoundError(
          absl::StrCat("build ", build_id,
                       " is not running (it ended, or was cancelled when its client went "
                       "away); submit it again"));
    }
    BuildState& build = it->second;
    if (!build.open) {
      return absl::FailedPreconditionError(
          absl::StrCat("build ", build_id,
                       " takes no more units: it was submitted whole, or its last part "
                       "was sent"));
    }
    std::set<std::string> batch;
    for (const UnitState& unit : held) {
      const std::string& name = unit.planned.unit.name();
      if (build.names.count(name) != 0 || !batch.insert(name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("unit name '", name, "' is in build ", build_id,
                         " already; every unit of a build needs a name of its own"));
      }
    }
    v1::BuildEvent added;
    for (UnitState& unit : held) {
      added.mutable_units_added()->add_unit_names(unit.planned.unit.name());
      build.names.insert(unit.planned.unit.name());
      build.units.push_back(std::move(unit));
    }
    for (std::string& note : notes) added.mutable_units_added()->add_notes(std::move(note));
    if (last) added.mutable_units_added()->set_last(true);
    added.mutable_units_added()->set_added_unix_micros(absl::ToUnixMicros(Now()));
    deferred.events.emplace_back(build.sink, std::move(added));
    const size_t first = build.units.size() - count;
    build.remaining += static_cast<int>(count);
    if (last) build.open = false;
    LogFields fields{{"build", build_id}};
    deferred.Info(fmt::format("build {}: {} units added, {} cached{}", build_id, count,
                              cached.size(), last ? "; its last part" : ""));
    if (count == 0) {
      EndBuildIfDone(build, deferred);
    } else {
      AdmitUnits(build_id, first, std::move(cached), now, deferred);
    }
  }
  RunDeferred(deferred);
  return absl::OkStatus();
}

void BuildScheduler::HoldSlotsForTheRest(const std::string& build_id, double share_to_come) {
  LockedSection lock(this);
  auto it = builds_.find(build_id);
  if (it != builds_.end() && it->second.open) {
    it->second.share_to_come = std::clamp(share_to_come, 0.0, 1.0);
  }
}

void BuildScheduler::AdmitUnits(const std::string& build_id, size_t first,
                                std::map<int, v1::TaskResult> cached, absl::Time now,
                                Deferred& deferred) {
  BuildState& build = builds_.at(build_id);
  std::vector<int> ready;
  for (size_t i = first; i < build.units.size(); ++i) {
    if (!cached.count(i - first)) ready.push_back(i);
  }
  // A build submitted whole (a launcher call is a build of one) starts a
  // grace; a build arriving in parts does not: it keeps its slots by
  // HoldSlotsForTheRest, a grace per part would leave slots idle each time
  // its last part was taken, and one for its first part made its longest
  // units start all at once (bench/scheduler.sh: fa96x5 cold 1.02-1.03 of
  // its bound with 8-9 memory kills, against 0.97 and none without).
  if (first == 0 && !build.open && !ready.empty() && queue_.empty() &&
      options_.arrival_grace > absl::ZeroDuration() && !in_grace_) {
    in_grace_ = true;
    offer_after_ = now + options_.arrival_grace;
  }
  Enqueue(build_id, ready);
  const std::string toolchain_digest = build.toolchain_digest;
  for (auto& [index, result] : cached) {
    // FinishUnit may erase the build after its last unit.
    auto found = builds_.find(build_id);
    if (found == builds_.end()) break;
    // Cached under an action digest that includes the toolchain.
    result.set_toolchain_digest(toolchain_digest);
    FinishUnit(found->second, first + index, result, true, deferred);
  }
  Dispatch(now, deferred);
}

void BuildScheduler::FinishUnit(BuildState& build, int unit_index, const v1::TaskResult& result,
                                bool cached, Deferred& deferred, bool cacheable) {
  UnitState& unit = build.units[unit_index];
  unit.phase = UnitPhase::kDone;
  bool ok = result.outcome() == v1::TASK_COMPLETED && result.exit_code() == 0;
  unit.failed = !ok;
  if (!ok) ++build.failed;
  if (cached) ++build.cached;
  cacheable = cacheable && unit.planned.cacheable;
  if (ok && !cached && cacheable && record_result_) {
    deferred.results.emplace_back(unit.planned.action_digest, result);
  }
  if (ok && !cached && cacheable && cross_check_ && options_.cross_check_rate > 0 &&
      absl::Bernoulli(random_, std::min(1.0, options_.cross_check_rate))) {
    CrossCheckCandidate candidate{unit.planned, build.toolchain_digest, result};
    candidate.unit.unit = WholeUnit(unit);
    candidate.unit.split = nullptr;
    candidate.unit.cacheable = false;
    candidate.unit.avoid_peers.insert(result.producer());
    deferred.cross_checks.push_back(std::move(candidate));
  }
  metrics_->UnitFinished(result, cached, unit.planned.demand.peak_bytes);
  if (build.log) {
    build.log->UnitEnded(unit_index, result, cached, !ok,
                         cached ? absl::InfinitePast() : unit.leased_at, Now(),
                         unit.planned.demand.peak_bytes, unit.attempts);
  }
  v1::BuildEvent event;
  auto* finished = event.mutable_unit_finished();
  finished->set_unit_name(unit.planned.unit.name());
  *finished->mutable_result() = result;
  finished->set_cached(cached);
  *finished->mutable_unit() = WholeUnit(unit);
  ForgetAllButWhatIsRead(unit);
  finished->set_predicted_peak_bytes(unit.planned.demand.peak_bytes);
  finished->set_prediction_source(unit.planned.demand.source);
  finished->set_finished_unix_micros(absl::ToUnixMicros(Now()));
  deferred.events.emplace_back(build.sink, std::move(event));
  --build.remaining;
  EndBuildIfDone(build, deferred);
}

bool BuildScheduler::EndBuildIfDone(BuildState& build, Deferred& deferred) {
  if (build.remaining > 0 || build.open) return false;
  v1::BuildEvent done;
  auto* summary = done.mutable_finished();
  summary->set_success(build.failed == 0);
  summary->set_units_total(build.units.size() - build.splits);
  summary->set_units_failed(build.failed);
  summary->set_units_cached(build.cached);
  for (const std::string& name : build.workers_used) summary->add_workers_used(name);
  summary->set_message(
      build.failed == 0
          ? "all units compiled"
          : absl::StrCat(build.failed, " of ", build.units.size() - build.splits, " units failed"));
  deferred.events.emplace_back(build.sink, std::move(done));
  metrics_->BuildFinished(build.failed == 0);
  KeepRecord(build, build.failed == 0 ? "succeeded" : "failed");
  LogFields fields{{"build", build.id}};
  deferred.Info(fmt::format("build {} finished: {} units, {} failed, {} cached", build.id,
                            build.units.size(), build.failed, build.cached));
  waiting_.Forget(build.id);
  builds_.erase(build.id);
  return true;
}

int BuildScheduler::CancelBuild(const std::string& build_id) {
  // The build's state goes after the lock: a build of 100,000 units takes
  // a while to free, and leases and status would wait for it.
  std::map<std::string, BuildState>::node_type ended;
  Deferred deferred;
  int running = 0;
  {
    LockedSection lock(this, &deferred);
    auto build = builds_.find(build_id);
    if (build == builds_.end()) return 0;
    for (auto& [task_id, task] : tasks_) {
      if (task.build_id != build_id || task.cancelled) continue;
      const PlannedUnit& planned = build->second.units[task.unit_index].planned;
      task.cancelled =
          TaskState::Cancelled{planned.action_digest, build->second.toolchain_digest,
                               std::vector<std::string>(planned.unit.output_paths().begin(),
                                                        planned.unit.output_paths().end())};
      ++running;
    }
    std::vector<int> queued = queue_.TakeBuild(build_id);
    LogFields fields{{"build", build_id}};
    deferred.Warn(
        fmt::format("build {} cancelled: its client went away or cancelled it; {} queued units "
                    "dropped, {} running units being stopped on their workers",
                    build_id, queued.size(), running));
    waiting_.Forget(build_id);
    KeepRecord(build->second, "cancelled");
    ended = builds_.extract(build);
  }
  RunDeferred(deferred);
  return running;
}

void BuildScheduler::FailStrandedBuilds(absl::Time now, Deferred& deferred) {
  std::vector<std::string> stranded;
  for (const auto& [build_id, build] : builds_) {
    if (build.stranded_since && now - *build.stranded_since > 2 * options_.heartbeat_timeout) {
      stranded.push_back(build_id);
    }
  }
  for (const std::string& build_id : stranded) {
    std::vector<int> queued = queue_.TakeBuild(build_id);
    const BuildState& build = builds_.at(build_id);
    v1::TaskResult result;
    result.set_outcome(v1::TASK_FAILED_TO_START);
    result.set_error_message(absl::StrCat(
        "no connected worker has the build's toolchain any more (", build.stranded_reason,
        ", and none came back within ", absl::FormatDuration(2 * options_.heartbeat_timeout),
        "); start a worker with that nvcc and build again"));
    for (int index : queued) {
      // FinishUnit erases the build after its last unit.
      auto found = builds_.find(build_id);
      if (found == builds_.end()) break;
      FinishUnit(found->second, index, result, false, deferred);
    }
  }
}

v1::BuildRecord BuildScheduler::RecordOf(const BuildState& build, const std::string& outcome,
                                         bool with_spans) {
  return build.log->Record(outcome, static_cast<int>(build.units.size()) - build.splits, with_spans,
                           [&build](int index) { return build.units[index].planned.unit.name(); });
}

void BuildScheduler::KeepRecord(BuildState& build, const std::string& outcome) {
  if (!build.log) return;
  recent_builds_.Add(
      build.log->Finish(outcome, static_cast<int>(build.units.size()) - build.splits, Now(),
                        [&build](int index) { return build.units[index].planned.unit.name(); }));
}

}  // namespace distcc_cuda::coordinator
