// SPDX-License-Identifier: Apache-2.0
// The Remote Execution API's Execution and ActionCache services on the
// coordinator: a REAPI client's (Bazel's) compile Action becomes a build of
// one unit, planned, admitted and retried like any other (reapi_action.h),
// and its earned result is the Action's cached result.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "build/bazel/remote/execution/v2/remote_execution.grpc.pb.h"
#include "common/base/bounded_executor.h"
#include "coordinator/services/build_service.h"
#include "coordinator/trust/access_control.h"

namespace distcc_cuda::coordinator {

namespace reapi = ::build::bazel::remote::execution::v2;

class ReapiOperations;
class PlanningQuota;

// What the REAPI services count, for /metrics: executions by how they
// ended, action-cache lookups by whether they found a result.
class ReapiMetrics {
 public:
  explicit ReapiMetrics(prometheus::Registry& registry);
  // A worker compiled the action.
  void Compiled() { compiled_->Increment(); }
  // Its result came from the cache.
  void Cached() { cached_->Increment(); }
  // It did not run: `why` says whether it was refused (an argument, a blob
  // missing, no worker with its toolchain) or failed.
  void Ended(const absl::Status& why);
  void Lookup(bool hit) { (hit ? hits_ : misses_)->Increment(); }

 private:
  prometheus::Counter* compiled_;
  prometheus::Counter* cached_;
  prometheus::Counter* refused_;
  prometheus::Counter* failed_;
  prometheus::Counter* hits_;
  prometheus::Counter* misses_;
};

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
  // What a finished unit leaves (its stdout and stderr stored, its alias
  // recorded) is done on `io`, off the scheduler's lock.
  ReapiExecution(const AccessControl* access, Planning planning, BoundedExecutor* planner,
                 BoundedExecutor* io, ReapiMetrics* metrics);
  ~ReapiExecution() override;

  grpc::ServerWriteReactor<google::longrunning::Operation>* Execute(
      grpc::CallbackServerContext* context, const reapi::ExecuteRequest* request) override;
  grpc::ServerWriteReactor<google::longrunning::Operation>* WaitExecution(
      grpc::CallbackServerContext* context, const reapi::WaitExecutionRequest* request) override;

 private:
  const AccessControl* access_;
  const Planning planning_;
  BoundedExecutor* planner_;
  BoundedExecutor* io_;
  ReapiMetrics* metrics_;
  // An Execute holds one of its client's places while it is planned.
  const std::shared_ptr<PlanningQuota> quota_;
  const std::shared_ptr<ReapiOperations> operations_;
};

// GetActionResult serves the results that Execute earned (outputs still in
// the store, producer not revoked, the toolchain the Action would get now);
// UpdateActionResult is refused: no client writes the cache.
class ReapiActionCache final : public reapi::ActionCache::CallbackService {
 public:
  ReapiActionCache(const AccessControl* access, Planning planning, BoundedExecutor* io,
                   ReapiMetrics* metrics)
      : access_(access), planning_(planning), io_(io), metrics_(metrics) {}

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
  ReapiMetrics* metrics_;
};

}  // namespace distcc_cuda::coordinator
