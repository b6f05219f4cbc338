// SPDX-License-Identifier: Apache-2.0
#include "coordinator/worker_service.h"

#include <atomic>

#include "common/status.h"

namespace distcc_cuda::coordinator {
namespace {

// A lease call parked in the scheduler until a unit is ready for the worker,
// its wait runs out, or the worker hangs up.
class LeaseReactor final : public grpc::ServerUnaryReactor {
 public:
  LeaseReactor(BuildScheduler* scheduler, std::string worker_id, v1::LeaseTaskResponse* response)
      : scheduler_(scheduler), worker_id_(std::move(worker_id)), response_(response) {}

  void Start(absl::Duration wait) {
    absl::Time now = absl::Now();
    absl::Status status = scheduler_->RequestLease(
        worker_id_, now + wait, [this](std::optional<v1::Task> task) { Answer(std::move(task)); },
        now);
    if (!status.ok()) FinishOnce(ToGrpcStatus(status));
  }

  void OnCancel() override { scheduler_->CancelLeaseRequest(worker_id_); }
  void OnDone() override { delete this; }

 private:
  void Answer(std::optional<v1::Task> task) {
    if (finished_.exchange(true)) return;
    if (task) *response_->mutable_task() = std::move(*task);
    Finish(grpc::Status::OK);
  }
  void FinishOnce(const grpc::Status& status) {
    if (!finished_.exchange(true)) Finish(status);
  }

  BuildScheduler* scheduler_;
  std::string worker_id_;
  v1::LeaseTaskResponse* response_;
  std::atomic<bool> finished_{false};
};

}  // namespace

grpc::ServerUnaryReactor* WorkerService::RegisterWorker(grpc::CallbackServerContext* context,
                                                        const v1::RegisterWorkerRequest* request,
                                                        v1::RegisterWorkerResponse* response) {
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<std::string> id = scheduler_->RegisterWorker(*request, absl::Now());
  if (id.ok()) {
    response->set_worker_id(*id);
    response->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(heartbeat_interval_));
  }
  reactor->Finish(ToGrpcStatus(id.status()));
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::Heartbeat(grpc::CallbackServerContext* context,
                                                   const v1::HeartbeatRequest* request,
                                                   v1::HeartbeatResponse* response) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(scheduler_->Heartbeat(*request, absl::Now())));
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::LeaseTask(grpc::CallbackServerContext* context,
                                                   const v1::LeaseTaskRequest* request,
                                                   v1::LeaseTaskResponse* response) {
  auto* reactor = new LeaseReactor(scheduler_, request->worker_id(), response);
  // Never hold a call longer than 30 s, whatever the worker asks for.
  reactor->Start(absl::Milliseconds(std::clamp<int64_t>(request->wait_ms(), 0, 30000)));
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::ReportResult(grpc::CallbackServerContext* context,
                                                      const v1::ReportResultRequest* request,
                                                      v1::ReportResultResponse* response) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(scheduler_->ReportResult(*request, absl::Now())));
  return reactor;
}

}  // namespace distcc_cuda::coordinator
