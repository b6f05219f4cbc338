// SPDX-License-Identifier: Apache-2.0
// The bounds of one build, each a flag of distcc-cuda-coordinator: what the
// request checks (build_request), the input trees (build_inputs) and the
// parse cost of its messages (request_cost) hold a build to.
#pragma once

#include <cstdint>

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

}  // namespace distcc_cuda::coordinator
