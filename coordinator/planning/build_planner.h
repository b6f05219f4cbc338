// SPDX-License-Identifier: Apache-2.0
// Turns a submitted build into compile units: expands instantiation sets into
// generated sources in the CAS, checks every unit, and keys each by its
// action digest.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/store/cas_store.h"
#include "coordinator/planning/build_request.h"
#include "coordinator/scheduler/scheduler.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::coordinator {

// Returns the build's units in order: the ordinary units, then every
// instantiation set's grid, each with its predicted cost from `history`
// (null: the defaults). A set that leaves its unit size to the coordinator
// gets ChooseInstantiationsPerUnit grid points per unit, from its learned
// cost per instantiation and `capacity`; the choice is kept in `choices`
// (may be null) and reused while it still fits the caps, so that a rebuild
// keeps its units and their cached results. A group that a memory kill made
// the scheduler split in an earlier build is planned as its halves (the
// split is remembered in `choices` too). Every group of several points can
// split itself (PlannedUnit::split). INVALID_ARGUMENT for a malformed set or unit
// (arguments that fail the sandbox checks, duplicate unit names);
// FAILED_PRECONDITION naming the file when an input is not in the CAS.
// CheckBuildLimits runs first. A unit of several -gencode targets is
// compiled one target per unit when the whole fits no worker or the parts
// finish the build sooner (WeighArchitectureSplit), and always with
// ARCHITECTURE_SPLIT_ALWAYS.
// Whether the result cache holds a unit's result, by its action digest.
using IsCached = std::function<bool(const std::string& action_digest)>;
// Asked now and then while a build is planned (every 1,024 units and every
// batch of sources stored): true once the client that sent it has left, and
// planning stops with CANCELLED instead of going on for nobody.
using ClientLeft = std::function<bool()>;

// The plan of a build all of whose units are in the result cache, made
// without reading their input trees: what a launcher's rebuild sends, unit
// by unit, when nothing changed. Applies to a request of plain units, each
// with a tree (input_root) and, given `cas`, its own files beside it (a
// launched unit's source: their digests must be in the store, and only the
// folders on their paths are read, to make the root of all its inputs),
// never split by architecture; each is checked (ValidateCompileUnit, the
// build's limits) and keyed as PlanBuild keys it, so a hit is the result of
// exactly the action PlanBuild would have made. An action cached is one
// whose tree was read and checked when it first ran, and whose root names
// every byte of it. nullopt when the request is of another kind, fails a
// check (PlanBuild then says why) or has a unit that is not cached: plan it
// with PlanBuild.
std::optional<std::vector<PlannedUnit>> PlanCachedBuild(const v1::SubmitBuildRequest& request,
                                                        const PeakHistory* history,
                                                        const BuildLimits& limits,
                                                        const IsCached& is_cached,
                                                        const CasStore* cas = nullptr);

// What compiling a unit of several -gencode targets whole or one target
// per unit costs its build, estimated from the predicted peaks and times of
// the whole and of its parts (measured where the history has them) and the
// shape of the cluster, as if the build's units were all like it.
struct ArchitectureSplitCosts {
  absl::Duration whole;  // the build's time with the unit whole
  absl::Duration parts;  // ... one target per unit
  // The CPU time the parts spend again: each repeats the host pass.
  absl::Duration repeated_host_passes;
};

// The share of a one-target compile that is its host pass (preprocessing
// and compiling the host side), which each part of a split repeats: where
// the history has not measured both the whole and its parts, a part's time
// is derived from the whole's or the whole's from a part's with it. 0.3:
// flash-attention's kernels (954 s of CPU split against 842 s whole, two
// targets) measured 0.24, the example kernels about 0.5.
inline constexpr double kHostPassShare = 0.3;

// A generated source of at most this many bytes travels in its unit
// (InputFile.content) and is never stored: one grid point's source is a few
// hundred bytes, and a file of its own took a 4 KiB disk block (a 316 x 316
// grid wrote about 390 MB into the store).
inline constexpr int64_t kInlinedSourceBytes = 4096;

// The costs of compiling `whole` (one of `units_in_build`) as it is or as
// its `parts` (one per target), on workers of `capacity`: the build's time
// in waves of as many as fit at once, by slots and by memory. Infinite for
// one that fits no worker.
ArchitectureSplitCosts WeighArchitectureSplit(const PlannedUnit& whole,
                                              const std::vector<PlannedUnit>& parts,
                                              size_t units_in_build,
                                              const ClusterCapacity& capacity);

// Plans `request` into units. An instantiation set's unit size (grid points
// per unit) is chosen from the predicted cost per instantiation and the
// workers' caps and kept in `choices`, so a rebuild makes the same units and
// finds them cached. A kept size is planned again (regrouped) only when it
// pays and costs nothing: today's choice makes more than 1.5 times fewer
// units, and `is_cached` says no unit of the kept grouping is cached (a
// header they all include, a flag or the toolchain changed). Without
// `is_cached` a kept size stays. Each regroup adds a line to `notes` (may
// be null), for the user. Units keep their input trees' roots: `inputs`
// is the build's trees as BuildInputs::Read read them (null: read here);
// each unit's action digest names all its inputs by one root
// (InputTreeExpander::RootWith), whether it sent them as a tree or a list.
// Stops (CANCELLED) soon after `client_left` (may be null) says so.
absl::StatusOr<std::vector<PlannedUnit>> PlanBuild(
    const v1::SubmitBuildRequest& request, CasStore& cas, const PeakHistory* history,
    const ClusterCapacity& capacity, UnitSizeChoices* choices, const BuildLimits& limits = {},
    const IsCached& is_cached = nullptr, std::vector<std::string>* notes = nullptr,
    BuildInputs* inputs = nullptr, const ClientLeft& client_left = nullptr);

}  // namespace distcc_cuda::coordinator
