// SPDX-License-Identifier: Apache-2.0
// A build request as it arrives, before it is planned: the bounds on what
// one build may ask (BuildLimits), its plan blob read in place of its
// digest, and the checks of what a client may not send.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cas_store.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::coordinator {

// What one build may ask of the coordinator: everything a submitter controls
// that costs the coordinator memory, disk or time has a bound. Each has a
// flag of distcc-cuda-coordinator.
struct BuildLimits {
  int64_t max_units = 100000;             // --max-units-per-build: units, grids expanded
  int64_t max_grid_points = 100000;       // --max-grid-points: points of all instantiation sets
  int64_t max_arguments_per_unit = 4096;  // --max-arguments-per-unit
  int64_t max_argument_bytes = 64 << 10;  // --max-argument-length: bytes in one argument
  int64_t max_inputs_per_unit = 50000;    // --max-inputs-per-unit
  int64_t max_input_bytes = int64_t{64} << 30;  // --max-build-input-size: distinct inputs' bytes
  // --max-input-listings-per-build: input files summed over a build's units
  // and sets, a header every unit includes counted once per unit. Input
  // trees make a build small to send however many units share a closure;
  // this bounds what the coordinator expands them into.
  int64_t max_input_listings = 20000000;
  // --max-build-plan-size: a BuildPlan blob (the units of a build too large
  // for one message) is read and parsed whole; 55,000 CUTLASS units are 35 MiB.
  int64_t max_plan_bytes = int64_t{256} << 20;
  // --max-plans-per-client: a client's builds and parts being planned at
  // once (queued or running); 0: no limit.
  int max_plans_per_client = 8;
};

// The request with the units and sets of its `plan` blob (a BuildPlan in
// `cas`) in place of the digest; a request without one, as it is.
// INVALID_ARGUMENT for a plan beside units or sets, or one that does not
// parse; RESOURCE_EXHAUSTED for one over `limits.max_plan_bytes`;
// FAILED_PRECONDITION for a plan the store lacks; INVALID_ARGUMENT for an
// input that carries its bytes (RefuseCarriedBytes).
absl::StatusOr<v1::SubmitBuildRequest> ReadBuildPlan(const v1::SubmitBuildRequest& request,
                                                     const CasStore& cas,
                                                     const BuildLimits& limits = {});

class BuildInputs;

// OK if `request` stays within `limits` (checked before anything is
// generated or stored), its input trees' files (`inputs`, may be null)
// counted in its bytes; RESOURCE_EXHAUSTED naming the limit, its flag, the
// amount asked and what to do otherwise.
absl::Status CheckBuildLimits(const v1::SubmitBuildRequest& request, const BuildLimits& limits,
                              const BuildInputs* inputs = nullptr);

// INVALID_ARGUMENT when an input of `request` carries its bytes: only the
// coordinator inlines a file (a generated source), a client uploads it.
absl::Status RefuseCarriedBytes(const v1::SubmitBuildRequest& request);

}  // namespace distcc_cuda::coordinator
