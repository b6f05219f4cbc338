// SPDX-License-Identifier: Apache-2.0
// The Remote Execution API's Execution and ActionCache services on the
// coordinator: a REAPI client's (Bazel's) compile Action becomes a build of
// one unit, planned, admitted and retried like any other (reapi_action.h),
// and its earned result is the Action's cached result.
#pragma once

#include <memory>
#include <string>

#include "build/bazel/remote/execution/v2/remote_execution.grpc.pb.h"
#include "common/base/bounded_executor.h"
#include "coordinator/access_control.h"
#include "coordinator/build_service.h"

namespace distcc_cuda::coordinator {

namespace reapi = ::build::bazel::remote::execution::v2;

class ReapiOperations;

// Execute runs an Action; its stream carries the Operation as it moves
// (queued, executing) and ends with the one that is done, whose response is
// an ExecuteResponse. What cannot run (a blob missing, an argument refused,
// no worker with the toolchain) is that response's status, as REAPI asks.
// WaitExecution follows an operation this coordinator started, while it
// runs or for a while after it ended.
class ReapiExecution final : public reapi::Execution::CallbackService {
 public:
  // Actions are read and planned on `planner`, never inside a reactor.
  // `planning` is what PlanPart needs (no client_left: an execution runs
  // to the end when its client goes, so that a WaitExecution or a second
  // Execute finds its result).
  ReapiExecution(const AccessControl* access, Planning planning, BoundedExecutor* planner);
  ~ReapiExecution() override;

  grpc::ServerWriteReactor<google::longrunning::Operation>* Execute(
      grpc::CallbackServerContext* context, const reapi::ExecuteRequest* request) override;
  grpc::ServerWriteReactor<google::longrunning::Operation>* WaitExecution(
      grpc::CallbackServerContext* context, const reapi::WaitExecutionRequest* request) override;

 private:
  const AccessControl* access_;
  const Planning planning_;
  BoundedExecutor* planner_;
  const std::shared_ptr<ReapiOperations> operations_;
};

// GetActionResult serves the results that Execute earned (outputs still in
// the store, producer not revoked, the toolchain the Action would get now);
// UpdateActionResult is refused: no client writes the cache.
class ReapiActionCache final : public reapi::ActionCache::CallbackService {
 public:
  ReapiActionCache(const AccessControl* access, Planning planning, BoundedExecutor* io)
      : access_(access), planning_(planning), io_(io) {}

  grpc::ServerUnaryReactor* GetActionResult(grpc::CallbackServerContext* context,
                                            const reapi::GetActionResultRequest* request,
                                            reapi::ActionResult* response) override;
  grpc::ServerUnaryReactor* UpdateActionResult(grpc::CallbackServerContext* context,
                                               const reapi::UpdateActionResultRequest* request,
                                               reapi::ActionResult* response) override;

 private:
  const AccessControl* access_;
  const Planning planning_;
  BoundedExecutor* io_;
};

}  // namespace distcc_cuda::coordinator
