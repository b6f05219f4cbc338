// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "common/digest.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/terminal_text.h"
#include "common/toolchain.h"
#include "coordinator/ids.h"
#include "coordinator/retry_ladder.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::coordinator {

void BuildScheduler::Deferred::DeliverEvents() {
  for (auto& [sink, event] : events) sink(std::move(event));
  events.clear();
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
  if (cross_check_) {
    for (CrossCheckCandidate& candidate : deferred.cross_checks) cross_check_(std::move(candidate));
  }
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
      metrics_(metrics != nullptr ? std::move(metrics) : std::make_shared<SchedulerMetrics>()) {}

namespace {

// Limits on what a registering worker says about itself: it is shown to
// people (status, summaries) and sizes the scheduler's work.
constexpr int kMaxSlots = 4096;
constexpr int64_t kMaxCapBytes = int64_t{1} << 50;  // 1 PiB
constexpr size_t kMaxDescription = 512;
// Workers one certificate may have registered at once (a Compose deployment
// shares one worker certificate among its scaled workers).
constexpr int kMaxWorkersPerPeer = 1024;

// Text a terminal shows as it is (no controls, escapes or bidirectional
// overrides), within `limit` bytes.
bool Printable(const std::string& text, size_t limit) {
  return text.size() <= limit && IsTerminalSafe(text);
}

}  // namespace

namespace {

// What the scheduler reads of a unit it holds: its name, outputs and
// architecture part.
v1::CompileUnit CompactUnit(const v1::CompileUnit& unit) {
  v1::CompileUnit compact;
  compact.set_name(unit.name());
  *compact.mutable_output_paths() = unit.output_paths();
  if (unit.has_architecture_part()) {
    *compact.mutable_architecture_part() = unit.architecture_part();
  }
  return compact;
}

}  // namespace

BuildScheduler::UnitState BuildScheduler::Hold(PlannedUnit planned, bool cached) {
  UnitState held;
  // A cached unit is finished at once, its whole unit in its event.
  if (!cached) {
    held.unit_bytes = planned.unit.SerializeAsString();
    planned.unit = CompactUnit(planned.unit);
  }
  held.planned = std::move(planned);
  return held;
}

std::vector<BuildScheduler::UnitState> BuildScheduler::HoldAll(
    std::vector<PlannedUnit> units, const std::map<int, v1::TaskResult>& cached) {
  std::vector<UnitState> held;
  held.reserve(units.size());
  for (size_t i = 0; i < units.size(); ++i) {
    held.push_back(Hold(std::move(units[i]), cached.count(i) != 0));
  }
  return held;
}

v1::CompileUnit BuildScheduler::WholeUnit(const UnitState& unit) {
  if (unit.unit_bytes.empty()) return unit.planned.unit;
  v1::CompileUnit whole;
  // Its own serialization, made by Hold: it parses.
  whole.ParseFromString(unit.unit_bytes);
  return whole;
}

absl::StatusOr<BuildScheduler::WorkerState*> BuildScheduler::WorkerOf(const std::string& worker_id,
                                                                      const WorkerPeer& peer) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker ", worker_id, " is not registered; register again"));
  }
  if (it->second.peer.name != peer.name) {
    spdlog::warn("{} used the id of worker {} ({}); refused", peer.name, it->second.info.name(),
                 it->second.peer.name);
    return absl::PermissionDeniedError(
        absl::StrCat("worker ", worker_id, " was registered by another peer"));
  }
  return &it->second;
}

absl::StatusOr<const BuildScheduler::WorkerState*> BuildScheduler::WorkerOf(
    const std::string& worker_id, const WorkerPeer& peer) const {
  return const_cast<BuildScheduler*>(this)->WorkerOf(worker_id, peer);
}

absl::StatusOr<std::string> BuildScheduler::RegisterWorker(const v1::RegisterWorkerRequest& request,
                                                           absl::Time now, const WorkerPeer& peer) {
  const std::string& name = request.name();
  if (name.empty() || name.size() > 64 || !std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
               c == '-';
      })) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker name '", absl::CHexEscape(name.substr(0, 64)),
                     "' is not 1 to 64 of letters, digits and _ . -"));
  }
  if (request.slots() <= 0 || request.memory_cap_bytes() <= 0 || request.slots() > kMaxSlots ||
      request.memory_cap_bytes() > kMaxCapBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker '", name, "' offers ", request.slots(), " slots and a memory cap of ",
                     request.memory_cap_bytes(), " bytes; both must be positive (at most ",
                     kMaxSlots, " slots and 1 PiB)"));
  }
  if (request.toolchain().digest().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker '", name, "' sent no toolchain fingerprint"));
  }
  const v1::ToolchainFingerprint& toolchain = request.toolchain();
  for (const std::string* text :
       {&request.memory_mechanism(), &request.sandbox(), &toolchain.nvcc_release(),
        &toolchain.nvcc_build(), &toolchain.nvcc_version(), &toolchain.nvcc_path(),
        &toolchain.host_compiler(), &toolchain.digest(), &toolchain.cuda_version_header()}) {
    if (!Printable(*text, kMaxDescription)) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker '", name, "' describes itself with control characters or over ",
                       kMaxDescription, " bytes"));
    }
  }
  LockedSection lock(this);
  int of_peer = 0;
  for (const auto& [other_id, other] : workers_) of_peer += other.peer.name == peer.name;
  if (of_peer >= kMaxWorkersPerPeer) {
    return absl::ResourceExhaustedError(
        absl::StrCat(peer.name, " has ", of_peer,
                     " workers registered, the most one certificate may have; "
                     "give each machine's worker a certificate of its own"));
  }
  std::string id = NewId('w', epoch_);
  WorkerState state;
  state.info = request;
  state.peer = peer;
  state.last_heartbeat = now;
  workers_[id] = std::move(state);
  for (auto& [build_id, build] : builds_) {
    if (build.toolchain_digest == request.toolchain().digest()) build.stranded_since.reset();
  }
  LogFields fields{{"worker", request.name()}};
  spdlog::info("worker {} joined: {} slots, cap {} bytes, {}", id, request.slots(),
               request.memory_cap_bytes(), DescribeToolchain(request.toolchain()));
  return id;
}

absl::Status BuildScheduler::Heartbeat(const v1::HeartbeatRequest& request, absl::Time now,
                                       const WorkerPeer& peer, v1::HeartbeatResponse* response) {
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    ASSIGN_OR_RETURN(WorkerState * worker, WorkerOf(request.worker_id(), peer));
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
    RETURN_IF_ERROR(WorkerOf(worker_id, peer).status());
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
    RETURN_IF_ERROR(WorkerOf(worker_id, peer).status());
    std::optional<v1::Task> task = TakeTaskFor(worker_id, now, deferred);
    if (task || deadline <= now) {
      deferred.leases.emplace_back(std::move(callback), std::move(task));
    } else {
      parked_.push_back(ParkedLease{worker_id, deadline, std::move(callback)});
    }
  }
  RunDeferred(deferred);
  return absl::OkStatus();
}

void BuildScheduler::CancelLeaseRequest(const std::string& worker_id) {
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (it->worker_id == worker_id) {
        deferred.leases.emplace_back(std::move(it->callback), std::nullopt);
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
  }
  RunDeferred(deferred);
}

std::optional<int64_t> BuildScheduler::Admission(const UnitState& unit,
                                                 const WorkerState& worker) const {
  WorkerLoad load{worker.info.memory_cap_bytes(), worker.reserved_bytes, worker.info.slots(),
                  static_cast<int>(worker.tasks.size())};
  if (!options_.memory_admission) {
    return load.running < load.slots ? std::optional<int64_t>(0) : std::nullopt;
  }
  if (unit.needs_cap_above > 0 && load.cap_bytes <= unit.needs_cap_above) return std::nullopt;
  if (unit.alone) {
    // The whole worker, and only when nothing else runs there.
    if (load.running > 0) return std::nullopt;
    return ReservationOn(load, load.cap_bytes);
  }
  int64_t reservation =
      ReservationOn(load, std::max(unit.planned.demand.peak_bytes, unit.reservation_floor));
  if (!Admits(load, reservation)) return std::nullopt;
  return reservation;
}

std::optional<BuildScheduler::BackfillWindow> BuildScheduler::WindowFor(const UnitState& head,
                                                                        const WorkerState& worker,
                                                                        absl::Time now) const {
  int64_t cap = worker.info.memory_cap_bytes();
  if (!options_.memory_admission || head.alone ||
      (head.needs_cap_above > 0 && cap <= head.needs_cap_above)) {
    return std::nullopt;
  }
  WorkerLoad load{cap, worker.reserved_bytes, worker.info.slots(),
                  static_cast<int>(worker.tasks.size())};
  int64_t need =
      ReservationOn(load, std::max(head.planned.demand.peak_bytes, head.reservation_floor));
  int64_t usable = cap - AdmissionHeadroom(cap);
  // The running units in the order their predicted ends free their memory.
  std::vector<std::pair<absl::Time, int64_t>> ends;
  for (const std::string& task_id : worker.tasks) {
    const TaskState& task = tasks_.at(task_id);
    auto build = builds_.find(task.build_id);
    absl::Duration wall = build == builds_.end()
                              ? absl::ZeroDuration()
                              : build->second.units[task.unit_index].planned.demand.wall;
    ends.emplace_back(std::max(now, task.leased_at + wall), task.reserved_bytes);
  }
  std::sort(ends.begin(), ends.end());
  int64_t reserved = worker.reserved_bytes;
  for (const auto& [end, bytes] : ends) {
    reserved -= bytes;
    if (usable - reserved >= need) return BackfillWindow{end, usable - reserved - need};
  }
  return std::nullopt;
}

std::optional<v1::Task> BuildScheduler::TakeTaskFor(const std::string& worker_id, absl::Time now,
                                                    Deferred& deferred) {
  WorkerState& worker = workers_.at(worker_id);
  if (static_cast<int>(worker.tasks.size()) >= worker.info.slots()) return std::nullopt;
  PlaceMovedUnits();
  // The first unit in priority order that fits what the worker has left.
  // When the first unit of all has to wait for memory here, smaller units
  // fill in behind it only if they end before it could start, or leave it
  // room (EASY backfilling): a large unit is not starved by small ones.
  bool first = true;
  std::optional<BackfillWindow> window;
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    BuildState& build = builds_.at(it->first);
    if (build.toolchain_digest != worker.info.toolchain().digest()) continue;
    int index = it->second;
    UnitState& unit = build.units[index];
    if (unit.refused_by.count(worker_id) || unit.planned.avoid_peers.count(worker.peer.name)) {
      continue;
    }
    std::optional<int64_t> reservation = Admission(unit, worker);
    if (first) {
      first = false;
      if (!reservation) window = WindowFor(unit, worker, now);
    }
    if (!reservation) continue;
    if (window && now + unit.planned.demand.wall > window->start &&
        *reservation > window->leftover_bytes) {
      continue;
    }
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

std::optional<BuildScheduler::TaskState> BuildScheduler::EndTask(const std::string& task_id) {
  auto task_it = tasks_.find(task_id);
  if (task_it == tasks_.end()) return std::nullopt;
  TaskState task = task_it->second;
  tasks_.erase(task_it);
  if (auto worker = workers_.find(task.worker_id); worker != workers_.end()) {
    worker->second.tasks.erase(task_id);
    worker->second.reserved_bytes -= task.reserved_bytes;
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
  auto worker = workers_.find(task->worker_id);
  LogFields fields{{"build", build.id},
                   {"unit", name},
                   {"worker", worker != workers_.end() ? worker->second.info.name() : ""}};
  if (count_as_loss && ++unit.losses >= options_.max_attempts) {
    v1::TaskResult result;
    result.set_outcome(v1::TASK_FAILED_TO_START);
    result.set_error_message(absl::StrCat("unit ", name, " was lost ", unit.losses,
                                          " times (last: ", reason, "); giving up"));
    FinishUnit(build, task->unit_index, result, false, deferred);
    return;
  }
  spdlog::warn("re-queueing unit {}: {}", name, reason);
  metrics_->UnitRequeued();
  unit.phase = UnitPhase::kQueued;
  unit.queued_at = Now();
  queue_.emplace_front(build.id, task->unit_index);
  v1::BuildEvent event;
  event.mutable_unit_requeued()->set_unit_name(name);
  event.mutable_unit_requeued()->set_reason(reason);
  event.mutable_unit_requeued()->set_new_reservation_bytes(
      std::max(unit.planned.demand.peak_bytes, unit.reservation_floor));
  deferred.events.emplace_back(build.sink, std::move(event));
}

void BuildScheduler::RetryAfterMemoryKill(const std::string& task_id, const v1::TaskResult& result,
                                          Deferred& deferred) {
  const TaskState task = tasks_.at(task_id);
  const WorkerState& worker = workers_.at(task.worker_id);
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
    LearnFrom(unit.planned);
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
                  LargestCap(build.toolchain_digest),
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
      if (SplitAfterMemoryKill(task_id, killed, deferred)) return;
      [[fallthrough]];
    case RetryRung::kGiveUp:
      EndTask(task_id);
      v1::TaskResult failed = result;
      failed.set_error_message(absl::StrCat(
          "unit ", name, " peaked at ", FormatByteSize(unit.peak_seen),
          ", above what every worker can give it (largest cap ", FormatByteSize(kill.largest_cap),
          "); split it (fewer instantiations or architectures per unit, lower --threads) or add "
          "a worker with more memory"));
      FinishUnit(build, task.unit_index, failed, false, deferred);
      return;
  }
  Requeue(task_id, absl::StrCat(killed, "; ", DescribeRetry(step, cap)), deferred,
          /*count_as_loss=*/false);
}

bool BuildScheduler::SplitAfterMemoryKill(const std::string& task_id, const std::string& killed,
                                          Deferred& deferred) {
  const TaskState& task = tasks_.at(task_id);
  BuildState& build = builds_.at(task.build_id);
  const UnitState& unit = build.units[task.unit_index];
  // Fewer instantiations per unit: the halves may fit where it did not.
  absl::StatusOr<std::vector<PlannedUnit>> parts = unit.planned.split();
  if (!parts.ok()) {
    spdlog::warn("cannot split unit {}: {}", unit.planned.unit.name(), parts.status().ToString());
    return false;
  }
  if (parts->size() <= 1) return false;
  for (const PlannedUnit& part : *parts) {
    for (const UnitState& other : build.units) {
      if (other.planned.unit.name() == part.unit.name()) return false;
    }
  }
  std::string why = (*parts)[0].unit.has_architecture_part()
                        ? absl::StrCat(killed, "; no worker has more memory, so its ",
                                       parts->size(), " targets compile as units of their own")
                        : absl::StrCat(killed, "; no worker has more memory, so its ",
                                       unit.planned.instantiations, " instantiations are split");
  SplitUnit(task_id, std::move(*parts), why, deferred);
  return true;
}

absl::Time BuildScheduler::Now() const { return options_.clock(); }

int64_t BuildScheduler::LargestCap(const std::string& toolchain_digest) const {
  int64_t largest = 0;
  for (const auto& [id, worker] : workers_) {
    if (worker.info.toolchain().digest() == toolchain_digest) {
      largest = std::max(largest, worker.info.memory_cap_bytes());
    }
  }
  return largest;
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

absl::Status BuildScheduler::RejectResult(const std::string& worker_id, const std::string& task_id,
                                          const std::string& why, absl::Time now,
                                          const WorkerPeer& peer) {
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    ASSIGN_OR_RETURN(WorkerState * worker, WorkerOf(worker_id, peer));
    auto task = tasks_.find(task_id);
    if (task == tasks_.end() || task->second.worker_id != worker_id) {
      return absl::NotFoundError(absl::StrCat("task ", task_id, " is not leased to ", worker_id));
    }
    LogFields fields{{"build", task->second.build_id}, {"worker", worker->info.name()}};
    if (auto build = builds_.find(task->second.build_id); build != builds_.end()) {
      build->second.units[task->second.unit_index].refused_by.insert(worker_id);
    }
    spdlog::warn("refused the report of worker {} ({}) for task {}: {}", worker->info.name(),
                 worker->peer.name, task_id, why);
    Requeue(task_id,
            absl::StrCat("the report of worker ", worker->info.name(), " was refused (", why,
                         "); the unit runs elsewhere"),
            deferred);
    Dispatch(now, deferred);
  }
  RunDeferred(deferred);
  return absl::OkStatus();
}

absl::Status BuildScheduler::ReportResult(const v1::ReportResultRequest& request, absl::Time now,
                                          const WorkerPeer& peer) {
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
    ASSIGN_OR_RETURN(WorkerState * worker, WorkerOf(request.worker_id(), peer));
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
    result.set_worker_name(worker->info.name());
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
      RetryAfterMemoryKill(request.task_id(), result, deferred);
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
    } else {
      std::optional<TaskState> task = EndTask(request.task_id());
      ++workers_.at(task->worker_id).completed;
      auto build_it = builds_.find(task->build_id);
      if (build_it != builds_.end()) {
        const PlannedUnit& planned = build_it->second.units[task->unit_index].planned;
        if (history_ != nullptr && result.outcome() == v1::TASK_COMPLETED) {
          history_->Learn(planned.identity, planned.family, result.peak_memory_bytes(),
                          absl::Milliseconds(result.wall_time_ms()), planned.instantiations,
                          planned.closure, planned.closure_bytes, planned.parallel);
          deferred.learnt = true;
          LearnFrom(planned);
        }
        FinishUnit(build_it->second, task->unit_index, result, false, deferred,
                   /*cacheable=*/worker->peer.authenticated);
      }
    }
    Dispatch(now, deferred);
  }
  RunDeferred(deferred);
  return absl::OkStatus();
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
  // Done: nothing reads more of it than its name and outputs again.
  std::string().swap(unit.unit_bytes);
  unit.planned.unit = CompactUnit(unit.planned.unit);
  unit.planned.split = nullptr;
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
  spdlog::info("build {} finished: {} units, {} failed, {} cached", build.id, build.units.size(),
               build.failed, build.cached);
  StopWaitingForHistory(build.id);
  builds_.erase(build.id);
  return true;
}

void BuildScheduler::AdmitUnits(const std::string& build_id, size_t first,
                                std::map<int, v1::TaskResult> cached, absl::Time now,
                                Deferred& deferred) {
  BuildState& build = builds_.at(build_id);
  std::vector<int> ready;
  for (size_t i = first; i < build.units.size(); ++i) {
    if (!cached.count(i - first)) ready.push_back(i);
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

absl::StatusOr<std::string> BuildScheduler::SubmitBuild(const std::string& build_name,
                                                        const v1::ToolchainFingerprint& toolchain,
                                                        std::vector<PlannedUnit> units,
                                                        std::map<int, v1::TaskResult> cached,
                                                        BuildEventSink sink, absl::Time now,
                                                        bool more_to_come) {
  const size_t count = units.size();
  const bool all_cached = !more_to_come && cached.size() == count;
  // Held, and named for the client, before the lock (see AddUnits).
  std::vector<UnitState> held = HoldAll(std::move(units), cached);
  v1::BuildEvent accepted;
  for (const UnitState& unit : held) {
    accepted.mutable_accepted()->add_unit_names(unit.planned.unit.name());
  }
  Deferred deferred;
  std::string id;
  {
    LockedSection lock(this, &deferred);
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
    const bool starting_up = workers_.empty() && options_.startup_grace > absl::ZeroDuration() &&
                             now - created_ < options_.startup_grace;
    if (eligible == 0 && !all_cached && !starting_up) {
      if (workers_.empty()) {
        return absl::FailedPreconditionError(
            "no worker is connected to the coordinator; start one with "
            "distcc-cuda-worker --coordinator HOST:PORT");
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "no connected worker has the build's toolchain ", DescribeToolchain(toolchain),
          "; connected workers have: ", absl::StrJoin(others, "; ")));
    }
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
    spdlog::info("build {} ('{}'): {} units, {} cached, {} eligible workers{}", id, build_name,
                 build.units.size(), cached.size(), eligible,
                 build.open ? "; more units follow" : "");
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
  std::vector<UnitState> held = HoldAll(std::move(units), cached);
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
    spdlog::info("build {}: {} units added, {} cached{}", build_id, count, cached.size(),
                 last ? "; its last part" : "");
    if (count == 0) {
      EndBuildIfDone(build, deferred);
    } else {
      AdmitUnits(build_id, first, std::move(cached), now, deferred);
    }
  }
  RunDeferred(deferred);
  return absl::OkStatus();
}

void BuildScheduler::SplitUnit(const std::string& task_id, std::vector<PlannedUnit> parts,
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
  spdlog::warn("splitting unit {} into {} units: {}", old.planned.unit.name(), parts.size(),
               reason);
  // What the parent taught: a half needs at least its share of the peak
  // seen, and the parent already failed alone on the largest worker.
  int64_t peak_seen = old.peak_seen;
  int parent_instantiations = std::max(1, old.planned.instantiations);
  int parent_parallel = std::max(1, old.planned.parallel);
  std::vector<int> fresh;
  std::vector<std::pair<int, v1::TaskResult>> cached;
  for (PlannedUnit& part : parts) {  // `old` is not used past here: units grows
    split->add_into(part.unit.name());
    int index = build.units.size();
    std::optional<v1::TaskResult> hit =
        lookup_result_ ? lookup_result_(part.action_digest) : std::nullopt;
    UnitState state = Hold(std::move(part), hit.has_value());
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

void BuildScheduler::WaitForHistory(const std::string& build_id, int unit_index) {
  if (history_ == nullptr) return;
  const PlannedUnit& planned = builds_.at(build_id).units[unit_index].planned;
  const PredictionBasis basis = planned.demand.basis;
  if (!planned.closure.empty() && basis < PredictionBasis::kSameClosure) {
    waiting_[planned.closure].units.emplace_back(build_id, unit_index);
  }
  if (basis < PredictionBasis::kSimilarUnits) {
    waiting_[planned.family].units.emplace_back(build_id, unit_index);
  }
}

void BuildScheduler::StopWaitingForHistory(const std::string& build_id) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    std::vector<std::pair<std::string, int>>& units = it->second.units;
    units.erase(std::remove_if(units.begin(), units.end(),
                               [&](const auto& entry) { return entry.first == build_id; }),
                units.end());
    it = units.empty() ? waiting_.erase(it) : std::next(it);
  }
}

void BuildScheduler::LearnFrom(const PlannedUnit& measured) {
  const std::pair<const std::string*, PredictionBasis> keys[] = {
      {&measured.closure, PredictionBasis::kSameClosure},
      {&measured.family, PredictionBasis::kSimilarUnits}};
  for (const auto& [key, level] : keys) {
    auto waiting = waiting_.find(*key);
    if (key->empty() || waiting == waiting_.end()) continue;
    const int runs = ++waiting->second.measured;
    if ((runs & (runs - 1)) != 0) continue;  // on the 1st, 2nd, 4th, ... run
    // The same for every unit of one instantiation: asked once.
    std::optional<UnitDemand> one = history_->PredictFromGroup(*key, level, 1);
    if (!one) continue;
    int repredicted = 0;
    std::vector<std::pair<std::string, int>> still;
    for (const auto& [build_id, index] : waiting->second.units) {
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
      planned.demand = planned.instantiations <= 1
                           ? *one
                           : *history_->PredictFromGroup(*key, level, planned.instantiations);
      // A unit moves when its predicted time changed by more than a second
      // and a fifth: the order is coarse, and moving costs a pass over the queue.
      const absl::Duration change = absl::AbsDuration(planned.demand.wall - before);
      if (change > std::max(absl::Seconds(1), before / 5) && !unit.moving) {
        unit.moving = true;
        moving_.emplace_back(build_id, index);
      }
      ++repredicted;
      still.emplace_back(build_id, index);
    }
    if (repredicted > 0) {
      spdlog::info("{} queued units predicted again from {} measured run{} of {} {}", repredicted,
                   runs, runs == 1 ? "" : "s",
                   level == PredictionBasis::kSameClosure ? "units with the same headers as"
                                                          : "units similar to",
                   measured.unit.name());
    }
    // Later runs refine the quantile; after kRelearnRuns it has settled.
    if (still.empty() || runs >= kRelearnRuns) {
      waiting_.erase(waiting);
    } else {
      waiting->second.units = std::move(still);
    }
  }
}

void BuildScheduler::PlaceMovedUnits() {
  if (moving_.empty()) return;
  // Only what is in the queue moves (a queued unit is there unless its
  // build is being taken out of it).
  std::deque<std::pair<std::string, int>> kept;
  std::vector<std::pair<std::string, int>> moving;
  for (auto& entry : queue_) {
    if (builds_.at(entry.first).units[entry.second].moving) {
      moving.push_back(entry);
    } else {
      kept.push_back(entry);
    }
  }
  for (const auto& [build_id, index] : moving_) {
    if (auto build = builds_.find(build_id); build != builds_.end()) {
      build->second.units[index].moving = false;
    }
  }
  moving_.clear();
  queue_ = std::move(kept);
  MergeIntoQueue(std::move(moving));
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
  MergeIntoQueue(std::move(fresh));
}

void BuildScheduler::MergeIntoQueue(std::vector<std::pair<std::string, int>> fresh) {
  // Each entry with its predicted wall, looked up once (a build's lookup
  // per comparison made sorting 100,000 units take a third of a second).
  using Keyed = std::pair<absl::Duration, std::pair<std::string, int>>;
  auto keyed = [this](std::pair<std::string, int> entry) {
    const absl::Duration wall = builds_.at(entry.first).units[entry.second].planned.demand.wall;
    return Keyed(wall, std::move(entry));
  };
  std::vector<Keyed> arriving;
  arriving.reserve(fresh.size());
  for (auto& entry : fresh) arriving.push_back(keyed(std::move(entry)));
  std::vector<Keyed> queued;
  queued.reserve(queue_.size());
  for (auto& entry : queue_) queued.push_back(keyed(std::move(entry)));
  auto longer = [](const Keyed& a, const Keyed& b) { return a.first > b.first; };
  // Longest first; among equal predictions, what came first stays first.
  std::stable_sort(arriving.begin(), arriving.end(), longer);
  std::deque<std::pair<std::string, int>> merged;
  auto next = queued.begin();
  for (Keyed& entry : arriving) {
    for (; next != queued.end() && !longer(entry, *next); ++next) {
      merged.push_back(std::move(next->second));
    }
    merged.push_back(std::move(entry.second));
  }
  for (; next != queued.end(); ++next) merged.push_back(std::move(next->second));
  queue_ = std::move(merged);
}

int BuildScheduler::CancelBuild(const std::string& build_id) {
  // The build's state goes after the lock: a build of 100,000 units takes
  // a while to free, and leases and status would wait for it.
  std::map<std::string, BuildState>::node_type ended;
  LockedSection lock(this);
  auto build = builds_.find(build_id);
  if (build == builds_.end()) return 0;
  int running = 0;
  for (auto& [task_id, task] : tasks_) {
    if (task.build_id != build_id || task.cancelled) continue;
    const v1::CompileUnit& unit = build->second.units[task.unit_index].planned.unit;
    task.cancelled = TaskState::Cancelled{
        build->second.units[task.unit_index].planned.action_digest, build->second.toolchain_digest,
        std::vector<std::string>(unit.output_paths().begin(), unit.output_paths().end())};
    ++running;
  }
  std::vector<int> queued = TakeQueuedUnits(build_id);
  LogFields fields{{"build", build_id}};
  spdlog::warn(
      "build {} cancelled: its client went away or cancelled it; {} queued units dropped, "
      "{} running units being stopped on their workers",
      build_id, queued.size(), running);
  StopWaitingForHistory(build_id);
  KeepRecord(build->second, "cancelled");
  ended = builds_.extract(build);
  return running;
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

std::vector<int> BuildScheduler::TakeQueuedUnits(const std::string& build_id) {
  // One pass: erasing each from the middle of the queue was quadratic.
  std::vector<int> taken;
  std::deque<std::pair<std::string, int>> kept;
  for (auto& entry : queue_) {
    if (entry.first == build_id) {
      taken.push_back(entry.second);
    } else {
      kept.push_back(std::move(entry));
    }
  }
  queue_ = std::move(kept);
  return taken;
}

void BuildScheduler::DropWorker(const std::string& worker_id, const std::string& reason,
                                absl::Time now, Deferred& deferred, bool count_as_loss) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  LogFields fields{{"worker", it->second.info.name()}};
  // A worker that says it stops is news, not trouble.
  if (count_as_loss) {
    spdlog::warn("worker {} dropped: {}", worker_id, reason);
  } else {
    spdlog::info("worker {} {}", worker_id, reason);
  }
  std::set<std::string> tasks = it->second.tasks;
  for (const std::string& task_id : tasks) {
    Requeue(task_id, absl::StrCat("worker ", it->second.info.name(), " ", reason), deferred,
            count_as_loss);
  }
  std::string name = it->second.info.name();
  workers_.erase(worker_id);
  // A build whose toolchain no connected worker has any more waits a grace
  // period for one to come back (a worker that was only paused registers
  // again), then fails rather than leave the client waiting.
  for (auto& [build_id, build] : builds_) {
    bool served = std::any_of(workers_.begin(), workers_.end(), [&](const auto& worker) {
      return worker.second.info.toolchain().digest() == build.toolchain_digest;
    });
    if (!served && !build.stranded_since) {
      build.stranded_since = now;
      build.stranded_reason = absl::StrCat("the last, ", name, ", ", reason);
    }
  }
}

void BuildScheduler::FailStrandedBuilds(absl::Time now, Deferred& deferred) {
  std::vector<std::string> stranded;
  for (const auto& [build_id, build] : builds_) {
    if (build.stranded_since && now - *build.stranded_since > 2 * options_.heartbeat_timeout) {
      stranded.push_back(build_id);
    }
  }
  for (const std::string& build_id : stranded) {
    std::vector<int> queued = TakeQueuedUnits(build_id);
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

void BuildScheduler::Tick(absl::Time now) {
  Deferred deferred;
  {
    LockedSection lock(this, &deferred);
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
  RunDeferred(deferred);
}

ClusterCapacity BuildScheduler::Capacity(const std::string& toolchain_digest) const {
  LockedSection lock(this);
  ClusterCapacity capacity;
  for (const auto& [id, worker] : workers_) {
    if (worker.info.toolchain().digest() != toolchain_digest) continue;
    int64_t cap = worker.info.memory_cap_bytes();
    int64_t usable = cap - AdmissionHeadroom(cap);
    const int64_t per_slot = usable / std::max(1, worker.info.slots());
    capacity.smallest_usable_cap =
        capacity.total_slots == 0 ? usable : std::min(capacity.smallest_usable_cap, usable);
    capacity.smallest_memory_per_slot = capacity.total_slots == 0
                                            ? per_slot
                                            : std::min(capacity.smallest_memory_per_slot, per_slot);
    capacity.total_slots += worker.info.slots();
  }
  return capacity;
}

int BuildScheduler::PeersWith(const std::string& toolchain_digest,
                              const std::set<std::string>& excluding) const {
  LockedSection lock(this);
  std::set<std::string> peers;
  for (const auto& [id, worker] : workers_) {
    if (worker.info.toolchain().digest() == toolchain_digest &&
        !excluding.count(worker.peer.name)) {
      peers.insert(worker.peer.name);
    }
  }
  return peers.size();
}

int BuildScheduler::DropWorkersOf(const std::string& peer, const std::string& reason,
                                  absl::Time now) {
  Deferred deferred;
  int dropped = 0;
  {
    LockedSection lock(this, &deferred);
    std::vector<std::string> ids;
    for (const auto& [id, worker] : workers_) {
      if (worker.peer.name == peer) ids.push_back(id);
    }
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
  for (const auto& [id, worker] : workers_) {
    auto* out = status.add_workers();
    out->set_name(worker.info.name());
    *out->mutable_toolchain() = worker.info.toolchain();
    out->set_memory_cap_bytes(worker.info.memory_cap_bytes());
    out->set_slots(worker.info.slots());
    out->set_running_tasks(worker.tasks.size());
    out->set_tasks_completed(worker.completed);
    out->set_seconds_since_heartbeat(absl::ToInt64Seconds(now - worker.last_heartbeat));
    out->set_memory_mechanism(worker.info.memory_mechanism());
    out->set_sandbox(worker.info.sandbox());
    out->set_reserved_bytes(worker.reserved_bytes);
    out->set_memory_used_bytes(worker.memory_used_bytes);
  }
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
    running->set_worker_name(workers_.at(task.worker_id).info.name());
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

}  // namespace distcc_cuda::coordinator
