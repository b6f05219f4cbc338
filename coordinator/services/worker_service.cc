// SPDX-License-Identifier: Apache-2.0
#include "coordinator/services/worker_service.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/store/digest.h"
#include "coordinator/planning/request_cost.h"

namespace distcc_cuda::coordinator {
namespace {

// A lease call parked in the scheduler until a unit is ready for the worker,
// its wait runs out, or the worker hangs up.
class LeaseReactor final : public grpc::ServerUnaryReactor {
 public:
  LeaseReactor(BuildScheduler* scheduler, std::string worker_id, WorkerPeer peer,
               grpc::ByteBuffer* response)
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
    v1::LeaseTaskResponse response;
    if (task) *response.mutable_task() = std::move(*task);
    *response_ = SerializedBytes(response);
    Finish(grpc::Status::OK);
  }
  void FinishOnce(const grpc::Status& status) {
    if (!finished_.exchange(true)) Finish(status);
  }

  BuildScheduler* scheduler_;
  std::string worker_id_;
  WorkerPeer peer_;
  grpc::ByteBuffer* response_;
  std::atomic<bool> finished_{false};
};

// Who the scheduler binds a worker id to.
WorkerPeer PeerOf(const Principal& principal) {
  return WorkerPeer{principal.name, principal.authenticated};
}

// Finishes `reactor` with `answer`: its response as bytes, or its error.
template <typename Response>
grpc::ServerUnaryReactor* FinishWith(grpc::ServerUnaryReactor* reactor,
                                     const absl::StatusOr<Response>& answer,
                                     grpc::ByteBuffer* raw_response) {
  if (answer.ok()) *raw_response = SerializedBytes(*answer);
  reactor->Finish(ToGrpcStatus(answer.status()));
  return reactor;
}

// `response` once `status` is OK.
template <typename Response>
absl::StatusOr<Response> Answer(const absl::Status& status, Response response) {
  if (!status.ok()) return status;
  return response;
}

}  // namespace

absl::StatusOr<Principal> WorkerService::Admit(grpc::CallbackServerContext& context,
                                               const grpc::ByteBuffer& raw, int64_t max_bytes,
                                               absl::string_view action,
                                               google::protobuf::Message& request) const {
  ASSIGN_OR_RETURN(Principal principal, access_->Authorize(context, {PeerRole::kWorker}, action));
  const int64_t size = raw.Length();
  if (size > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a worker's request to ", action, " is ", size, " bytes, over the ", max_bytes, " bytes (",
        FormatByteSize(max_bytes), ") such a request may be; it was not read"));
  }
  RETURN_IF_ERROR(ParseRequest(raw, nullptr, absl::StrCat("the request to ", action), request));
  return principal;
}

grpc::ServerUnaryReactor* WorkerService::RegisterWorker(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* raw,
                                                        grpc::ByteBuffer* raw_response) {
  auto* reactor = context->DefaultReactor();
  v1::RegisterWorkerRequest request;
  absl::StatusOr<Principal> principal =
      Admit(*context, *raw, limits_.register_bytes, "register a worker", request);
  if (!principal.ok()) {
    return FinishWith<v1::RegisterWorkerResponse>(reactor, principal.status(), raw_response);
  }
  return FinishWith(reactor, Register(request, *principal), raw_response);
}

absl::StatusOr<v1::RegisterWorkerResponse> WorkerService::Register(
    const v1::RegisterWorkerRequest& request, const Principal& principal) {
  if (!request.reads_input_trees()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker '", TerminalSafe(request.name().substr(0, 200)),
        "' is from an older release of distcc-cuda, which cannot read the input trees this "
        "coordinator sends (its units would compile without their headers); upgrade the "
        "worker to this coordinator's release"));
  }
  // The id answers only to this principal from now on.
  ASSIGN_OR_RETURN(std::string id,
                   scheduler_->RegisterWorker(request, absl::Now(), PeerOf(principal)));
  v1::RegisterWorkerResponse response;
  response.set_worker_id(id);
  response.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(heartbeat_interval_));
  return response;
}

grpc::ServerUnaryReactor* WorkerService::Heartbeat(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* raw_response) {
  auto* reactor = context->DefaultReactor();
  v1::HeartbeatRequest request;
  absl::StatusOr<Principal> principal =
      Admit(*context, *raw, limits_.heartbeat_bytes, "send worker heartbeats", request);
  if (!principal.ok()) {
    return FinishWith<v1::HeartbeatResponse>(reactor, principal.status(), raw_response);
  }
  v1::HeartbeatResponse response;
  absl::Status status = scheduler_->Heartbeat(request, absl::Now(), PeerOf(*principal), &response);
  return FinishWith(reactor, Answer(status, std::move(response)), raw_response);
}

grpc::ServerUnaryReactor* WorkerService::DeregisterWorker(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* raw,
                                                          grpc::ByteBuffer* raw_response) {
  auto* reactor = context->DefaultReactor();
  v1::DeregisterWorkerRequest request;
  absl::StatusOr<Principal> principal =
      Admit(*context, *raw, limits_.deregister_bytes, "deregister a worker", request);
  if (!principal.ok()) {
    return FinishWith<v1::DeregisterWorkerResponse>(reactor, principal.status(), raw_response);
  }
  absl::Status status = scheduler_->DeregisterWorker(
      request.worker_id(), absl::Now(), PeerOf(*principal),
      request.toolchain_changed() ? BuildScheduler::Departure::kToolchainChanged
                                  : BuildScheduler::Departure::kStopping);
  return FinishWith(reactor, Answer(status, v1::DeregisterWorkerResponse()), raw_response);
}

grpc::ServerUnaryReactor* WorkerService::LeaseTask(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* raw_response) {
  v1::LeaseTaskRequest request;
  absl::StatusOr<Principal> principal =
      Admit(*context, *raw, limits_.lease_bytes, "lease compile units", request);
  if (!principal.ok()) {
    return FinishWith<v1::LeaseTaskResponse>(context->DefaultReactor(), principal.status(),
                                             raw_response);
  }
  auto* reactor =
      new LeaseReactor(scheduler_, request.worker_id(), PeerOf(*principal), raw_response);
  // Never hold a call longer than 30 s, whatever the worker asks for.
  reactor->Start(absl::Milliseconds(std::clamp<int64_t>(request.wait_ms(), 0, 30000)));
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::ReportResult(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* raw,
                                                      grpc::ByteBuffer* raw_response) {
  auto* reactor = context->DefaultReactor();
  v1::ReportResultRequest request;
  absl::StatusOr<Principal> principal =
      Admit(*context, *raw, limits_.report_bytes, "report results", request);
  if (!principal.ok()) {
    return FinishWith<v1::ReportResultResponse>(reactor, principal.status(), raw_response);
  }
  auto report = std::make_shared<const v1::ReportResultRequest>(std::move(request));
  RunOnOrHere(reports_, [this, reactor, report, principal = *principal, raw_response] {
    FinishWith(reactor, Report(*report, principal), raw_response);
  });
  return reactor;
}

absl::StatusOr<v1::ReportResultResponse> WorkerService::Report(
    const v1::ReportResultRequest& request, const Principal& principal) {
  // A successful compile's outputs must be in the store, whole, before the
  // result can be linked or cached: else the unit runs elsewhere.
  const v1::TaskResult& result = request.result();
  if (result.outcome() == v1::TASK_COMPLETED && result.exit_code() == 0) {
    for (const v1::OutputFile& output : result.outputs()) {
      Digest digest = FromProto(output.digest());
      if (!ValidateDigest(digest).ok() || !cas_->Contains(digest)) {
        std::string why =
            absl::StrCat("output ", absl::CHexEscape(output.path().substr(0, 200)), " (",
                         digest.ToString().substr(0, 80), ") is not in the content store");
        RETURN_IF_ERROR(scheduler_->RejectResult(request.worker_id(), request.task_id(), why,
                                                 absl::Now(), PeerOf(principal)));
        return absl::InvalidArgumentError(absl::StrCat("report refused: ", why));
      }
    }
  }
  RETURN_IF_ERROR(scheduler_->ReportResult(request, absl::Now(), PeerOf(principal)));
  return v1::ReportResultResponse();
}

}  // namespace distcc_cuda::coordinator
