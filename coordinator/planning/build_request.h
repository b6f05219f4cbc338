// SPDX-License-Identifier: Apache-2.0
// A build request as it arrives, before it is planned: its plan blob read
// in place of its digest, and the checks of what a client may not send
// against the build's bounds (BuildLimits, build_limits.h).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/store/cas_store.h"
#include "coordinator/planning/build_limits.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::coordinator {

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
