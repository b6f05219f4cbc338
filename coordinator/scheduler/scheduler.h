// SPDX-License-Identifier: Apache-2.0
// The coordinator's book of builds, units, workers and leases. It decides
// which worker runs which unit and re-queues the units of workers that go
// silent. Thread-safe; time is passed in, so tests need no sleeps.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/logging.h"
#include "coordinator/memory/memory_model.h"
#include "coordinator/scheduler/admission.h"
#include "coordinator/scheduler/build_book.h"
#include "coordinator/scheduler/build_records.h"
#include "coordinator/scheduler/history_waits.h"
#include "coordinator/scheduler/parked_leases.h"
#include "coordinator/scheduler/scheduler_metrics.h"
#include "coordinator/scheduler/unit_queue.h"
#include "coordinator/scheduler/worker_registry.h"
#include "coordinator/trust/revocations.h"
#include "distcc_cuda/v1/build.pb.h"
#include "distcc_cuda/v1/worker.pb.h"

namespace distcc_cuda::coordinator {

// Stores a successful unit's result under its action digest.
using ResultRecorder = std::function<void(const std::string& action_digest, const v1::TaskResult&)>;
// Finds a stored result by action digest (for units made during a build).
using ResultLookup = std::function<std::optional<v1::TaskResult>(const std::string& action_digest)>;

// SchedulerOptions::arrival_grace of a coordinator (--arrival-grace-ms) and
// of the embedded default.
inline constexpr int kArrivalGraceMs = 50;

struct SchedulerOptions {
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // A worker with no heartbeat for this long is dropped and its units re-queued.
  absl::Duration heartbeat_timeout = absl::Seconds(6);
  absl::Duration task_timeout = absl::Minutes(30);
  // Attempts per unit for infrastructure failures (lost worker, failed start).
  int max_attempts = 3;
  // What a report's stdout and stderr may each bring; the rest is cut with a
  // marker (the worker cuts too; this bounds what a hostile one can send).
  int64_t max_output_bytes = 1 << 20;
  // False: a static job limit, as `ninja -j` (the worker's slots), with no
  // regard for memory and no retry of memory kills. For comparisons only.
  bool memory_admission = true;
  // For this long after the scheduler is made (a coordinator that just
  // started or restarted), a build that finds no worker at all waits for
  // workers to register (again), as a stranded build does, instead of being
  // refused: clients resubmit as soon as a restarted coordinator answers.
  absl::Duration startup_grace = absl::ZeroDuration();
  // The share of freshly compiled units (0 to 1) whose result is handed to
  // the cross-check (SetCrossCheck) to be compiled again by another worker.
  double cross_check_rate = 0;
  // A careful start: of the units of a closure (or family) that nothing
  // measured predicts (no runs here, no measured profile), at most this many
  // run at once until the first of them reports; 0: no limit.
  int careful_start_units = 2;
  // The units of a build submitted whole that reach an empty queue wait
  // this long before the first of them is offered to a worker, so that
  // builds submitted together (a launcher session's burst of builds of one
  // unit, client/scan/scan_cohort.h) are queued side by side and start longest
  // first, not in the order their calls happened to reach us. A grace is
  // not extended by what arrives during it; a build arriving in parts
  // starts none (it keeps its slots by HoldSlotsForTheRest). 0: at once.
  absl::Duration arrival_grace = absl::ZeroDuration();
  // The wall clock of the times it keeps for people (leases, ends, build
  // records), of its ids' epoch and of its start; the times that drive its
  // decisions (heartbeats, deadlines) are passed to each call as `now`.
  std::function<absl::Time()> clock = absl::Now;
};

// A unit whose fresh result is to be compiled again by another worker and
// compared with it (SchedulerOptions::cross_check_rate).
struct CrossCheckCandidate {
  PlannedUnit unit;  // whole, without `split`; not cacheable; avoids its producer
  std::string toolchain_digest;
  v1::TaskResult result;  // what its producer reported
};
using CrossCheckRequest = std::function<void(CrossCheckCandidate)>;

class BuildScheduler {
 public:
  // Measured peaks and times go into `history` (may be null).
  // What it does is counted in `metrics` (null: counted where nobody reads).
  BuildScheduler(SchedulerOptions options, ResultRecorder record_result,
                 PeakHistory* history = nullptr, ResultLookup lookup_result = nullptr,
                 std::shared_ptr<SchedulerMetrics> metrics = nullptr);

  // Adds a worker, bound to `peer`; returns its id (random, NewId).
  // INVALID_ARGUMENT for zero slots or cap, or a name that is not plain.
  absl::StatusOr<std::string> RegisterWorker(const v1::RegisterWorkerRequest& request,
                                             absl::Time now, const WorkerPeer& peer = {});
  // Refreshes a worker. NOT_FOUND if it was dropped (it must register again);
  // PERMISSION_DENIED if `peer` is not the one that registered it. Leased
  // tasks the worker no longer runs are taken back.
  // The tasks the worker must kill (their builds were cancelled) go in
  // `response`, when given.
  absl::Status Heartbeat(const v1::HeartbeatRequest& request, absl::Time now,
                         const WorkerPeer& peer = {}, v1::HeartbeatResponse* response = nullptr);
  // Why a worker leaves: it stops, or its toolchain changed under it and it
  // registers again with the new one.
  enum class Departure { kStopping, kToolchainChanged };
  // A worker that leaves: dropped at once, its units re-queued without
  // counting against them, saying why. Same errors as Heartbeat.
  absl::Status DeregisterWorker(const std::string& worker_id, absl::Time now,
                                const WorkerPeer& peer = {},
                                Departure departure = Departure::kStopping);
  // Hands the worker a task now, or parks the request until a unit is ready
  // or `deadline` passes. NOT_FOUND for an unknown worker, PERMISSION_DENIED
  // for another peer's.
  absl::Status RequestLease(const std::string& worker_id, absl::Time deadline,
                            LeaseCallback callback, absl::Time now, const WorkerPeer& peer = {});
  // Forgets a parked lease request (its call was cancelled).
  void CancelLeaseRequest(const std::string& worker_id);
  // Records a task's result. NOT_FOUND if the lease is no longer held;
  // PERMISSION_DENIED if `peer` is not the worker holding it. Peaks are
  // clamped to the worker's cap and times to how long the lease was held.
  absl::Status ReportResult(const v1::ReportResultRequest& request, absl::Time now,
                            const WorkerPeer& peer = {});
  // Refuses a task's report (its outputs were not what the unit declares, or
  // not in the store): the unit re-runs on another worker. Same errors as
  // ReportResult.
  absl::Status RejectResult(const std::string& worker_id, const std::string& task_id,
                            const std::string& why, absl::Time now, const WorkerPeer& peer = {});

  // Starts a build of `units` (results already cached are passed in
  // `cached`, keyed by unit index) and returns its id. FAILED_PRECONDITION
  // naming both toolchains when no connected worker matches `toolchain`.
  // With `more_to_come` the build stays open for AddUnits (a client that
  // submits units as it scans them) and ends only after its last part.
  absl::StatusOr<std::string> SubmitBuild(const std::string& build_name,
                                          const v1::ToolchainFingerprint& toolchain,
                                          std::vector<PlannedUnit> units,
                                          std::map<int, v1::TaskResult> cached, BuildEventSink sink,
                                          absl::Time now, bool more_to_come = false);
  // Adds `units` to the open build `build_id` (`cached` keyed by index in
  // `units`), announced to its client with `notes`; `last` closes it: it
  // ends when every unit is done. NOT_FOUND when no such build runs (it
  // ended or was cancelled); FAILED_PRECONDITION when it is not open;
  // INVALID_ARGUMENT, adding nothing, when a name is the build's already.
  absl::Status AddUnits(const std::string& build_id, std::vector<PlannedUnit> units,
                        std::map<int, v1::TaskResult> cached, std::vector<std::string> notes,
                        bool last, absl::Time now);
  // Notes that `share_to_come` (0 to 1) of the open build `build_id` is
  // still to be sent: until then its units hold at most the rest of its
  // toolchain's slots, so that units scanned last (often a build's
  // heaviest: flash-attention's backward kernels) find slots when they
  // come. Called before the part it follows is added; nothing for a build
  // that is not open.
  void HoldSlotsForTheRest(const std::string& build_id, double share_to_come);
  // Drops a build whose client went away or cancelled it: its queued units
  // are forgotten and its running tasks are cancelled on their workers
  // (the next heartbeat answer tells them), keeping their slots and memory
  // until each worker reports. A result that finished anyway still enters
  // the result cache. Returns how many tasks were running.
  int CancelBuild(const std::string& build_id);

  // Drops silent workers (re-queueing their units), times out tasks and
  // answers parked lease requests whose wait ran out. Call periodically.
  void Tick(absl::Time now);
  // For the coordinator's timer: waits up to `most` for units held back by
  // SchedulerOptions::arrival_grace, then until their grace ends, and offers
  // them. Returns at once (after `most`) when nothing is held back.
  void OfferAfterGrace(absl::Duration most);

  v1::ClusterStatus Status(absl::Time now) const;
  // What it counts for /metrics (thread-safe).
  SchedulerMetrics& metrics() const { return *metrics_; }
  // A running or recently ended build's record with its units' spans;
  // nullopt for a build it does not know (any more).
  std::optional<v1::BuildRecord> BuildRecordOf(const std::string& build_id) const;

  // OK when a connected worker has `toolchain` (or the coordinator has just
  // started and none has registered yet); otherwise the FAILED_PRECONDITION
  // SubmitBuild gives, naming the toolchains the workers have.
  absl::Status ToolchainServed(const v1::ToolchainFingerprint& toolchain, absl::Time now) const;
  // The workers with toolchain `toolchain_digest`: their smallest usable cap
  // and their slots. Zero slots when none is connected.
  ClusterCapacity Capacity(const std::string& toolchain_digest) const;
  // The toolchains of the connected workers, each once (by digest): what a
  // REAPI action may ask for. Cheaper than Status.
  std::vector<v1::ToolchainFingerprint> Toolchains() const;
  // How many certificate identities but those in `excluding` have a worker
  // with toolchain `toolchain_digest` connected.
  int PeersWith(const std::string& toolchain_digest, const std::set<std::string>& excluding) const;

  // Drops every worker registered by `peer` (the name in its certificate),
  // re-queueing its units elsewhere; returns how many. For a revocation.
  int DropWorkersOf(const std::string& peer, const std::string& reason, absl::Time now);

  // Hands sampled fresh results to `request`, outside the lock, after they
  // entered the result cache. Call before
  // the first build.
  void SetCrossCheck(CrossCheckRequest request) { cross_check_ = std::move(request); }
  // Status lists the revocations in `revocations` (may be null). Call before
  // the first build.
  void ShowRevocations(const WorkerRevocations* revocations) { revocations_ = revocations; }

 private:
  // Work to do once the lock is released: nothing that waits for a disk or
  // another service runs under it.
  struct Deferred {
    std::vector<std::pair<BuildEventSink, v1::BuildEvent>> events;
    std::vector<LeaseAnswer> leases;
    // Results to enter the result cache (a file written and synced each).
    std::vector<std::pair<std::string, v1::TaskResult>> results;
    // Runs were learnt: the history has lines to append.
    bool learnt = false;
    std::vector<CrossCheckCandidate> cross_checks;
    // Units killed for memory whose next rung is a split: the parts are
    // planned (generated sources written to the store) and looked up in
    // the result cache after mu_ is released, then put in place under it
    // again (ApplySplit).
    struct PendingSplit {
      std::string task_id;
      std::string killed;  // what stopped it, for the reason of the split
      std::function<absl::StatusOr<std::vector<PlannedUnit>>()> split;
      v1::TaskResult give_up;  // its result if it cannot split after all
      absl::Time now;          // the report's time, for the dispatch after
    };
    std::vector<PendingSplit> splits;
    // Log lines (spdlog writes to stderr as it is called), each with the
    // LogFields in scope when it was made.
    struct LogLine {
      bool warning = false;
      LogFieldList fields;
      std::string message;
    };
    std::vector<LogLine> logs;
    void Info(std::string message) { logs.push_back({false, FieldsInScope(), std::move(message)}); }
    void Warn(std::string message) { logs.push_back({true, FieldsInScope(), std::move(message)}); }
    // Writes the log lines (RunDeferred). A call that returns an error
    // from inside its LockedSection skips RunDeferred: its lines are
    // written by the destructor, which runs after the lock is released
    // (a Deferred is declared before the LockedSection it is given to).
    void WriteLogs();
    Deferred() = default;
    Deferred(const Deferred&) = delete;
    Deferred& operator=(const Deferred&) = delete;
    ~Deferred() { WriteLogs(); }
    // Delivers the build events; called while mu_ is still held, so the
    // events of one build reach its client in the order they happened.
    void DeliverEvents();
  };
  // Answers the lease requests, records the results and the history,
  // writes the log lines, then hands over the cross-checks (which may forget
  // a recorded result) and applies the splits, after mu_ is released.
  void RunDeferred(Deferred& deferred);
  // Holds mu_ for one public call, delivers the call's events (if any)
  // before releasing it, and counts how long it held it
  // (SchedulerMetrics::LockHeld).
  class LockedSection {
   public:
    explicit LockedSection(const BuildScheduler* scheduler, Deferred* deferred = nullptr);
    ~LockedSection();
    LockedSection(const LockedSection&) = delete;
    LockedSection& operator=(const LockedSection&) = delete;

   private:
    absl::MutexLock lock_;
    Deferred* const deferred_;
    SchedulerMetrics& metrics_;
    const std::chrono::steady_clock::time_point locked_at_;
  };

  // A build's record for people (BuildLog::Record), its units named.
  static v1::BuildRecord RecordOf(const BuildState& build, const std::string& outcome,
                                  bool with_spans);
  // Ends `build`'s record and keeps it among the recent builds.
  void KeepRecord(BuildState& build, const std::string& outcome) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ToolchainServed under the lock; `eligible` counts the workers that have
  // the toolchain.
  absl::Status ToolchainServedLocked(const v1::ToolchainFingerprint& toolchain, absl::Time now,
                                     int& eligible) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // No worker has registered yet, within --startup-grace of the start.
  bool StartingUpLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pops the first queued unit, in priority order, that the worker may take
  // and that fits what its memory cap has left.
  std::optional<v1::Task> TakeTaskFor(const std::string& worker_id, absl::Time now,
                                      Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pairs parked lease requests with queued units.
  void Dispatch(absl::Time now, Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What admission (admission.h) needs of `unit`.
  static UnitNeeds NeedsOf(const UnitState& unit);
  // The units running on `worker`, for its backfill window.
  std::vector<RunningUnit> RunningOn(const WorkerState& worker) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a task's lease and frees its slot and reservation; returns it.
  std::optional<TaskState> EndTask(const std::string& task_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts a task's unit back in the queue. A lost lease counts against the
  // unit's attempts (`count_as_loss`) and fails it after too many.
  void Requeue(const std::string& task_id, const std::string& reason, Deferred& deferred,
               bool count_as_loss = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The memory retry ladder for a unit its worker's cap stopped.
  void RetryAfterMemoryKill(const std::string& task_id, const v1::TaskResult& result,
                            absl::Time now, Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ladder's split rung, once the lock is released: plans `pending`'s
  // parts and looks them up in the result cache, then, under the lock,
  // replaces the killed task's unit by them if it split into several with
  // names new to its build, or fails it. Nothing when the task ended
  // meanwhile (its worker lost, the build cancelled: its unit is requeued
  // or gone).
  void ApplySplit(Deferred::PendingSplit pending) ABSL_LOCKS_EXCLUDED(mu_);
  // workers_.Of, a refused peer's warning written after the lock.
  absl::StatusOr<WorkerState*> WorkerOf(const std::string& worker_id, const WorkerPeer& peer,
                                        Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ApplySplit's part under the lock.
  void SplitOrGiveUp(const Deferred::PendingSplit& pending,
                     absl::StatusOr<std::vector<PlannedUnit>> parts,
                     std::vector<std::optional<v1::TaskResult>> hits, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // options_.clock's time.
  absl::Time Now() const;
  // Replaces a killed task's unit by `parts` (the ladder's last rung);
  // `hits` holds each part's result from the result cache, if it has one.
  void SplitUnit(const std::string& task_id, std::vector<PlannedUnit> parts,
                 std::vector<std::optional<v1::TaskResult>> hits, const std::string& reason,
                 Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Notes a unit predicted from less than its closure family's or its
  // family's runs (the default, or its family's while its closure family has
  // none) as waiting for them (LearnFrom).
  void WaitForHistory(const std::string& build_id, int unit_index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a measured (or memory-killed) run of `measured`: the queued units
  // waiting for its closure family's or family's runs are predicted again,
  // on its 1st, 2nd, 4th, ... run (HistoryWaits), so that the units of
  // a family never built before stop reserving the default once the first
  // of them finish, in this build; those whose predicted time changed move
  // to their place in the longest-first order (PlaceMovedUnits, before the
  // next lease: many runs of one round of reports reorder the queue once).
  // A unit predicted from its measured profile is predicted from it again,
  // scaled by how the group's runs (`peak_bytes`, `wall`) compared with
  // theirs.
  void LearnFrom(const PlannedUnit& measured, int64_t peak_bytes, absl::Duration wall,
                 Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PlaceMovedUnits() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `planned` starts carefully (SchedulerOptions::careful_start_units),
  // and the group it counts in.
  bool StartsCarefully(const PlannedUnit& planned) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The units running that start carefully, per group.
  std::map<std::string, int> RunningCarefully() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `build`, still arriving, holds all the slots it may hold now
  // (HoldSlotsForTheRest); `running` counts tasks per build, filled once.
  bool HoldsItsShare(const BuildState& build,
                     std::optional<std::map<std::string, int>>& running) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts units in priority order (longest predicted wall time first) and
  // notes those waiting for history.
  void Enqueue(const std::string& build_id, const std::vector<int>& units)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the units of `build_id` from index `first` on, but those in
  // `cached` (by index from `first`), which are finished as cached; the
  // build may end (and be erased) here.
  void AdmitUnits(const std::string& build_id, size_t first, std::map<int, v1::TaskResult> cached,
                  absl::Time now, Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends `build` (erasing it) with its Finished event once it is closed and
  // no unit remains; returns whether it did.
  bool EndBuildIfDone(BuildState& build, Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A compiled unit's result, to enter the result cache before the unit is
  // announced as finished (ReportResult).
  struct ResultToRecord {
    std::string action_digest;
    v1::TaskResult result;
  };
  // ReportResult under the lock: checks the report and acts on it, except
  // for a result to record first, which it leaves in `to_record`.
  absl::Status TakeReport(const v1::ReportResultRequest& request, absl::Time now,
                          const WorkerPeer& peer, std::optional<ResultToRecord>& to_record);
  // The action digest `result` is recorded under before `task`'s unit is
  // announced (it compiled, on an authenticated worker, and the unit is
  // cacheable), or nullopt: the unit finishes at once.
  std::optional<std::string> RecordsFirst(const TaskState& task, const v1::TaskResult& result,
                                          bool authenticated) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a task with its worker's result: learns its peak, finishes its unit.
  void CompleteTask(const std::string& task_id, const v1::TaskResult& result, bool cacheable,
                    Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ReportResult once `recorded` is in the result cache: completes the task
  // if its worker still holds it.
  void AnnounceRecorded(const std::string& worker_id, const std::string& task_id,
                        const ResultToRecord& recorded, absl::Time now);
  // Records a unit's end; its result enters the result cache only if it
  // compiled, was not itself cached, and is `cacheable` (from an
  // authenticated worker).
  void FinishUnit(BuildState& build, int unit_index, const v1::TaskResult& result, bool cached,
                  Deferred& deferred, bool cacheable = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropWorker(const std::string& worker_id, const std::string& reason, absl::Time now,
                  Deferred& deferred, bool count_as_loss = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a cancelled task on its worker's report; a compile that finished
  // anyway enters the result cache if it is whole and `cacheable`.
  void EndCancelledTask(const std::string& task_id, const v1::TaskResult& result, bool cacheable,
                        Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the queued units of builds that have had no worker with their
  // toolchain for longer than a grace period (one may come back).
  void FailStrandedBuilds(absl::Time now, Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Why `result` does not count as the result of `task`'s unit (a successful
  // compile must report exactly the declared outputs, with digests), or "".
  std::string OutputsDiffer(const v1::TaskResult& result, const TaskState& task) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SchedulerOptions options_;
  // Carried by every id this scheduler hands out.
  const int64_t epoch_ = absl::ToUnixSeconds(options_.clock());
  const absl::Time created_ = options_.clock();
  const ResultRecorder record_result_;
  const ResultLookup lookup_result_;
  PeakHistory* const history_;
  const std::shared_ptr<SchedulerMetrics> metrics_;
  CrossCheckRequest cross_check_;
  const WorkerRevocations* revocations_ = nullptr;
  mutable absl::Mutex mu_;
  absl::BitGen random_ ABSL_GUARDED_BY(mu_);
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, BuildState> builds_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, TaskState> tasks_ ABSL_GUARDED_BY(mu_);
  // Re-queued units first, then longest predicted wall time first; a
  // unit's wall is its PlannedUnit's (builds_).
  UnitQueue queue_ ABSL_GUARDED_BY(mu_);
  RecentBuilds recent_builds_ ABSL_GUARDED_BY(mu_);
  ParkedLeases parked_ ABSL_GUARDED_BY(mu_);
  // Queued units whose predicted time LearnFrom changed (UnitState::moving).
  std::vector<std::pair<std::string, int>> moving_ ABSL_GUARDED_BY(mu_);
  // Queued units waiting for the first runs of a closure family or family
  // (WaitForHistory, LearnFrom).
  HistoryWaits waiting_ ABSL_GUARDED_BY(mu_);
  // Units reached an empty queue: none is offered before offer_after_
  // (SchedulerOptions::arrival_grace).
  bool in_grace_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time offer_after_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace distcc_cuda::coordinator
