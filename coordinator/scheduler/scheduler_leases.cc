// SPDX-License-Identifier: Apache-2.0
// The scheduler's leases: handing a worker its next unit (by admission.h's
// rules), parked lease requests, and taking units back from
// leases that ended without a result (a lost worker, a failed start).
#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "coordinator/scheduler/ids.h"
#include "coordinator/scheduler/scheduler.h"
#include "spdlog/fmt/fmt.h"

namespace distcc_cuda::coordinator {

UnitNeeds BuildScheduler::NeedsOf(const UnitState& unit) {
  return UnitNeeds{unit.planned.demand.peak_bytes, unit.planned.demand.wall, unit.reservation_floor,
                   unit.alone, unit.needs_cap_above};
}

std::vector<RunningUnit> BuildScheduler::RunningOn(const WorkerState& worker) const {
  std::vector<RunningUnit> running;
  for (const std::string& task_id : worker.tasks) {
    const TaskState& task = tasks_.at(task_id);
    auto build = builds_.find(task.build_id);
    absl::Duration wall = build == builds_.end()
                              ? absl::ZeroDuration()
                              : build->second.units[task.unit_index].planned.demand.wall;
    running.push_back(RunningUnit{task.leased_at, wall, task.reserved_bytes});
  }
  return running;
}

namespace {

const std::string& CarefulGroup(const PlannedUnit& planned) {
  return planned.closure.empty() ? planned.family : planned.closure;
}

}  // namespace

bool BuildScheduler::StartsCarefully(const PlannedUnit& planned) const {
  return options_.memory_admission && options_.careful_start_units > 0 &&
         planned.demand.basis < PredictionBasis::kPrior;
}

std::map<std::string, int> BuildScheduler::RunningCarefully() const {
  std::map<std::string, int> running;
  for (const auto& [id, task] : tasks_) {
    auto build = builds_.find(task.build_id);
    if (build == builds_.end()) continue;
    const PlannedUnit& planned = build->second.units[task.unit_index].planned;
    if (StartsCarefully(planned)) ++running[CarefulGroup(planned)];
  }
  return running;
}

bool BuildScheduler::HoldsItsShare(const BuildState& build,
                                   std::optional<std::map<std::string, int>>& running) const {
  if (!build.open || build.share_to_come <= 0) return false;
  if (!running) {
    running.emplace();
    for (const auto& [id, task] : tasks_) ++(*running)[task.build_id];
  }
  const int slots = workers_.Capacity(build.toolchain_digest).total_slots;
  const int allowed =
      std::max(1, static_cast<int>(static_cast<double>(slots) * (1 - build.share_to_come)));
  return (*running)[build.id] >= allowed;
}

std::optional<v1::Task> BuildScheduler::TakeTaskFor(const std::string& worker_id, absl::Time now,
                                                    Deferred& deferred) {
  WorkerState& worker = *workers_.Find(worker_id);
  if (static_cast<int>(worker.tasks.size()) >= worker.info.slots()) return std::nullopt;
  PlaceMovedUnits();
  // The first unit in priority order that fits what the worker has left.
  // When the first unit of all has to wait for memory here, smaller units
  // fill in behind it only if they end before it could start, or leave it
  // room (EASY backfilling): a large unit is not starved by small ones.
  bool first = true;
  std::optional<BackfillWindow> window;
  std::optional<std::map<std::string, int>> careful;  // counted once needed
  std::optional<std::map<std::string, int>> per_build;
  std::map<std::string, bool> holding;  // per build, asked once
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    BuildState& build = builds_.at(it->first);
    if (!HasToolchain(worker.info, build.toolchain_digest)) continue;
    int index = it->second;
    UnitState& unit = build.units[index];
    if (unit.refused_by.count(worker_id) || unit.planned.avoid_peers.count(worker.peer.name)) {
      continue;
    }
    if (build.open && build.share_to_come > 0) {
      auto [holds, fresh] = holding.try_emplace(build.id, false);
      if (fresh) holds->second = HoldsItsShare(build, per_build);
      if (holds->second) continue;
    }
    if (StartsCarefully(unit.planned)) {
      // Nothing measured tells what it needs: a few of its kind at once
      // until the first reports and the rest are predicted from it.
      if (!careful) careful = RunningCarefully();
      int& running = (*careful)[CarefulGroup(unit.planned)];
      if (running >= options_.careful_start_units) continue;
    }
    const UnitNeeds needs = NeedsOf(unit);
    std::optional<int64_t> reservation = Admission(needs, worker.Load(), options_.memory_admission);
    if (first) {
      first = false;
      if (!reservation && options_.memory_admission) {
        window = WindowFor(needs, worker.Load(), RunningOn(worker), now);
      }
    }
    if (!reservation || !BackfillAllows(window, needs, *reservation, now)) continue;
    queue_.erase(it);
    unit.phase = UnitPhase::kRunning;
    ++unit.attempts;
    unit.leased_at = Now();
    metrics_->UnitLeased(Now() - unit.queued_at);
    std::string task_id = NewId('t', epoch_);
    tasks_[task_id] = TaskState{build.id, index, worker_id, now, *reservation, false, std::nullopt};
    worker.tasks.insert(task_id);
    worker.reserved_bytes += *reservation;
    build.workers_used.insert(worker.info.name());
    v1::Task task;
    task.set_task_id(task_id);
    task.set_build_id(build.id);
    task.set_toolchain_digest(build.toolchain_digest);
    *task.mutable_unit() = WholeUnit(unit);
    task.set_timeout_ms(absl::ToInt64Milliseconds(options_.task_timeout));
    task.set_reserved_bytes(*reservation);
    v1::BuildEvent event;
    auto* started = event.mutable_unit_started();
    started->set_unit_name(unit.planned.unit.name());
    started->set_worker_name(worker.info.name());
    started->set_attempt(unit.attempts);
    started->set_reserved_bytes(*reservation);
    started->set_leased_unix_micros(absl::ToUnixMicros(Now()));
    deferred.events.emplace_back(build.sink, std::move(event));
    return task;
  }
  return std::nullopt;
}

void BuildScheduler::Dispatch(absl::Time now, Deferred& deferred) {
  if (in_grace_) {
    if (now < offer_after_) return;
    in_grace_ = false;
  }
  parked_.Serve([&](const std::string& id) { return workers_.Find(id) == nullptr; },
                [&](const std::string& id) { return TakeTaskFor(id, now, deferred); },
                [&] { return !queue_.empty(); }, deferred.leases);
}

void BuildScheduler::OfferAfterGrace(absl::Duration most) {
  absl::Time until;
  {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&in_grace_), most)) return;
    until = offer_after_;
  }
  absl::SleepFor(until - absl::Now());
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    Dispatch(absl::Now(), deferred);
  }
  RunDeferred(deferred);
}

std::optional<TaskState> BuildScheduler::EndTask(const std::string& task_id) {
  auto task_it = tasks_.find(task_id);
  if (task_it == tasks_.end()) return std::nullopt;
  TaskState task = task_it->second;
  tasks_.erase(task_it);
  if (WorkerState* worker = workers_.Find(task.worker_id); worker != nullptr) {
    worker->tasks.erase(task_id);
    worker->reserved_bytes -= task.reserved_bytes;
  }
  return task;
}

void BuildScheduler::Requeue(const std::string& task_id, const std::string& reason,
                             Deferred& deferred, bool count_as_loss) {
  std::optional<TaskState> task = EndTask(task_id);
  if (!task) return;
  auto build_it = builds_.find(task->build_id);
  if (build_it == builds_.end()) return;
  BuildState& build = build_it->second;
  UnitState& unit = build.units[task->unit_index];
  const std::string& name = unit.planned.unit.name();
  const WorkerState* worker = workers_.Find(task->worker_id);
  LogFields fields{{"build", build.id},
                   {"unit", name},
                   {"worker", worker != nullptr ? worker->info.name() : ""}};
  if (count_as_loss && ++unit.losses >= options_.max_attempts) {
    v1::TaskResult result;
    result.set_outcome(v1::TASK_FAILED_TO_START);
    result.set_error_message(absl::StrCat("unit ", name, " was lost ", unit.losses,
                                          " times (last: ", reason, "); giving up"));
    FinishUnit(build, task->unit_index, result, false, deferred);
    return;
  }
  deferred.Warn(fmt::format("re-queueing unit {}: {}", name, reason));
  metrics_->UnitRequeued();
  unit.phase = UnitPhase::kQueued;
  unit.queued_at = Now();
  queue_.PushFront({build.id, task->unit_index});
  v1::BuildEvent event;
  event.mutable_unit_requeued()->set_unit_name(name);
  event.mutable_unit_requeued()->set_reason(reason);
  event.mutable_unit_requeued()->set_new_reservation_bytes(
      std::max(unit.planned.demand.peak_bytes, unit.reservation_floor));
  deferred.events.emplace_back(build.sink, std::move(event));
}

void BuildScheduler::DropWorker(const std::string& worker_id, const std::string& reason,
                                absl::Time now, Deferred& deferred, bool count_as_loss) {
  const WorkerState* worker = workers_.Find(worker_id);
  if (worker == nullptr) return;
  const std::string name = worker->info.name();
  LogFields fields{{"worker", name}};
  // A worker that says it stops is news, not trouble.
  if (count_as_loss) {
    deferred.Warn(fmt::format("worker {} dropped: {}", worker_id, reason));
  } else {
    deferred.Info(fmt::format("worker {} {}", worker_id, reason));
  }
  const std::set<std::string> tasks = worker->tasks;
  for (const std::string& task_id : tasks) {
    Requeue(task_id, absl::StrCat("worker ", name, " ", reason), deferred, count_as_loss);
  }
  workers_.Remove(worker_id);
  // A build whose toolchain no connected worker has any more waits a grace
  // period for one to come back (a worker that was only paused registers
  // again), then fails rather than leave the client waiting.
  for (auto& [build_id, build] : builds_) {
    if (!workers_.Serves(build.toolchain_digest) && !build.stranded_since) {
      build.stranded_since = now;
      build.stranded_reason = absl::StrCat("the last, ", name, ", ", reason);
    }
  }
}

}  // namespace distcc_cuda::coordinator
