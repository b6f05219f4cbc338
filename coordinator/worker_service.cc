// SPDX-License-Identifier: Apache-2.0
#include "coordinator/worker_service.h"

#include <atomic>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/digest.h"
#include "common/status.h"
#include "common/terminal_text.h"

namespace distcc_cuda::coordinator {
namespace {

// A lease call parked in the scheduler until a unit is ready for the worker,
// its wait runs out, or the worker hangs up.
class LeaseReactor final : public grpc::ServerUnaryReactor {
 public:
  LeaseReactor(BuildScheduler* scheduler, std::string worker_id, WorkerPeer peer,
               v1::LeaseTaskResponse* response)
      : scheduler_(scheduler),
        worker_id_(std::move(worker_id)),
        peer_(std::move(peer)),
        response_(response) {}

  void Start(absl::Duration wait) {
    absl::Time now = absl::Now();
    absl::Status status = scheduler_->RequestLease(
        worker_id_, now + wait, [this](std::optional<v1::Task> task) { Answer(std::move(task)); },
        now, peer_);
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
  WorkerPeer peer_;
  v1::LeaseTaskResponse* response_;
  std::atomic<bool> finished_{false};
};

// Who the scheduler binds a worker id to.
WorkerPeer PeerOf(const Principal& principal) {
  return WorkerPeer{principal.name, principal.authenticated};
}

}  // namespace

grpc::ServerUnaryReactor* WorkerService::RegisterWorker(grpc::CallbackServerContext* context,
                                                        const v1::RegisterWorkerRequest* request,
                                                        v1::RegisterWorkerResponse* response) {
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<Principal> principal =
      access_->Authorize(*context, {PeerRole::kWorker}, "register a worker");
  if (!principal.ok()) {
    reactor->Finish(ToGrpcStatus(principal.status()));
    return reactor;
  }
  if (!request->reads_input_trees()) {
    reactor->Finish(ToGrpcStatus(absl::FailedPreconditionError(absl::StrCat(
        "worker '", TerminalSafe(request->name().substr(0, 200)),
        "' is from an older release of distcc-cuda, which cannot read the input trees this "
        "coordinator sends (its units would compile without their headers); upgrade the "
        "worker to this coordinator's release"))));
    return reactor;
  }
  // The id answers only to this principal from now on.
  absl::StatusOr<std::string> id =
      scheduler_->RegisterWorker(*request, absl::Now(), PeerOf(*principal));
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
  absl::StatusOr<Principal> principal =
      access_->Authorize(*context, {PeerRole::kWorker}, "send worker heartbeats");
  if (!principal.ok()) {
    reactor->Finish(ToGrpcStatus(principal.status()));
    return reactor;
  }
  reactor->Finish(
      ToGrpcStatus(scheduler_->Heartbeat(*request, absl::Now(), PeerOf(*principal), response)));
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::DeregisterWorker(
    grpc::CallbackServerContext* context, const v1::DeregisterWorkerRequest* request,
    v1::DeregisterWorkerResponse* response) {
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<Principal> principal =
      access_->Authorize(*context, {PeerRole::kWorker}, "deregister a worker");
  if (!principal.ok()) {
    reactor->Finish(ToGrpcStatus(principal.status()));
    return reactor;
  }
  reactor->Finish(ToGrpcStatus(scheduler_->DeregisterWorker(
      request->worker_id(), absl::Now(), PeerOf(*principal),
      request->toolchain_changed() ? BuildScheduler::Departure::kToolchainChanged
                                   : BuildScheduler::Departure::kStopping)));
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::LeaseTask(grpc::CallbackServerContext* context,
                                                   const v1::LeaseTaskRequest* request,
                                                   v1::LeaseTaskResponse* response) {
  absl::StatusOr<Principal> principal =
      access_->Authorize(*context, {PeerRole::kWorker}, "lease compile units");
  if (!principal.ok()) {
    auto* refused = context->DefaultReactor();
    refused->Finish(ToGrpcStatus(principal.status()));
    return refused;
  }
  auto* reactor = new LeaseReactor(scheduler_, request->worker_id(), PeerOf(*principal), response);
  // Never hold a call longer than 30 s, whatever the worker asks for.
  reactor->Start(absl::Milliseconds(std::clamp<int64_t>(request->wait_ms(), 0, 30000)));
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::ReportResult(grpc::CallbackServerContext* context,
                                                      const v1::ReportResultRequest* request,
                                                      v1::ReportResultResponse* response) {
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<Principal> principal =
      access_->Authorize(*context, {PeerRole::kWorker}, "report results");
  if (!principal.ok()) {
    reactor->Finish(ToGrpcStatus(principal.status()));
    return reactor;
  }
  // A successful compile's outputs must be in the store, whole, before the
  // result can be linked or cached: else the unit runs elsewhere.
  const v1::TaskResult& result = request->result();
  if (result.outcome() == v1::TASK_COMPLETED && result.exit_code() == 0) {
    for (const v1::OutputFile& output : result.outputs()) {
      Digest digest = FromProto(output.digest());
      if (!ValidateDigest(digest).ok() || !cas_->Contains(digest)) {
        std::string why =
            absl::StrCat("output ", absl::CHexEscape(output.path().substr(0, 200)), " (",
                         digest.ToString().substr(0, 80), ") is not in the content store");
        absl::Status rejected = scheduler_->RejectResult(request->worker_id(), request->task_id(),
                                                         why, absl::Now(), PeerOf(*principal));
        reactor->Finish(ToGrpcStatus(
            rejected.ok() ? absl::InvalidArgumentError(absl::StrCat("report refused: ", why))
                          : rejected));
        return reactor;
      }
    }
  }
  reactor->Finish(
      ToGrpcStatus(scheduler_->ReportResult(*request, absl::Now(), PeerOf(*principal))));
  return reactor;
}

}  // namespace distcc_cuda::coordinator
