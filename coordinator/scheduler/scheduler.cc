// SPDX-License-Identifier: Apache-2.0
// The scheduler's facade: its lock (LockedSection, which times each hold),
// the work done after it (RunDeferred), the worker calls that register,
// refresh, drop and lease, the periodic Tick, and what it shows (Status).
// Its parts live beside it: leases and admission (scheduler_leases.cc),
// reports and the memory retry ladder (scheduler_reports.cc), the build book
// (scheduler_builds.cc), the queue's order and history relearning
// (scheduler_queue.cc), and the worker registry (worker_registry.cc).
#include "coordinator/scheduler/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/nvcc/toolchain.h"
#include "coordinator/scheduler/ids.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::coordinator {

void BuildScheduler::Deferred::DeliverEvents() {
  for (auto& [sink, event] : events) sink(std::move(event));
  events.clear();
}

void BuildScheduler::Deferred::WriteLogs() {
  for (const LogLine& line : logs) {
    LogFields fields(line.fields);
    if (line.warning) {
      spdlog::warn("{}", line.message);
    } else {
      spdlog::info("{}", line.message);
    }
  }
  logs.clear();
}

absl::StatusOr<WorkerState*> BuildScheduler::WorkerOf(const std::string& worker_id,
                                                      const WorkerPeer& peer, Deferred& deferred) {
  std::string refusal;
  absl::StatusOr<WorkerState*> worker = workers_.Of(worker_id, peer, &refusal);
  if (!refusal.empty()) deferred.Warn(std::move(refusal));
  return worker;
}

void BuildScheduler::RunDeferred(Deferred& deferred) {
  deferred.DeliverEvents();
  for (auto& [callback, task] : deferred.leases) callback(std::move(task));
  if (record_result_) {
    for (const auto& [action_digest, result] : deferred.results) {
      record_result_(action_digest, result);
    }
  }
  if (deferred.learnt && history_ != nullptr) history_->WritePending();
  deferred.WriteLogs();
  if (cross_check_) {
    for (CrossCheckCandidate& candidate : deferred.cross_checks) cross_check_(std::move(candidate));
  }
  for (Deferred::PendingSplit& pending : deferred.splits) ApplySplit(std::move(pending));
}

BuildScheduler::LockedSection::LockedSection(const BuildScheduler* scheduler, Deferred* deferred)
    : lock_(&scheduler->mu_),
      deferred_(deferred),
      metrics_(*scheduler->metrics_),
      locked_at_(std::chrono::steady_clock::now()) {}

BuildScheduler::LockedSection::~LockedSection() {
  if (deferred_ != nullptr) deferred_->DeliverEvents();
  metrics_.LockHeld(absl::FromChrono(std::chrono::steady_clock::now() - locked_at_));
}

BuildScheduler::BuildScheduler(SchedulerOptions options, ResultRecorder record_result,
                               PeakHistory* history, ResultLookup lookup_result,
                               std::shared_ptr<SchedulerMetrics> metrics)
    : options_(options),
      record_result_(std::move(record_result)),
      lookup_result_(std::move(lookup_result)),
      history_(history),
      metrics_(metrics != nullptr ? std::move(metrics) : std::make_shared<SchedulerMetrics>()),
      queue_([this](const QueuedUnit& unit) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        // Called by the queue's own calls, all made under mu_.
        return builds_.at(unit.first).units[unit.second].planned.demand.wall;
      }) {}

absl::StatusOr<std::string> BuildScheduler::RegisterWorker(const v1::RegisterWorkerRequest& request,
                                                           absl::Time now, const WorkerPeer& peer) {
  RETURN_IF_ERROR(CheckRegistration(request));
  // An engine client's word that an engine's cache answered makes a unit
  // cached, which is never cross-checked: a coordinator that cross-checks
  // takes no such worker (the client's embedded one never does).
  if (request.engine_client() && options_.cross_check_rate > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker '", TerminalSafe(request.name()),
        "' registers as a client of another engine, which a coordinator that cross-checks "
        "results (--cross-check-rate) does not take: run it as an ordinary worker"));
  }
  std::string id = NewId('w', epoch_);
  {
    LockedSection lock(this);
    RETURN_IF_ERROR(workers_.Add(id, request, peer, now));
    for (auto& [build_id, build] : builds_) {
      if (HasToolchain(request, build.toolchain_digest)) build.stranded_since.reset();
    }
  }
  LogFields fields{{"worker", request.name()}};
  std::vector<std::string> toolchains;
  for (const v1::ToolchainFingerprint* toolchain : ToolchainsOf(request)) {
    toolchains.push_back(DescribeToolchain(*toolchain));
  }
  spdlog::info("worker {} joined: {} slots, cap {} bytes, {}", id, request.slots(),
               request.memory_cap_bytes(), absl::StrJoin(toolchains, " and "));
  return id;
}

absl::Status BuildScheduler::Heartbeat(const v1::HeartbeatRequest& request, absl::Time now,
                                       const WorkerPeer& peer, v1::HeartbeatResponse* response) {
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    ASSIGN_OR_RETURN(WorkerState * worker, WorkerOf(request.worker_id(), peer, deferred));
    if (request.running_task_ids_size() > 2 * worker->info.slots() + 16) {
      return absl::InvalidArgumentError(
          absl::StrCat("a heartbeat lists ", request.running_task_ids_size(), " running tasks for ",
                       worker->info.slots(), " slots"));
    }
    worker->last_heartbeat = now;
    worker->memory_used_bytes =
        std::clamp<int64_t>(request.memory_used_bytes(), 0, worker->info.memory_cap_bytes());
    std::set<std::string> running(request.running_task_ids().begin(),
                                  request.running_task_ids().end());
    std::vector<std::string> lost;
    for (const std::string& task_id : worker->tasks) {
      TaskState& task = tasks_.at(task_id);
      if (running.count(task_id)) {
        task.seen_running = true;
        if (task.cancelled && response != nullptr) response->add_cancel_task_ids(task_id);
      } else if (task.cancelled) {
        // Cancelled before it started, or gone without a report.
        if (task.seen_running || now - task.leased_at > 2 * options_.heartbeat_interval) {
          lost.push_back(task_id);
        } else if (response != nullptr) {
          response->add_cancel_task_ids(task_id);
        }
      } else if (now - task.leased_at > 2 * options_.heartbeat_interval) {
        // The lease answer never reached the worker, or the worker lost the
        // task without a report: take it back.
        lost.push_back(task_id);
      }
    }
    for (const std::string& task_id : lost) {
      Requeue(task_id, "the worker no longer runs it", deferred);
    }
    Dispatch(now, deferred);
  }
  RunDeferred(deferred);
  return absl::OkStatus();
}

absl::Status BuildScheduler::DeregisterWorker(const std::string& worker_id, absl::Time now,
                                              const WorkerPeer& peer, Departure departure) {
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    RETURN_IF_ERROR(WorkerOf(worker_id, peer, deferred).status());
    DropWorker(worker_id,
               departure == Departure::kToolchainChanged
                   ? "left to register again with its changed toolchain"
                   : "stopped",
               now, deferred, /*count_as_loss=*/false);
    Dispatch(now, deferred);
  }
  RunDeferred(deferred);
  return absl::OkStatus();
}

absl::Status BuildScheduler::RequestLease(const std::string& worker_id, absl::Time deadline,
                                          LeaseCallback callback, absl::Time now,
                                          const WorkerPeer& peer) {
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    RETURN_IF_ERROR(WorkerOf(worker_id, peer, deferred).status());
    // During an arrival grace nothing is offered (Dispatch offers it after).
    std::optional<v1::Task> task;
    if (!in_grace_ || now >= offer_after_) task = TakeTaskFor(worker_id, now, deferred);
    if (task || deadline <= now) {
      deferred.leases.emplace_back(std::move(callback), std::move(task));
    } else {
      parked_.Park(worker_id, deadline, std::move(callback));
    }
  }
  RunDeferred(deferred);
  return absl::OkStatus();
}

void BuildScheduler::CancelLeaseRequest(const std::string& worker_id) {
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    parked_.Release(worker_id, deferred.leases);
  }
  RunDeferred(deferred);
}

void BuildScheduler::Tick(absl::Time now) {
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    for (const std::string& id : workers_.Silent(now, options_.heartbeat_timeout)) {
      DropWorker(
          id,
          absl::StrCat("sent no heartbeat for ", absl::FormatDuration(options_.heartbeat_timeout)),
          now, deferred);
    }
    FailStrandedBuilds(now, deferred);
    std::vector<std::string> overdue;
    for (const auto& [task_id, task] : tasks_) {
      if (now - task.leased_at > options_.task_timeout + options_.heartbeat_timeout) {
        overdue.push_back(task_id);
      }
    }
    for (const std::string& task_id : overdue) {
      Requeue(task_id, "it ran past the task timeout", deferred);
    }
    parked_.Expire(
        now, [&](const std::string& id) { return workers_.Find(id) == nullptr; }, deferred.leases);
    Dispatch(now, deferred);
  }
  RunDeferred(deferred);
}

ClusterCapacity BuildScheduler::Capacity(const std::string& toolchain_digest) const {
  LockedSection lock(this);
  return workers_.Capacity(toolchain_digest);
}

std::vector<v1::ToolchainFingerprint> BuildScheduler::Toolchains() const {
  std::map<std::string, v1::ToolchainFingerprint> distinct;
  {
    LockedSection lock(this);
    for (const auto& [id, worker] : workers_) {
      for (const v1::ToolchainFingerprint* toolchain : ToolchainsOf(worker.info)) {
        distinct.try_emplace(toolchain->digest(), *toolchain);
      }
    }
  }
  std::vector<v1::ToolchainFingerprint> toolchains;
  for (auto& [digest, toolchain] : distinct) toolchains.push_back(std::move(toolchain));
  return toolchains;
}

int BuildScheduler::PeersWith(const std::string& toolchain_digest,
                              const std::set<std::string>& excluding) const {
  LockedSection lock(this);
  return workers_.PeersWith(toolchain_digest, excluding);
}

int BuildScheduler::DropWorkersOf(const std::string& peer, const std::string& reason,
                                  absl::Time now) {
  Deferred deferred;
  int dropped = 0;
  {
    LockedSection lock(this, &deferred);
    const std::vector<std::string> ids = workers_.IdsOf(peer);
    for (const std::string& id : ids) DropWorker(id, reason, now, deferred);
    dropped = ids.size();
    Dispatch(now, deferred);
  }
  RunDeferred(deferred);
  return dropped;
}

v1::ClusterStatus BuildScheduler::Status(absl::Time now) const {
  LockedSection lock(this);
  v1::ClusterStatus status;
  workers_.AddTo(status, now);
  status.set_active_builds(builds_.size());
  status.set_queued_units(queue_.size());
  status.set_running_units(tasks_.size());
  absl::Duration queued_work;
  for (const auto& [build_id, index] : queue_) {
    auto build = builds_.find(build_id);
    if (build != builds_.end()) queued_work += build->second.units[index].planned.demand.wall;
  }
  status.set_queued_predicted_wall_ms(absl::ToInt64Milliseconds(queued_work));
  for (const auto& [task_id, task] : tasks_) {
    auto build = builds_.find(task.build_id);
    if (build == builds_.end()) continue;
    const PlannedUnit& planned = build->second.units[task.unit_index].planned;
    auto* running = status.add_running();
    running->set_unit_name(planned.unit.name());
    running->set_worker_name(workers_.Find(task.worker_id)->info.name());
    running->set_reserved_bytes(task.reserved_bytes);
    running->set_predicted_peak_bytes(planned.demand.peak_bytes);
    running->set_prediction_source(planned.demand.source);
    running->set_predicted_wall_ms(absl::ToInt64Milliseconds(planned.demand.wall));
    running->set_elapsed_ms(absl::ToInt64Milliseconds(now - task.leased_at));
  }
  std::vector<v1::BuildRecord> running_builds;
  for (const auto& [id, build] : builds_) {
    if (build.log) running_builds.push_back(RecordOf(build, "running", /*with_spans=*/false));
  }
  std::sort(running_builds.begin(), running_builds.end(), [](const auto& a, const auto& b) {
    return a.started_unix_micros() > b.started_unix_micros();
  });
  for (v1::BuildRecord& record : running_builds) *status.add_builds() = std::move(record);
  for (const v1::BuildRecord& record : recent_builds_.records()) {
    v1::BuildRecord* summary = status.add_builds();
    *summary = record;
    summary->clear_spans();
  }
  if (revocations_ != nullptr) {
    for (const Revocation& revoked : revocations_->List()) {
      v1::RevokedWorker* out = status.add_revoked_workers();
      out->set_name(revoked.name);
      out->set_reason(revoked.reason);
      out->set_since_unix_seconds(revoked.since_unix_seconds);
    }
  }
  return status;
}

std::optional<v1::BuildRecord> BuildScheduler::BuildRecordOf(const std::string& build_id) const {
  LockedSection lock(this);
  auto build = builds_.find(build_id);
  if (build != builds_.end() && build->second.log) {
    return RecordOf(build->second, "running", /*with_spans=*/true);
  }
  const v1::BuildRecord* kept = recent_builds_.Find(build_id);
  if (kept != nullptr) return *kept;
  return std::nullopt;
}

absl::Time BuildScheduler::Now() const { return options_.clock(); }

}  // namespace distcc_cuda::coordinator
