// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/toolchain.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::coordinator {

void BuildScheduler::Deferred::Run() {
  for (auto& [callback, task] : leases) callback(std::move(task));
  for (auto& [sink, event] : events) sink(event);
}

BuildScheduler::BuildScheduler(SchedulerOptions options, ResultRecorder record_result)
    : options_(options), record_result_(std::move(record_result)) {}

absl::StatusOr<std::string> BuildScheduler::RegisterWorker(const v1::RegisterWorkerRequest& request,
                                                           absl::Time now) {
  if (request.slots() <= 0 || request.memory_cap_bytes() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker '", request.name(), "' offers ", request.slots(), " slots and a memory cap of ",
        request.memory_cap_bytes(), " bytes; both must be positive"));
  }
  if (request.toolchain().digest().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker '", request.name(), "' sent no toolchain fingerprint"));
  }
  absl::MutexLock lock(&mu_);
  std::string id = absl::StrCat("w", next_id_++, "-", request.name());
  workers_[id] = WorkerState{request, now, {}, 0};
  spdlog::info("worker {} joined: {} slots, cap {} bytes, {}", id, request.slots(),
               request.memory_cap_bytes(), DescribeToolchain(request.toolchain()));
  return id;
}

absl::Status BuildScheduler::Heartbeat(const v1::HeartbeatRequest& request, absl::Time now) {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(request.worker_id());
    if (it == workers_.end()) {
      return absl::NotFoundError(
          absl::StrCat("worker ", request.worker_id(), " is not registered; register again"));
    }
    it->second.last_heartbeat = now;
    std::set<std::string> running(request.running_task_ids().begin(),
                                  request.running_task_ids().end());
    std::vector<std::string> lost;
    for (const std::string& task_id : it->second.tasks) {
      TaskState& task = tasks_.at(task_id);
      if (running.count(task_id)) {
        task.seen_running = true;
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
  deferred.Run();
  return absl::OkStatus();
}

absl::Status BuildScheduler::RequestLease(const std::string& worker_id, absl::Time deadline,
                                          LeaseCallback callback, absl::Time now) {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    if (!workers_.count(worker_id)) {
      return absl::NotFoundError(
          absl::StrCat("worker ", worker_id, " is not registered; register again"));
    }
    std::optional<v1::Task> task = TakeTaskFor(worker_id, now, deferred);
    if (task || deadline <= now) {
      deferred.leases.emplace_back(std::move(callback), std::move(task));
    } else {
      parked_.push_back(ParkedLease{worker_id, deadline, std::move(callback)});
    }
  }
  deferred.Run();
  return absl::OkStatus();
}

void BuildScheduler::CancelLeaseRequest(const std::string& worker_id) {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (it->worker_id == worker_id) {
        deferred.leases.emplace_back(std::move(it->callback), std::nullopt);
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
  }
  deferred.Run();
}

std::optional<v1::Task> BuildScheduler::TakeTaskFor(const std::string& worker_id, absl::Time now,
                                                    Deferred& deferred) {
  WorkerState& worker = workers_.at(worker_id);
  if (static_cast<int>(worker.tasks.size()) >= worker.info.slots()) {
    return std::nullopt;
  }
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    BuildState& build = builds_.at(it->first);
    if (build.toolchain_digest != worker.info.toolchain().digest()) continue;
    int index = it->second;
    queue_.erase(it);
    UnitState& unit = build.units[index];
    unit.phase = UnitPhase::kRunning;
    ++unit.attempts;
    std::string task_id = absl::StrCat("t", next_id_++);
    tasks_[task_id] = TaskState{build.id, index, worker_id, now};
    worker.tasks.insert(task_id);
    build.workers_used.insert(worker.info.name());
    v1::Task task;
    task.set_task_id(task_id);
    *task.mutable_unit() = unit.planned.unit;
    task.set_timeout_ms(absl::ToInt64Milliseconds(options_.task_timeout));
    v1::BuildEvent event;
    auto* started = event.mutable_unit_started();
    started->set_unit_name(unit.planned.unit.name());
    started->set_worker_name(worker.info.name());
    started->set_attempt(unit.attempts);
    deferred.events.emplace_back(build.sink, std::move(event));
    return task;
  }
  return std::nullopt;
}

void BuildScheduler::Dispatch(absl::Time now, Deferred& deferred) {
  for (auto it = parked_.begin(); it != parked_.end() && !queue_.empty();) {
    if (!workers_.count(it->worker_id)) {
      deferred.leases.emplace_back(std::move(it->callback), std::nullopt);
      it = parked_.erase(it);
      continue;
    }
    std::optional<v1::Task> task = TakeTaskFor(it->worker_id, now, deferred);
    if (task) {
      deferred.leases.emplace_back(std::move(it->callback), std::move(task));
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
}

void BuildScheduler::Requeue(const std::string& task_id, const std::string& reason,
                             Deferred& deferred) {
  auto task_it = tasks_.find(task_id);
  if (task_it == tasks_.end()) return;
  TaskState task = task_it->second;
  tasks_.erase(task_it);
  if (auto worker = workers_.find(task.worker_id); worker != workers_.end()) {
    worker->second.tasks.erase(task_id);
  }
  auto build_it = builds_.find(task.build_id);
  if (build_it == builds_.end()) return;
  BuildState& build = build_it->second;
  UnitState& unit = build.units[task.unit_index];
  const std::string& name = unit.planned.unit.name();
  if (unit.attempts >= options_.max_attempts) {
    v1::TaskResult result;
    result.set_outcome(v1::TASK_FAILED_TO_START);
    result.set_error_message(absl::StrCat("unit ", name, " was lost ", unit.attempts,
                                          " times (last: ", reason, "); giving up"));
    FinishUnit(build, task.unit_index, result, false, deferred);
    return;
  }
  spdlog::warn("re-queueing unit {}: {}", name, reason);
  unit.phase = UnitPhase::kQueued;
  queue_.emplace_front(build.id, task.unit_index);
  v1::BuildEvent event;
  event.mutable_unit_requeued()->set_unit_name(name);
  event.mutable_unit_requeued()->set_reason(reason);
  deferred.events.emplace_back(build.sink, std::move(event));
}

absl::Status BuildScheduler::ReportResult(const v1::ReportResultRequest& request, absl::Time now) {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    auto task_it = tasks_.find(request.task_id());
    if (task_it == tasks_.end() || task_it->second.worker_id != request.worker_id()) {
      return absl::NotFoundError(absl::StrCat("task ", request.task_id(), " is not leased to ",
                                              request.worker_id(),
                                              " (its lease was lost and the unit re-queued)"));
    }
    const v1::TaskResult& result = request.result();
    bool infrastructure_failure = result.outcome() == v1::TASK_FAILED_TO_START;
    if (infrastructure_failure) {
      Requeue(request.task_id(), absl::StrCat("worker could not run it: ", result.error_message()),
              deferred);
    } else {
      TaskState task = task_it->second;
      tasks_.erase(task_it);
      WorkerState& worker = workers_.at(task.worker_id);
      worker.tasks.erase(request.task_id());
      ++worker.completed;
      auto build_it = builds_.find(task.build_id);
      if (build_it != builds_.end()) {
        FinishUnit(build_it->second, task.unit_index, result, false, deferred);
      }
    }
    Dispatch(now, deferred);
  }
  deferred.Run();
  return absl::OkStatus();
}

void BuildScheduler::FinishUnit(BuildState& build, int unit_index, const v1::TaskResult& result,
                                bool cached, Deferred& deferred) {
  UnitState& unit = build.units[unit_index];
  unit.phase = UnitPhase::kDone;
  bool ok = result.outcome() == v1::TASK_COMPLETED && result.exit_code() == 0;
  unit.failed = !ok;
  if (!ok) ++build.failed;
  if (cached) ++build.cached;
  if (ok && !cached && record_result_) {
    record_result_(unit.planned.action_digest, result);
  }
  v1::BuildEvent event;
  auto* finished = event.mutable_unit_finished();
  finished->set_unit_name(unit.planned.unit.name());
  *finished->mutable_result() = result;
  finished->set_cached(cached);
  *finished->mutable_unit() = unit.planned.unit;
  deferred.events.emplace_back(build.sink, std::move(event));
  if (--build.remaining > 0) return;

  v1::BuildEvent done;
  auto* summary = done.mutable_finished();
  summary->set_success(build.failed == 0);
  summary->set_units_total(build.units.size());
  summary->set_units_failed(build.failed);
  summary->set_units_cached(build.cached);
  for (const std::string& name : build.workers_used) summary->add_workers_used(name);
  summary->set_message(
      build.failed == 0 ? "all units compiled"
                        : absl::StrCat(build.failed, " of ", build.units.size(), " units failed"));
  deferred.events.emplace_back(build.sink, std::move(done));
  spdlog::info("build {} finished: {} units, {} failed, {} cached", build.id, build.units.size(),
               build.failed, build.cached);
  builds_.erase(build.id);
}

absl::StatusOr<std::string> BuildScheduler::SubmitBuild(const std::string& build_name,
                                                        const v1::ToolchainFingerprint& toolchain,
                                                        std::vector<PlannedUnit> units,
                                                        std::map<int, v1::TaskResult> cached,
                                                        BuildEventSink sink, absl::Time now) {
  Deferred deferred;
  std::string id;
  {
    absl::MutexLock lock(&mu_);
    int eligible = 0;
    std::vector<std::string> others;
    for (const auto& [worker_id, worker] : workers_) {
      if (worker.info.toolchain().digest() == toolchain.digest()) {
        ++eligible;
      } else {
        others.push_back(
            absl::StrCat(worker.info.name(), ": ", DescribeToolchain(worker.info.toolchain())));
      }
    }
    bool all_cached = cached.size() == units.size();
    if (eligible == 0 && !all_cached) {
      if (workers_.empty()) {
        return absl::FailedPreconditionError(
            "no worker is connected to the coordinator; start one with "
            "distcc-cuda-worker --coordinator HOST:PORT");
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "no connected worker has the build's toolchain ", DescribeToolchain(toolchain),
          "; connected workers have: ", absl::StrJoin(others, "; ")));
    }
    id = absl::StrCat("b", next_id_++);
    BuildState& build = builds_[id];
    build.id = id;
    build.toolchain_digest = toolchain.digest();
    build.sink = std::move(sink);
    build.remaining = units.size();
    v1::BuildEvent accepted;
    accepted.mutable_accepted()->set_build_id(id);
    accepted.mutable_accepted()->set_eligible_workers(eligible);
    for (PlannedUnit& planned : units) {
      accepted.mutable_accepted()->add_unit_names(planned.unit.name());
      build.units.push_back(UnitState{std::move(planned)});
    }
    deferred.events.emplace_back(build.sink, std::move(accepted));
    spdlog::info("build {} ('{}'): {} units, {} cached, {} eligible workers", id, build_name,
                 build.units.size(), cached.size(), eligible);
    if (build.units.empty()) {
      v1::BuildEvent done;
      done.mutable_finished()->set_success(true);
      done.mutable_finished()->set_message("nothing to build");
      deferred.events.emplace_back(build.sink, std::move(done));
      builds_.erase(id);
    } else {
      for (size_t i = 0; i < build.units.size(); ++i) {
        if (!cached.count(i)) queue_.emplace_back(id, i);
      }
      for (auto& [index, result] : cached) {
        // FinishUnit may erase the build after its last unit.
        FinishUnit(builds_.at(id), index, result, true, deferred);
      }
      Dispatch(now, deferred);
    }
  }
  deferred.Run();
  return id;
}

void BuildScheduler::CancelBuild(const std::string& build_id) {
  absl::MutexLock lock(&mu_);
  if (!builds_.erase(build_id)) return;
  spdlog::warn("build {} cancelled: its client went away", build_id);
  for (auto it = queue_.begin(); it != queue_.end();) {
    it = it->first == build_id ? queue_.erase(it) : std::next(it);
  }
}

void BuildScheduler::DropWorker(const std::string& worker_id, const std::string& reason,
                                Deferred& deferred) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  spdlog::warn("worker {} dropped: {}", worker_id, reason);
  std::set<std::string> tasks = it->second.tasks;
  for (const std::string& task_id : tasks) {
    Requeue(task_id, absl::StrCat("worker ", it->second.info.name(), " ", reason), deferred);
  }
  workers_.erase(worker_id);
}

void BuildScheduler::Tick(absl::Time now) {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> silent;
    for (const auto& [id, worker] : workers_) {
      if (now - worker.last_heartbeat > options_.heartbeat_timeout) {
        silent.push_back(id);
      }
    }
    for (const std::string& id : silent) {
      DropWorker(
          id,
          absl::StrCat("sent no heartbeat for ", absl::FormatDuration(options_.heartbeat_timeout)),
          deferred);
    }
    std::vector<std::string> overdue;
    for (const auto& [task_id, task] : tasks_) {
      if (now - task.leased_at > options_.task_timeout + options_.heartbeat_timeout) {
        overdue.push_back(task_id);
      }
    }
    for (const std::string& task_id : overdue) {
      Requeue(task_id, "it ran past the task timeout", deferred);
    }
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (it->deadline <= now || !workers_.count(it->worker_id)) {
        deferred.leases.emplace_back(std::move(it->callback), std::nullopt);
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
    Dispatch(now, deferred);
  }
  deferred.Run();
}

v1::ClusterStatus BuildScheduler::Status(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  v1::ClusterStatus status;
  for (const auto& [id, worker] : workers_) {
    auto* out = status.add_workers();
    out->set_name(worker.info.name());
    *out->mutable_toolchain() = worker.info.toolchain();
    out->set_memory_cap_bytes(worker.info.memory_cap_bytes());
    out->set_slots(worker.info.slots());
    out->set_running_tasks(worker.tasks.size());
    out->set_tasks_completed(worker.completed);
    out->set_seconds_since_heartbeat(absl::ToInt64Seconds(now - worker.last_heartbeat));
  }
  status.set_active_builds(builds_.size());
  status.set_queued_units(queue_.size());
  status.set_running_units(tasks_.size());
  return status;
}

}  // namespace distcc_cuda::coordinator
