// SPDX-License-Identifier: Apache-2.0
// The client of a Remote Execution API engine's Execution service: an
// Action executed (or answered from the engine's ActionCache) and followed
// to its ExecuteResponse over the Execute stream, and over WaitExecution
// when that stream breaks before the end.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "build/bazel/remote/execution/v2/remote_execution.grpc.pb.h"
#include "common/base/cancellation.h"
#include "common/reapi/reapi_digest.h"
#include "google/longrunning/operations.grpc.pb.h"
#include "grpcpp/channel.h"

namespace distcc_cuda {

// OK when the engine at `url` answers GetCapabilities for `instance` within
// `timeout` and executes actions; otherwise UNAVAILABLE (not reached) or
// FAILED_PRECONDITION (it does not execute, or not with SHA-256), saying
// what to check.
absl::Status CheckEngineExecutes(const std::shared_ptr<grpc::Channel>& channel,
                                 const std::string& instance, const std::string& url,
                                 absl::Duration timeout);

class ReapiExecutionClient {
 public:
  ReapiExecutionClient(const std::shared_ptr<grpc::Channel>& channel, std::string instance);

  // Executes `action` (whose blobs the engine holds) and returns the
  // engine's ExecuteResponse, whatever its status says. The engine's own
  // call errors (it refused the Action, it went away and did not come back
  // within a minute) come back as they are; CANCELLED once `cancel` is, after
  // asking the engine to cancel the operation.
  absl::StatusOr<reapi::ExecuteResponse> Execute(const reapi::Digest& action,
                                                 const CancelToken& cancel);

  // The engine's ActionCache entry for `action`, its outputs as the engine
  // lists them: nullopt where it has none (NOT_FOUND); other errors as they
  // are. Within 10 s.
  absl::StatusOr<std::optional<reapi::ActionResult>> CachedResult(const reapi::Digest& action,
                                                                  const CancelToken& cancel);

 private:
  // Operations.CancelOperation(name), within 2 s, whatever the answer.
  void CancelOperation(const std::string& name);

  std::string instance_;
  std::unique_ptr<reapi::Execution::Stub> stub_;
  std::unique_ptr<reapi::ActionCache::Stub> action_cache_;
  std::unique_ptr<google::longrunning::Operations::Stub> operations_;
};

}  // namespace distcc_cuda
