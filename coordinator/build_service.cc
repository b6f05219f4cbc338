// SPDX-License-Identifier: Apache-2.0
#include "coordinator/build_service.h"

#include <deque>

#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "coordinator/build_planner.h"

namespace distcc_cuda::coordinator {
namespace {

// Streams one build's events to its client, one write in flight. The
// scheduler pushes events through a handle that outlives the reactor.
class BuildEventStream final : public grpc::ServerWriteReactor<v1::BuildEvent> {
 public:
  // Lets the scheduler push events after the call may have ended.
  struct Handle {
    absl::Mutex mu;
    BuildEventStream* stream ABSL_GUARDED_BY(mu) = nullptr;
    void Push(const v1::BuildEvent& event) {
      absl::MutexLock lock(&mu);
      if (stream != nullptr) stream->Push(event);
    }
  };

  BuildEventStream(BuildScheduler* scheduler)
      : scheduler_(scheduler), handle_(std::make_shared<Handle>()) {
    absl::MutexLock lock(&handle_->mu);
    handle_->stream = this;
  }

  std::shared_ptr<Handle> handle() { return handle_; }

  void Start(const v1::SubmitBuildRequest& request, CasStore* cas, ResultCache* results) {
    absl::StatusOr<std::vector<PlannedUnit>> units = PlanBuild(request, *cas);
    if (!units.ok()) {
      FinishWith(units.status());
      return;
    }
    std::map<int, v1::TaskResult> cached;
    for (size_t i = 0; i < units->size(); ++i) {
      if (auto hit = results->Lookup((*units)[i].action_digest)) cached[i] = *hit;
    }
    std::shared_ptr<Handle> handle = handle_;
    absl::StatusOr<std::string> id = scheduler_->SubmitBuild(
        request.build_name(), request.toolchain(), std::move(*units), std::move(cached),
        [handle](const v1::BuildEvent& event) { handle->Push(event); }, absl::Now());
    if (!id.ok()) {
      FinishWith(id.status());
      return;
    }
    absl::MutexLock lock(&mu_);
    build_id_ = *id;
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      finished_ = true;
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    if (current_.has_finished()) {
      finished_ = true;
      build_done_ = true;
      Finish(grpc::Status::OK);
      return;
    }
    WriteNext();
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&handle_->mu);
      handle_->stream = nullptr;
    }
    std::string build_id;
    bool done;
    {
      absl::MutexLock lock(&mu_);
      build_id = build_id_;
      done = build_done_;
    }
    if (!build_id.empty() && !done) scheduler_->CancelBuild(build_id);
    delete this;
  }

 private:
  void Push(const v1::BuildEvent& event) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    pending_.push_back(event);
    if (!writing_) WriteNext();
  }

  void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (pending_.empty()) return;
    current_ = std::move(pending_.front());
    pending_.pop_front();
    writing_ = true;
    StartWrite(&current_);
  }

  void FinishWith(const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    finished_ = true;
    Finish(ToGrpcStatus(status));
  }

  BuildScheduler* scheduler_;
  std::shared_ptr<Handle> handle_;
  absl::Mutex mu_;
  std::deque<v1::BuildEvent> pending_ ABSL_GUARDED_BY(mu_);
  v1::BuildEvent current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool build_done_ ABSL_GUARDED_BY(mu_) = false;
  std::string build_id_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerUnaryReactor* BuildService::GetClusterStatus(grpc::CallbackServerContext* context,
                                                         const v1::GetClusterStatusRequest* request,
                                                         v1::ClusterStatus* response) {
  auto* reactor = context->DefaultReactor();
  *response = scheduler_->Status(absl::Now());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<v1::BuildEvent>* BuildService::SubmitBuild(
    grpc::CallbackServerContext* context, const v1::SubmitBuildRequest* request) {
  auto* stream = new BuildEventStream(scheduler_);
  stream->Start(*request, cas_, results_);
  return stream;
}

}  // namespace distcc_cuda::coordinator
