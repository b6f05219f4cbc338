// SPDX-License-Identifier: Apache-2.0
#include "common/base/status.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/base/terminal_text.h"
#include "distcc_cuda/v1/rpc_status.pb.h"

namespace distcc_cuda {
namespace {

// A peer's error details larger than this are not read: a real one names a
// few thousand blobs at most.
constexpr size_t kMaxDetailBytes = size_t{4} << 20;

std::optional<v1::PreconditionFailure> PreconditionFailureOf(const absl::Status& status) {
  auto payload = status.GetPayload(kPreconditionFailureType);
  if (!payload) return std::nullopt;
  v1::PreconditionFailure failure;
  if (!failure.ParseFromString(std::string(*payload))) return std::nullopt;
  return failure;
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const auto code = static_cast<grpc::StatusCode>(status.code());
  auto failure = status.GetPayload(kPreconditionFailureType);
  if (!failure) return grpc::Status(code, std::string(status.message()));
  v1::RpcStatus details;
  details.set_code(static_cast<int>(status.code()));
  details.set_message(std::string(status.message()));
  google::protobuf::Any* any = details.add_details();
  any->set_type_url(kPreconditionFailureType);
  any->set_value(std::string(*failure));
  return grpc::Status(code, std::string(status.message()), details.SerializeAsString());
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // A peer's words: nothing in them may act on the terminal they reach.
  absl::Status converted(static_cast<absl::StatusCode>(status.error_code()),
                         TerminalSafe(status.error_message(), /*keep_newlines=*/true));
  const std::string& bytes = status.error_details();
  v1::RpcStatus details;
  if (bytes.empty() || bytes.size() > kMaxDetailBytes || !details.ParseFromString(bytes)) {
    return converted;
  }
  for (const google::protobuf::Any& any : details.details()) {
    v1::PreconditionFailure failure;
    if (any.type_url() == kPreconditionFailureType && failure.ParseFromString(any.value())) {
      converted.SetPayload(kPreconditionFailureType, absl::Cord(any.value()));
      break;
    }
  }
  return converted;
}

absl::Status PreconditionError(absl::string_view message, absl::string_view type,
                               const std::vector<std::string>& subjects) {
  absl::Status status = absl::FailedPreconditionError(message);
  v1::PreconditionFailure failure;
  for (const std::string& subject : subjects) {
    v1::PreconditionFailure::Violation* violation = failure.add_violations();
    violation->set_type(std::string(type));
    violation->set_subject(subject);
  }
  status.SetPayload(kPreconditionFailureType, absl::Cord(failure.SerializeAsString()));
  return status;
}

absl::Status MissingBlobsError(absl::string_view message,
                               const std::vector<std::string>& subjects) {
  return PreconditionError(message, "MISSING", subjects);
}

bool HasPreconditionFailure(const absl::Status& status) {
  return PreconditionFailureOf(status).has_value();
}

bool NamesMissingBlobs(const absl::Status& status) {
  if (!absl::IsFailedPrecondition(status)) return false;
  std::optional<v1::PreconditionFailure> failure = PreconditionFailureOf(status);
  if (!failure) return false;
  for (const v1::PreconditionFailure::Violation& violation : failure->violations()) {
    if (violation.type() == "MISSING") return true;
  }
  return false;
}

bool NamesMissingBlobs(const grpc::Status& status) {
  return NamesMissingBlobs(FromGrpcStatus(status));
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  absl::Status annotated(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload([&annotated](absl::string_view type, const absl::Cord& payload) {
    annotated.SetPayload(type, payload);
  });
  return annotated;
}

}  // namespace distcc_cuda
