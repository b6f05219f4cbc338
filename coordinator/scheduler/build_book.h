// SPDX-License-Identifier: Apache-2.0
// The scheduler's book: the units it is given (PlannedUnit), what it knows
// of each unit of a build, of each build and of each lease, and how a unit
// is held compact while it waits. Plain data; the scheduler keeps it under
// its lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/store/digest.h"
#include "coordinator/memory/memory_model.h"
#include "coordinator/scheduler/build_records.h"
#include "distcc_cuda/v1/build.pb.h"
#include "distcc_cuda/v1/worker.pb.h"

namespace distcc_cuda::coordinator {

// Receives a build's progress events, in order, each moved in (an
// acceptance names every unit: 100,000 names, not to be copied). Called
// under the scheduler's lock (LockedSection), so that events keep their
// order: it must queue the event and return, never call the scheduler.
using BuildEventSink = std::function<void(v1::BuildEvent)>;

// A unit ready to schedule: the key of its cached result, the keys of its
// measured history and what it is predicted to cost.
struct PlannedUnit {
  v1::CompileUnit unit;  // its input tree as a root: workers expand it
  Digest inputs;         // the root of all its inputs, the tree's and its own
  std::string action_digest;
  std::string identity;
  std::string family;
  std::string closure;  // ClosureFamily: units with the same headers and flags; may be ""
  UnitDemand demand;
  int instantiations = 1;     // grid points compiled in this unit
  int parallel = 1;           // compilations nvcc runs at once (ParallelCompilations)
  int64_t closure_bytes = 0;  // its inputs' size, its tree's and its own; 0: not read
  // The UnitPriors markers its inputs hold, and the prediction its measured
  // profile gives (none: no row of the table applies); kept so that runs
  // of its kind here can scale it (BuildScheduler::LearnFrom).
  std::vector<std::string> markers;
  std::optional<UnitDemand> prior;
  // For a unit of several instantiations: makes smaller units of the same
  // points (named after this one); for one of several -gencode targets: one
  // unit per target. The last rung of the memory retry ladder.
  // Called under the scheduler's lock.
  std::function<absl::StatusOr<std::vector<PlannedUnit>>()> split;
  // Workers (by the name in their certificate) that must not run it: a
  // cross-check's second compile never runs where the first one did.
  std::set<std::string> avoid_peers = {};
  // False: its result is used by its build only, never cached nor
  // cross-checked (a cross-check's own compile).
  bool cacheable = true;
};

// Where a unit of a build stands.
enum class UnitPhase { kQueued, kRunning, kDone };

// What the scheduler knows of one unit of a build: its plan, where it
// stands, and what the memory retry ladder learnt of it.
struct UnitState {
  // Held compact while it waits (HoldUnit): its unit keeps only its name,
  // outputs and architecture part, the rest is in `unit_bytes`.
  PlannedUnit planned;
  std::string unit_bytes;  // the whole unit, serialized; "": `planned.unit` is whole
  UnitPhase phase = UnitPhase::kQueued;
  int attempts = 0;  // leases handed out
  int losses = 0;    // leases lost to infrastructure (worker gone, failed start)
  bool failed = false;
  // The memory retry ladder: what the kills taught us.
  int memory_kills = 0;
  int64_t peak_seen = 0;
  int64_t reservation_floor = 0;                // reserve at least this much
  bool alone = false;                           // only on an otherwise idle worker
  int64_t needs_cap_above = 0;                  // only on a worker with a larger cap
  bool split = false;                           // replaced by smaller units
  bool moving = false;                          // LearnFrom is moving it in the queue
  std::set<std::string> refused_by = {};        // workers whose reports for it were refused
  absl::Time queued_at = absl::InfinitePast();  // when it last joined the queue (for metrics)
  absl::Time leased_at = absl::InfinitePast();  // its last lease, by the wall clock
};

// A build the scheduler runs: its units, counts, client and record.
struct BuildState {
  std::string id;
  std::string toolchain_digest;
  std::vector<UnitState> units;
  int remaining = 0;
  int failed = 0;
  int cached = 0;
  int splits = 0;  // units replaced by smaller ones (not in the totals)
  // Since when no connected worker has the build's toolchain (the last one
  // left), and what happened to it; cleared when one registers.
  std::optional<absl::Time> stranded_since;
  std::string stranded_reason;
  std::set<std::string> workers_used;
  BuildEventSink sink;
  // Submitted in parts (AddUnits): it takes more until its last part, and
  // its units' names, which must differ, are kept to check the next part's.
  bool open = false;
  absl::flat_hash_set<std::string> names;
  // The share of an open build that its client has still to send
  // (SubmitBuildRequest.entries_expected): its units take at most the
  // rest of its toolchain's slots until it comes.
  double share_to_come = 0;
  // Its summary and its units' spans, for people.
  std::optional<BuildLog> log;
};

// A lease: one unit of a build running on one worker.
struct TaskState {
  std::string build_id;
  int unit_index;
  std::string worker_id;
  absl::Time leased_at;
  int64_t reserved_bytes = 0;
  bool seen_running = false;
  // Its build was cancelled: the worker is told to kill it (heartbeat
  // answer), and the lease holds its slot and memory until the worker
  // reports. What a result that finished anyway needs to enter the cache:
  struct Cancelled {
    std::string action_digest;
    std::string toolchain_digest;
    std::vector<std::string> output_paths;
  };
  std::optional<Cancelled> cancelled;
};

// A planned unit as the scheduler holds it: its CompileUnit serialized
// (a CUTLASS unit's arguments, paths and digests are ~30 strings as a
// message, one as bytes: 55,000 units held 1.6 KB each), but for what
// the scheduler reads of it (its name, outputs and architecture part); a
// `cached` one, finished at once, whole.
UnitState HoldUnit(PlannedUnit planned, bool cached);
// HoldUnit of each of `units`, `cached` by index.
std::vector<UnitState> HoldUnits(std::vector<PlannedUnit> units,
                                 const std::map<int, v1::TaskResult>& cached);
// The whole unit of `unit`, for its task and its result.
v1::CompileUnit WholeUnit(const UnitState& unit);
// For a finished unit: nothing reads more of it than its name and outputs
// again; the rest of its unit and its split are let go.
void ForgetAllButWhatIsRead(UnitState& unit);

}  // namespace distcc_cuda::coordinator
