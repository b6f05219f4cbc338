// SPDX-License-Identifier: Apache-2.0
// The long-running operations of the coordinator's REAPI Execution service:
// one per Execute, named "operations/ID", carrying its stage while it runs
// and its ExecuteResponse once done, streamed to every caller that follows
// it (Execute, WaitExecution).
#pragma once

#include <grpcpp/support/server_callback.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "build/bazel/remote/execution/v2/remote_execution.pb.h"
#include "common/store/cas_store.h"
#include "google/longrunning/operations.pb.h"

namespace distcc_cuda::coordinator {

namespace reapi = ::build::bazel::remote::execution::v2;

class OperationStream;
struct OperationWatcher;

class ReapiOperation {
 public:
  ReapiOperation(std::string name, const reapi::Digest& action);
  ~ReapiOperation();
  ReapiOperation(const ReapiOperation&) = delete;
  ReapiOperation& operator=(const ReapiOperation&) = delete;

  const std::string& name() const { return name_; }
  // Moves it to `stage` (QUEUED, EXECUTING); nothing once it is done.
  void Stage(reapi::ExecutionStage::Value stage);
  // Ends it with `response`; the first end counts.
  void Finish(const reapi::ExecuteResponse& response);
  // Ends it with `status` as its response's status (not OK): what could
  // not run, and why; a PreconditionFailure payload goes as its details.
  void Fail(const absl::Status& status);
  bool done() const;
  // A stream to the caller of `context`'s call: the operation as it is
  // now, then every change, ending with the done one.
  grpc::ServerWriteReactor<google::longrunning::Operation>* Follow();
  // Holds the action's inputs and outputs in the store until it is done;
  // returns `pin`, valid until Finish.
  CasPin* Hold(std::unique_ptr<CasPin> pin);

 private:
  void Publish(const google::longrunning::Operation& operation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const reapi::Digest action_;
  mutable absl::Mutex mu_;
  std::unique_ptr<CasPin> pin_ ABSL_GUARDED_BY(mu_);
  google::longrunning::Operation latest_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<OperationWatcher>> watchers_ ABSL_GUARDED_BY(mu_);
};

// The operations started and those that ended lately (the last
// kRemembered), by name.
class ReapiOperations {
 public:
  static constexpr size_t kRemembered = 10000;

  // A new operation for `action`, with a name no one can guess.
  std::shared_ptr<ReapiOperation> Start(const reapi::Digest& action);
  // The operation named `name`, or null (never started here, or forgotten).
  std::shared_ptr<ReapiOperation> Find(const std::string& name) const;

 private:
  const int64_t epoch_ = absl::ToUnixSeconds(absl::Now());
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<ReapiOperation>> by_name_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace distcc_cuda::coordinator
