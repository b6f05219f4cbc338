// SPDX-License-Identifier: Apache-2.0
#include "common/reapi/execution_client.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"

namespace distcc_cuda {
namespace {

using OperationReader = grpc::ClientReaderInterface<google::longrunning::Operation>;

// How one stream of Operations ended.
struct StreamEnd {
  std::string operation;  // its name, once the engine gave one
  std::optional<absl::StatusOr<reapi::ExecuteResponse>> finished;  // the Operation was done
  grpc::Status status;                                             // the stream's own end
};

// The outcome a done Operation carries.
absl::StatusOr<reapi::ExecuteResponse> ResponseOf(const google::longrunning::Operation& operation) {
  if (operation.has_error()) {
    // An error that says OK is the engine's mistake, not a result.
    const int code = operation.error().code();
    return absl::Status(
        code == 0 || code > 16 ? absl::StatusCode::kInternal : static_cast<absl::StatusCode>(code),
        absl::StrCat(code == 0 ? "the engine ended the operation with an error "
                                 "that says OK: "
                               : "",
                     TerminalSafe(operation.error().message())));
  }
  reapi::ExecuteResponse response;
  if (!operation.response().UnpackTo(&response)) {
    return absl::InternalError(
        absl::StrCat("the engine's operation ", TerminalSafe(operation.name().substr(0, 200)),
                     " ended with something not an ExecuteResponse (",
                     TerminalSafe(operation.response().type_url().substr(0, 200)), ")"));
  }
  return response;
}

// Reads Operations from `reader` until one is done or the stream ends.
StreamEnd Follow(OperationReader& reader, std::string operation) {
  StreamEnd end;
  end.operation = std::move(operation);
  google::longrunning::Operation read;
  while (reader.Read(&read)) {
    if (!read.name().empty()) end.operation = read.name();
    if (read.done()) {
      end.finished = ResponseOf(read);
      break;
    }
  }
  end.status = reader.Finish();
  return end;
}

// A call's context that `cancel` cancels.
class CancellableCall {
 public:
  explicit CancellableCall(const CancelToken& cancel)
      : watch_(&cancel, [this] { context_.TryCancel(); }) {}
  grpc::ClientContext& context() { return context_; }

 private:
  grpc::ClientContext context_;
  CancelWatch watch_;  // destroyed before the context
};

}  // namespace

absl::Status CheckEngineExecutes(const std::shared_ptr<grpc::Channel>& channel,
                                 const std::string& instance, const std::string& url,
                                 absl::Duration timeout) {
  auto capabilities = reapi::Capabilities::NewStub(channel);
  reapi::GetCapabilitiesRequest request;
  request.set_instance_name(instance);
  reapi::ServerCapabilities response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  context.set_wait_for_ready(true);
  grpc::Status status = capabilities->GetCapabilities(&context, request, &response);
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
      status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    // Asked once more without waiting, the channel says why it cannot
    // connect (refused, a TLS handshake that failed and how).
    grpc::ClientContext again;
    again.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    grpc::Status last = capabilities->GetCapabilities(&again, request, &response);
    const std::string why =
        last.error_code() == grpc::StatusCode::UNAVAILABLE && !last.error_message().empty()
            ? absl::StrCat(" (gRPC: ", TerminalSafe(last.error_message().substr(0, 400)), ")")
            : "";
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the engine at ", url, " within ", absl::FormatDuration(timeout), why,
        "; check the address, that the engine serves the Remote Execution API there, and "
        "grpc:// or grpcs:// (TLS)"));
  }
  RETURN_IF_ERROR(Annotate(FromGrpcStatus(status),
                           absl::StrCat("asking the engine at ", url, " for its capabilities")));
  const reapi::ExecutionCapabilities& execution = response.execution_capabilities();
  if (!execution.exec_enabled()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the engine at ", url, " does not execute actions",
        instance.empty() ? "" : absl::StrCat(" for instance '", TerminalSafe(instance), "'"),
        " (exec_enabled is false): it may be a cache only; check --remote-instance"));
  }
  // REAPI 2.3: the list where there is one, else the single function.
  bool sha256 = execution.digest_function() == reapi::DigestFunction::SHA256;
  if (execution.digest_functions_size() > 0) {
    sha256 = std::find(execution.digest_functions().begin(), execution.digest_functions().end(),
                       reapi::DigestFunction::SHA256) != execution.digest_functions().end();
  }
  if (!sha256) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the engine at ", url, " does not hash with SHA-256, which distcc-cuda's store uses"));
  }
  return absl::OkStatus();
}

ReapiExecutionClient::ReapiExecutionClient(const std::shared_ptr<grpc::Channel>& channel,
                                           std::string instance)
    : instance_(std::move(instance)),
      stub_(reapi::Execution::NewStub(channel)),
      action_cache_(reapi::ActionCache::NewStub(channel)),
      operations_(google::longrunning::Operations::NewStub(channel)) {}

void ReapiExecutionClient::CancelOperation(const std::string& name) {
  if (name.empty()) return;
  // The action stops on the engine too, where the engine can: a build
  // cancelled here must not leave its units running there. Best effort.
  google::longrunning::CancelOperationRequest request;
  request.set_name(name);
  google::protobuf::Empty response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  operations_->CancelOperation(&context, request, &response);
}

absl::StatusOr<reapi::ExecuteResponse> ReapiExecutionClient::Execute(const reapi::Digest& action,
                                                                     const CancelToken& cancel) {
  reapi::ExecuteRequest request;
  request.set_instance_name(instance_);
  *request.mutable_action_digest() = action;
  StreamEnd end;
  {
    CancellableCall call(cancel);
    std::unique_ptr<OperationReader> reader = stub_->Execute(&call.context(), request);
    end = Follow(*reader, "");
  }
  // A stream that broke before the end (the engine restarted, a proxy cut
  // an idle stream): the operation is followed again by its name, a second
  // after each break, for about a minute of breaks.
  for (int attempt = 0; !end.finished.has_value() && attempt < 60; ++attempt) {
    if (cancel.cancelled()) break;
    const grpc::StatusCode code = end.status.error_code();
    if (end.operation.empty() ||
        (code != grpc::StatusCode::UNAVAILABLE && code != grpc::StatusCode::OK &&
         code != grpc::StatusCode::DEADLINE_EXCEEDED)) {
      break;
    }
    cancel.WaitFor(absl::Seconds(1));
    reapi::WaitExecutionRequest wait;
    wait.set_name(end.operation);
    CancellableCall call(cancel);
    std::unique_ptr<OperationReader> reader = stub_->WaitExecution(&call.context(), wait);
    end = Follow(*reader, end.operation);
  }
  if (cancel.cancelled()) {
    CancelOperation(end.operation);
    return absl::CancelledError(cancel.reason());
  }
  if (end.finished.has_value()) return *std::move(end.finished);
  if (!end.status.ok()) {
    return Annotate(FromGrpcStatus(end.status), "the engine's Execute");
  }
  return absl::UnavailableError("the engine ended the execution's stream without its result");
}

absl::StatusOr<std::optional<reapi::ActionResult>> ReapiExecutionClient::CachedResult(
    const reapi::Digest& action, const CancelToken& cancel) {
  reapi::GetActionResultRequest request;
  request.set_instance_name(instance_);
  *request.mutable_action_digest() = action;
  request.set_inline_stdout(true);
  request.set_inline_stderr(true);
  reapi::ActionResult result;
  CancellableCall call(cancel);
  call.context().set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  const grpc::Status status = action_cache_->GetActionResult(&call.context(), request, &result);
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) return std::nullopt;
  if (!status.ok()) {
    return Annotate(FromGrpcStatus(status), "the engine's ActionCache");
  }
  return result;
}

}  // namespace distcc_cuda
