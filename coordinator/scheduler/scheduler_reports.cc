// SPDX-License-Identifier: Apache-2.0
// The scheduler's reports: a worker's result checked (its outputs, its
// toolchain, its measured peak kept within what it can have measured) and
// taken, refused, or answered with the memory retry ladder (retry_ladder.h)
// up to splitting the unit.
#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/store/digest.h"
#include "coordinator/scheduler/retry_ladder.h"
#include "coordinator/scheduler/scheduler.h"
#include "spdlog/fmt/fmt.h"

namespace distcc_cuda::coordinator {
namespace {

// The name a unit's result is shown under: its worker's own. A worker that
// hands units on to another engine (a client's --remote-executor) may say
// which of the engine's workers ran it; that shows after its own name
// ("engine/bot-a"), cut to 64 characters of [A-Za-z0-9._-], never instead.
std::string ShownWorkerName(const std::string& registered, const std::string& reported) {
  if (reported.empty() || reported == registered) return registered;
  std::string below = reported.substr(0, 64);
  for (char& c : below) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return absl::StrCat(registered, "/", below);
}

}  // namespace

absl::Status BuildScheduler::ReportResult(const v1::ReportResultRequest& request, absl::Time now,
                                          const WorkerPeer& peer) {
  std::optional<ResultToRecord> to_record;
  RETURN_IF_ERROR(TakeReport(request, now, peer, to_record));
  if (!to_record.has_value()) return absl::OkStatus();
  // A unit that compiled is announced only once its result is in the
  // result cache (two fsyncs, outside the lock): a coordinator killed in
  // between has then told no client of a unit that its restart forgets.
  record_result_(to_record->action_digest, to_record->result);
  AnnounceRecorded(request.worker_id(), request.task_id(), *to_record, now);
  return absl::OkStatus();
}

absl::Status BuildScheduler::TakeReport(const v1::ReportResultRequest& request, absl::Time now,
                                        const WorkerPeer& peer,
                                        std::optional<ResultToRecord>& to_record) {
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    ASSIGN_OR_RETURN(WorkerState * worker, WorkerOf(request.worker_id(), peer, deferred));
    auto task_it = tasks_.find(request.task_id());
    if (task_it == tasks_.end() || task_it->second.worker_id != request.worker_id()) {
      return absl::NotFoundError(absl::StrCat("task ", request.task_id(), " is not leased to ",
                                              request.worker_id(),
                                              " (its lease was lost and the unit re-queued)"));
    }
    // What the worker says it measured, kept within what it can have
    // measured: no peak above its own cap (which would make every later
    // unit of the kind wait for a larger worker), no time beyond the lease.
    v1::TaskResult result = request.result();
    result.set_peak_memory_bytes(
        std::clamp<int64_t>(result.peak_memory_bytes(), 0, worker->info.memory_cap_bytes()));
    const int64_t leased_ms = absl::ToInt64Milliseconds(now - task_it->second.leased_at);
    result.set_wall_time_ms(std::clamp<int64_t>(result.wall_time_ms(), 0, leased_ms));
    result.set_cpu_time_ms(std::clamp<int64_t>(result.cpu_time_ms(), 0,
                                               leased_ms * std::max(1, worker->info.slots())));
    result.set_worker_name(ShownWorkerName(worker->info.name(), result.worker_name()));
    result.set_producer(worker->peer.name);
    for (std::string* text : {result.mutable_stdout_text(), result.mutable_stderr_text(),
                              result.mutable_error_message()}) {
      if (static_cast<int64_t>(text->size()) > options_.max_output_bytes) {
        text->resize(options_.max_output_bytes);
        absl::StrAppend(text, "\n[distcc-cuda: the coordinator cut this output at ",
                        FormatByteSize(options_.max_output_bytes), " (--max-output)]\n");
      }
    }
    if (task_it->second.cancelled) {
      EndCancelledTask(request.task_id(), result, worker->peer.authenticated, deferred);
    } else if (result.outcome() == v1::TASK_FAILED_TO_START ||
               result.outcome() == v1::TASK_CANCELLED) {
      // Nobody cancelled it (a stopping worker deregisters instead of
      // reporting): a loss like any other, so a worker that keeps saying so
      // cannot hold a unit for ever.
      Requeue(request.task_id(), absl::StrCat("worker could not run it: ", result.error_message()),
              deferred);
    } else if (result.outcome() == v1::TASK_KILLED_FOR_MEMORY) {
      RetryAfterMemoryKill(request.task_id(), result, now, deferred);
    } else if (auto build = builds_.find(task_it->second.build_id);
               build != builds_.end() &&
               result.toolchain_digest() != build->second.toolchain_digest) {
      // The worker's toolchain is no longer the one it registered with (or
      // it never said): its object must not be linked or cached, and the
      // worker is dropped, so that it registers again with what it has now
      // and gets only builds of that toolchain.
      std::string worker_id = task_it->second.worker_id;
      std::string reason =
          absl::StrCat("compiled with toolchain [", result.toolchain_digest().substr(0, 12),
                       "], not the build's [", build->second.toolchain_digest.substr(0, 12), "]");
      Requeue(request.task_id(), reason, deferred, /*count_as_loss=*/false);
      DropWorker(worker_id, absl::StrCat("reported a unit ", reason), now, deferred);
    } else if (std::string why = OutputsDiffer(result, task_it->second); !why.empty()) {
      // Only the unit's own declared outputs count as its result.
      if (auto build = builds_.find(task_it->second.build_id); build != builds_.end()) {
        build->second.units[task_it->second.unit_index].refused_by.insert(request.worker_id());
      }
      Requeue(request.task_id(),
              absl::StrCat("the report of worker ", worker->info.name(), " was refused (", why,
                           "); the unit runs elsewhere"),
              deferred);
      Dispatch(now, deferred);
      return absl::InvalidArgumentError(absl::StrCat("report refused: ", why));
    } else if (std::optional<std::string> digest =
                   RecordsFirst(task_it->second, result, worker->peer.authenticated);
               digest.has_value()) {
      to_record = ResultToRecord{*std::move(digest), std::move(result)};
    } else {
      CompleteTask(request.task_id(), result, worker->peer.authenticated, deferred);
    }
    Dispatch(now, deferred);
  }
  RunDeferred(deferred);
  return absl::OkStatus();
}

std::optional<std::string> BuildScheduler::RecordsFirst(const TaskState& task,
                                                        const v1::TaskResult& result,
                                                        bool authenticated) const {
  auto build = builds_.find(task.build_id);
  if (!record_result_ || !authenticated || build == builds_.end() ||
      result.outcome() != v1::TASK_COMPLETED || result.exit_code() != 0) {
    return std::nullopt;
  }
  const PlannedUnit& planned = build->second.units[task.unit_index].planned;
  if (!planned.cacheable) return std::nullopt;
  return planned.action_digest;
}

void BuildScheduler::CompleteTask(const std::string& task_id, const v1::TaskResult& result,
                                  bool cacheable, Deferred& deferred) {
  std::optional<TaskState> task = EndTask(task_id);
  if (!task.has_value()) return;
  WorkerState* worker = workers_.Find(task->worker_id);
  if (worker != nullptr) ++worker->completed;
  // An engine's ActionCache answered: cached, as the summary says, but only
  // an engine client's word counts (another worker's would dodge the
  // cross-check).
  const bool engine_cached = result.engine_cache_hit() && worker != nullptr &&
                             worker->info.engine_client() &&
                             result.outcome() == v1::TASK_COMPLETED && result.exit_code() == 0;
  auto build_it = builds_.find(task->build_id);
  if (build_it == builds_.end()) return;
  const PlannedUnit& planned = build_it->second.units[task->unit_index].planned;
  // A peak of 0 is unknown (an engine's worker that measures none, a result
  // from an engine's cache): nothing to learn from.
  if (history_ != nullptr && result.outcome() == v1::TASK_COMPLETED &&
      result.peak_memory_bytes() > 0) {
    history_->Learn(planned.identity, planned.family, result.peak_memory_bytes(),
                    absl::Milliseconds(result.wall_time_ms()), planned.instantiations,
                    planned.closure, planned.closure_bytes, planned.parallel);
    deferred.learnt = true;
    LearnFrom(planned, result.peak_memory_bytes(), absl::Milliseconds(result.wall_time_ms()),
              deferred);
  }
  FinishUnit(build_it->second, task->unit_index, result, engine_cached, deferred, cacheable);
}

void BuildScheduler::AnnounceRecorded(const std::string& worker_id, const std::string& task_id,
                                      const ResultToRecord& recorded, absl::Time now) {
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    auto task = tasks_.find(task_id);
    // Otherwise the lease was lost meanwhile (its worker dropped): the unit
    // runs again, and what was recorded stays a valid cached result.
    if (task != tasks_.end() && task->second.worker_id == worker_id) {
      if (task->second.cancelled) {
        EndTask(task_id);  // cancelled meanwhile; its result is cached already
      } else {
        CompleteTask(task_id, recorded.result, /*cacheable=*/true, deferred);
      }
      Dispatch(now, deferred);
    }
  }
  // FinishUnit asks for the record that is already written.
  deferred.results.erase(
      std::remove_if(deferred.results.begin(), deferred.results.end(),
                     [&](const auto& entry) { return entry.first == recorded.action_digest; }),
      deferred.results.end());
  RunDeferred(deferred);
}

absl::Status BuildScheduler::RejectResult(const std::string& worker_id, const std::string& task_id,
                                          const std::string& why, absl::Time now,
                                          const WorkerPeer& peer) {
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    ASSIGN_OR_RETURN(WorkerState * worker, WorkerOf(worker_id, peer, deferred));
    auto task = tasks_.find(task_id);
    if (task == tasks_.end() || task->second.worker_id != worker_id) {
      return absl::NotFoundError(absl::StrCat("task ", task_id, " is not leased to ", worker_id));
    }
    LogFields fields{{"build", task->second.build_id}, {"worker", worker->info.name()}};
    if (auto build = builds_.find(task->second.build_id); build != builds_.end()) {
      build->second.units[task->second.unit_index].refused_by.insert(worker_id);
    }
    deferred.Warn(fmt::format("refused the report of worker {} ({}) for task {}: {}",
                              worker->info.name(), worker->peer.name, task_id, why));
    Requeue(task_id,
            absl::StrCat("the report of worker ", worker->info.name(), " was refused (", why,
                         "); the unit runs elsewhere"),
            deferred);
    Dispatch(now, deferred);
  }
  RunDeferred(deferred);
  return absl::OkStatus();
}

std::string BuildScheduler::OutputsDiffer(const v1::TaskResult& result,
                                          const TaskState& task) const {
  if (result.outcome() != v1::TASK_COMPLETED || result.exit_code() != 0) {
    if (result.outputs_size() != 0) return "a failed compile reported outputs";
    return "";
  }
  auto build = builds_.find(task.build_id);
  if (build == builds_.end()) return "";
  const v1::CompileUnit& unit = build->second.units[task.unit_index].planned.unit;
  if (result.outputs_size() != unit.output_paths_size()) {
    return absl::StrCat("it reported ", result.outputs_size(), " outputs for a unit that declares ",
                        unit.output_paths_size());
  }
  for (int i = 0; i < unit.output_paths_size(); ++i) {
    const v1::OutputFile& output = result.outputs(i);
    if (output.path() != unit.output_paths(i)) {
      return absl::StrCat("it reported output '", absl::CHexEscape(output.path().substr(0, 200)),
                          "', not the declared '", unit.output_paths(i), "'");
    }
    if (!ValidateDigest(FromProto(output.digest())).ok()) {
      return absl::StrCat("output ", output.path(), " has a malformed digest");
    }
  }
  return "";
}

void BuildScheduler::RetryAfterMemoryKill(const std::string& task_id, const v1::TaskResult& result,
                                          absl::Time now, Deferred& deferred) {
  const TaskState task = tasks_.at(task_id);
  const WorkerState& worker = *workers_.Find(task.worker_id);
  auto build_it = builds_.find(task.build_id);
  if (build_it == builds_.end()) {
    EndTask(task_id);
    return;
  }
  BuildState& build = build_it->second;
  UnitState& unit = build.units[task.unit_index];
  const std::string& name = unit.planned.unit.name();
  LogFields fields{{"build", build.id}, {"unit", name}, {"worker", worker.info.name()}};
  int64_t cap = worker.info.memory_cap_bytes();
  // A killed run needed more than it had when it was stopped.
  unit.peak_seen = std::max({unit.peak_seen, result.peak_memory_bytes(), task.reserved_bytes});
  ++unit.memory_kills;
  metrics_->UnitKilledForMemory();
  if (history_ != nullptr) {
    // What it held when stopped is a lower bound of its need, not a peak of
    // its own: the node may have been over its cap because of others.
    history_->Learn(unit.planned.identity, unit.planned.family, result.peak_memory_bytes(),
                    absl::Milliseconds(result.wall_time_ms()), unit.planned.instantiations,
                    unit.planned.closure, unit.planned.closure_bytes, unit.planned.parallel);
    deferred.learnt = true;
    LearnFrom(unit.planned, result.peak_memory_bytes(), absl::Milliseconds(result.wall_time_ms()),
              deferred);
  }
  const std::string killed =
      absl::StrCat("killed for memory on ", worker.info.name(), " at ",
                   FormatByteSize(result.peak_memory_bytes()), " (reserved ",
                   FormatByteSize(task.reserved_bytes), ", cap ", FormatByteSize(cap), ")");
  if (!options_.memory_admission) {
    // A static job limit has no answer to a memory kill: the build fails, as
    // it would under ninja -j.
    EndTask(task_id);
    v1::TaskResult failed = result;
    failed.set_error_message(absl::StrCat(name, " ", killed, " under a static job limit"));
    FinishUnit(build, task.unit_index, failed, false, deferred);
    return;
  }
  MemoryKill kill{unit.memory_kills,
                  unit.peak_seen,
                  cap,
                  workers_.LargestCap(build.toolchain_digest),
                  unit.alone,
                  unit.needs_cap_above,
                  static_cast<bool>(unit.planned.split)};
  const RetryStep step = NextRetry(kill);
  switch (step.rung) {
    case RetryRung::kReserveMore:
      unit.reservation_floor = step.reservation_floor;
      break;
    case RetryRung::kRunAlone:
      unit.alone = true;
      break;
    case RetryRung::kLargerWorker:
      unit.needs_cap_above = step.needs_cap_above;
      break;
    case RetryRung::kSplit:
    case RetryRung::kGiveUp:
      v1::TaskResult failed = result;
      failed.set_error_message(absl::StrCat(
          "unit ", name, " peaked at ", FormatByteSize(unit.peak_seen),
          ", above what every worker can give it (largest cap ", FormatByteSize(kill.largest_cap),
          "); split it (fewer instantiations or architectures per unit, lower --threads) or add "
          "a worker with more memory"));
      if (step.rung == RetryRung::kSplit) {
        // Planning the parts reads and writes the store: after the lock.
        deferred.splits.push_back({task_id, killed, unit.planned.split, failed, now});
        return;
      }
      EndTask(task_id);
      FinishUnit(build, task.unit_index, failed, false, deferred);
      return;
  }
  Requeue(task_id, absl::StrCat(killed, "; ", DescribeRetry(step, cap)), deferred,
          /*count_as_loss=*/false);
}

void BuildScheduler::ApplySplit(Deferred::PendingSplit pending) {
  absl::StatusOr<std::vector<PlannedUnit>> parts = pending.split();
  std::vector<std::optional<v1::TaskResult>> hits;
  if (parts.ok()) {
    for (const PlannedUnit& part : *parts) {
      hits.push_back(lookup_result_ ? lookup_result_(part.action_digest) : std::nullopt);
    }
  }
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    SplitOrGiveUp(pending, std::move(parts), std::move(hits), deferred);
    Dispatch(pending.now, deferred);
  }
  RunDeferred(deferred);
}

void BuildScheduler::SplitOrGiveUp(const Deferred::PendingSplit& pending,
                                   absl::StatusOr<std::vector<PlannedUnit>> parts,
                                   std::vector<std::optional<v1::TaskResult>> hits,
                                   Deferred& deferred) {
  auto task = tasks_.find(pending.task_id);
  if (task == tasks_.end()) return;  // requeued (its worker lost, timed out) or cancelled
  auto build_it = builds_.find(task->second.build_id);
  if (build_it == builds_.end() || task->second.cancelled) {
    EndTask(pending.task_id);
    return;
  }
  BuildState& build = build_it->second;
  const int unit_index = task->second.unit_index;
  const UnitState& unit = build.units[unit_index];
  bool splits = parts.ok() && parts->size() > 1;
  if (!parts.ok()) {
    deferred.Warn(fmt::format("cannot split unit {}: {}", unit.planned.unit.name(),
                              parts.status().ToString()));
  }
  for (size_t i = 0; splits && i < parts->size(); ++i) {
    for (const UnitState& other : build.units) {
      if (other.planned.unit.name() == (*parts)[i].unit.name()) splits = false;
    }
  }
  if (!splits) {
    EndTask(pending.task_id);
    FinishUnit(build, unit_index, pending.give_up, false, deferred);
    return;
  }
  // Fewer instantiations (or targets) per unit: the parts may fit where it
  // did not.
  std::string why = (*parts)[0].unit.has_architecture_part()
                        ? absl::StrCat(pending.killed, "; no worker has more memory, so its ",
                                       parts->size(), " targets compile as units of their own")
                        : absl::StrCat(pending.killed, "; no worker has more memory, so its ",
                                       unit.planned.instantiations, " instantiations are split");
  SplitUnit(pending.task_id, *std::move(parts), std::move(hits), why, deferred);
}

void BuildScheduler::SplitUnit(const std::string& task_id, std::vector<PlannedUnit> parts,
                               std::vector<std::optional<v1::TaskResult>> hits,
                               const std::string& reason, Deferred& deferred) {
  std::optional<TaskState> task = EndTask(task_id);
  if (!task) return;
  BuildState& build = builds_.at(task->build_id);
  UnitState& old = build.units[task->unit_index];
  old.phase = UnitPhase::kDone;
  old.split = true;
  ++build.splits;
  LogFields fields{{"build", build.id}, {"unit", old.planned.unit.name()}};
  v1::BuildEvent event;
  auto* split = event.mutable_unit_split();
  split->set_unit_name(old.planned.unit.name());
  split->set_reason(reason);
  deferred.Warn(fmt::format("splitting unit {} into {} units: {}", old.planned.unit.name(),
                            parts.size(), reason));
  // What the parent taught: a half needs at least its share of the peak
  // seen, and the parent already failed alone on the largest worker.
  int64_t peak_seen = old.peak_seen;
  int parent_instantiations = std::max(1, old.planned.instantiations);
  int parent_parallel = std::max(1, old.planned.parallel);
  std::vector<int> fresh;
  std::vector<std::pair<int, v1::TaskResult>> cached;
  for (size_t i = 0; i < parts.size(); ++i) {  // `old` is not used past here: units grows
    PlannedUnit& part = parts[i];
    split->add_into(part.unit.name());
    int index = build.units.size();
    std::optional<v1::TaskResult>& hit = hits[i];
    UnitState state = HoldUnit(std::move(part), hit.has_value());
    // A part of fewer targets runs fewer of them at once (--threads).
    state.reservation_floor = peak_seen * state.planned.instantiations / parent_instantiations *
                              std::min(state.planned.parallel, parent_parallel) / parent_parallel;
    build.units.push_back(std::move(state));
    if (hit) {
      hit->set_toolchain_digest(build.toolchain_digest);
      cached.emplace_back(index, std::move(*hit));
    } else {
      fresh.push_back(index);
    }
  }
  // The parent is done; its parts remain.
  build.remaining += static_cast<int>(parts.size()) - 1;
  deferred.events.emplace_back(build.sink, std::move(event));
  Enqueue(build.id, fresh);
  // Halves built before (a rebuild splits the same way) come from the cache.
  std::string build_id = build.id;
  for (auto& [index, result] : cached) {
    auto found = builds_.find(build_id);  // FinishUnit erases it after its last unit
    if (found == builds_.end()) break;
    FinishUnit(found->second, index, result, true, deferred);
  }
}

void BuildScheduler::EndCancelledTask(const std::string& task_id, const v1::TaskResult& result,
                                      bool cacheable, Deferred& deferred) {
  std::optional<TaskState> task = EndTask(task_id);
  if (!task || !task->cancelled) return;
  const TaskState::Cancelled& cancelled = *task->cancelled;
  if (result.outcome() != v1::TASK_COMPLETED || result.exit_code() != 0 || !cacheable ||
      !record_result_ || result.toolchain_digest() != cancelled.toolchain_digest ||
      result.outputs_size() != static_cast<int>(cancelled.output_paths.size())) {
    return;
  }
  for (int i = 0; i < result.outputs_size(); ++i) {
    if (result.outputs(i).path() != cancelled.output_paths[i] ||
        !ValidateDigest(FromProto(result.outputs(i).digest())).ok()) {
      return;
    }
  }
  // Finished before the cancel reached it: the next build gets it cached.
  deferred.results.emplace_back(cancelled.action_digest, result);
}

}  // namespace distcc_cuda::coordinator
