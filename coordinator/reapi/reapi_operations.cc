// SPDX-License-Identifier: Apache-2.0
#include "coordinator/reapi/reapi_operations.h"

#include <optional>

#include "common/base/status.h"
#include "coordinator/scheduler/ids.h"
#include "google/rpc/status.pb.h"

namespace distcc_cuda::coordinator {

// Writes one operation's changes to one caller, one write in flight; a
// change that comes while a write is in flight replaces any still waiting
// (only the latest matters).
class OperationStream final : public grpc::ServerWriteReactor<google::longrunning::Operation> {
 public:
  explicit OperationStream(std::shared_ptr<OperationWatcher> watcher)
      : watcher_(std::move(watcher)) {}

  void Push(const google::longrunning::Operation& operation) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    pending_ = operation;
    if (!writing_) WriteNext();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away"));
    } else if (current_.done()) {
      FinishLocked(grpc::Status::OK);
    } else {
      WriteNext();
    }
  }

  // The caller went away: an idle stream is finished here.
  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    if (!writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override;

 private:
  void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!pending_ || finished_) return;
    current_ = *std::move(pending_);
    pending_.reset();
    writing_ = true;
    StartWrite(&current_);
  }

  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  const std::shared_ptr<OperationWatcher> watcher_;
  absl::Mutex mu_;
  std::optional<google::longrunning::Operation> pending_ ABSL_GUARDED_BY(mu_);
  google::longrunning::Operation current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// Lets an operation reach a stream that may have ended.
struct OperationWatcher {
  absl::Mutex mu;
  OperationStream* stream ABSL_GUARDED_BY(mu) = nullptr;
};

void OperationStream::OnDone() {
  {
    absl::MutexLock lock(&watcher_->mu);
    watcher_->stream = nullptr;
  }
  delete this;
}

ReapiOperation::ReapiOperation(std::string name, const reapi::Digest& action)
    : name_(std::move(name)), action_(action) {
  absl::MutexLock lock(&mu_);
  latest_.set_name(name_);
  reapi::ExecuteOperationMetadata metadata;
  metadata.set_stage(reapi::ExecutionStage::CACHE_CHECK);
  *metadata.mutable_action_digest() = action_;
  latest_.mutable_metadata()->PackFrom(metadata);
}

ReapiOperation::~ReapiOperation() = default;

bool ReapiOperation::done() const {
  absl::MutexLock lock(&mu_);
  return latest_.done();
}

CasPin* ReapiOperation::Hold(std::unique_ptr<CasPin> pin) {
  absl::MutexLock lock(&mu_);
  pin_ = std::move(pin);
  return pin_.get();
}

void ReapiOperation::Publish(const google::longrunning::Operation& operation) {
  latest_ = operation;
  std::vector<std::shared_ptr<OperationWatcher>> live;
  for (std::shared_ptr<OperationWatcher>& watcher : watchers_) {
    absl::MutexLock lock(&watcher->mu);
    if (watcher->stream == nullptr) continue;
    watcher->stream->Push(latest_);
    live.push_back(std::move(watcher));
  }
  watchers_ = std::move(live);
}

void ReapiOperation::Stage(reapi::ExecutionStage::Value stage) {
  absl::MutexLock lock(&mu_);
  if (latest_.done()) return;
  google::longrunning::Operation next = latest_;
  reapi::ExecuteOperationMetadata metadata;
  metadata.set_stage(stage);
  *metadata.mutable_action_digest() = action_;
  next.mutable_metadata()->PackFrom(metadata);
  Publish(next);
}

void ReapiOperation::Finish(const reapi::ExecuteResponse& response) {
  std::unique_ptr<CasPin> released;  // unpinned once the lock is released
  absl::MutexLock lock(&mu_);
  if (latest_.done()) return;
  released = std::move(pin_);
  google::longrunning::Operation next = latest_;
  reapi::ExecuteOperationMetadata metadata;
  metadata.set_stage(reapi::ExecutionStage::COMPLETED);
  *metadata.mutable_action_digest() = action_;
  next.mutable_metadata()->PackFrom(metadata);
  next.set_done(true);
  next.mutable_response()->PackFrom(response);
  Publish(next);
}

void ReapiOperation::Fail(const absl::Status& status) {
  reapi::ExecuteResponse response;
  // The gRPC form of `status` carries its details as a serialized
  // google.rpc.Status.
  grpc::Status as_grpc = ToGrpcStatus(status);
  if (as_grpc.error_details().empty() ||
      !response.mutable_status()->ParseFromString(as_grpc.error_details())) {
    response.mutable_status()->set_code(static_cast<int>(status.code()));
    response.mutable_status()->set_message(std::string(status.message()));
  }
  Finish(response);
}

grpc::ServerWriteReactor<google::longrunning::Operation>* ReapiOperation::Follow() {
  auto watcher = std::make_shared<OperationWatcher>();
  auto* stream = new OperationStream(watcher);
  absl::MutexLock lock(&mu_);
  {
    absl::MutexLock watching(&watcher->mu);
    watcher->stream = stream;
    stream->Push(latest_);
  }
  watchers_.push_back(std::move(watcher));
  return stream;
}

std::shared_ptr<ReapiOperation> ReapiOperations::Start(const reapi::Digest& action) {
  auto operation = std::make_shared<ReapiOperation>("operations/" + NewId('o', epoch_), action);
  absl::MutexLock lock(&mu_);
  by_name_[operation->name()] = operation;
  order_.push_back(operation->name());
  while (order_.size() > kRemembered) {
    by_name_.erase(order_.front());
    order_.pop_front();
  }
  return operation;
}

std::shared_ptr<ReapiOperation> ReapiOperations::Find(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto found = by_name_.find(name);
  return found == by_name_.end() ? nullptr : found->second;
}

}  // namespace distcc_cuda::coordinator
