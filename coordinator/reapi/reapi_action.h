// SPDX-License-Identifier: Apache-2.0
// A Remote Execution API (REAPI v2) Action as a distcc-cuda compile unit,
// and the unit's result as the Action's result. What the coordinator's REAPI
// services (reapi_execution_service.h) do with an Execute, without the RPCs:
// read the Action and its Command from the store, refuse what is not a
// compile the argument model allows, choose the toolchain, and turn the
// input root into the store's own tree.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/reapi/action_unit.h"
#include "common/reapi/reapi_digest.h"
#include "common/store/cas_store.h"
#include "common/store/digest.h"
#include "coordinator/planning/build_limits.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::coordinator {

// Reads the store's blob `digest` (an Action, a Command, a Directory) into
// `message`; FAILED_PRECONDITION naming the blob as missing (a client
// uploads it and asks again), INVALID_ARGUMENT when it does not parse,
// RESOURCE_EXHAUSTED when it would take more memory parsed than
// request_cost.h allows any request.
absl::Status ReadMessageBlob(const CasStore& cas, const reapi::Digest& digest,
                             absl::string_view what, google::protobuf::Message& message);

// The input root `root`, whose folders are in `cas`, as the store's own tree
// (common/reapi/input_root.h), with at most the files `limits` allow a
// unit; the planner counts the tree expanded again (BuildInputs) and checks
// the names' order. FAILED_PRECONDITION (MISSING) for a folder the store
// lacks.
absl::StatusOr<Digest> ConvertInputRoot(CasStore& cas, const reapi::Digest& root,
                                        const BuildLimits& limits, CasPin& pin);

// The toolchain of `served` (the connected workers') that `platform` asks
// for (kToolchainProperty; of several that match, the lowest digest), or
// the only one served when it asks for none. FAILED_PRECONDITION when none is served or none
// matches, or when several are and the platform does not say which (the message lists them and the
// property to set).
absl::StatusOr<v1::ToolchainFingerprint> ChooseToolchain(
    const reapi::Platform& platform, const std::vector<v1::ToolchainFingerprint>& served);

// The build of one unit that `command` asks for, on the tree `input_root`
// (the store's own) with `toolchain`: argv[0] must be nvcc or the host C++
// compiler (g++, c++), and the one output its -o file. INVALID_ARGUMENT
// naming what is refused (the argument model itself is checked when the
// build is planned).
absl::StatusOr<v1::SubmitBuildRequest> UnitBuildOf(const reapi::Command& command,
                                                   const Digest& input_root,
                                                   const v1::ToolchainFingerprint& toolchain);

// The ActionResult of a unit's result (common/reapi/action_unit.h), its
// stdout and stderr stored in `cas`.
absl::StatusOr<reapi::ActionResult> ActionResultOf(const v1::TaskResult& result,
                                                   const v1::CompileUnit& unit, CasStore& cas);

// What Execute answers for a unit that ended with `result`: its
// ActionResult, and a status that is not OK where nothing ran to the end
// (refused by the worker, failed to start, timed out, cancelled).
absl::StatusOr<reapi::ExecuteResponse> ExecuteResponseOf(const v1::TaskResult& result,
                                                         const v1::CompileUnit& unit, bool cached,
                                                         CasStore& cas);

}  // namespace distcc_cuda::coordinator
