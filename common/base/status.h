// SPDX-License-Identifier: Apache-2.0
// Status helpers shared by every role: propagation macros and the one place
// where absl::Status and grpc::Status are converted into each other.
#pragma once

#include <grpcpp/support/status.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#define DISTCC_CONCAT_INNER_(a, b) a##b
#define DISTCC_CONCAT_(a, b) DISTCC_CONCAT_INNER_(a, b)

// Returns from the calling function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status distcc_status_ = (expr);          \
    if (!distcc_status_.ok()) return distcc_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, Foo())` assigns the value of an absl::StatusOr or
// returns its error from the calling function.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(DISTCC_CONCAT_(distcc_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

namespace distcc_cuda {

// The type URL of a google.rpc.PreconditionFailure (v1::PreconditionFailure,
// rpc_status.proto): the payload under which an absl::Status carries one.
inline constexpr char kPreconditionFailureType[] =
    "type.googleapis.com/google.rpc.PreconditionFailure";

// Converts an absl::Status into the grpc::Status with the same code and
// message; a PreconditionFailure payload goes as the error's details (a
// google.rpc.Status), as REAPI sends it.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Converts a grpc::Status into the absl::Status with the same code and
// message; a PreconditionFailure among its details (a peer's bytes: parsed,
// bounded, kept only when it parses) becomes its payload.
absl::Status FromGrpcStatus(const grpc::Status& status);

// FAILED_PRECONDITION saying `message`, with a PreconditionFailure of one
// violation per subject, each of `type`.
absl::Status PreconditionError(absl::string_view message, absl::string_view type,
                               const std::vector<std::string>& subjects);

// PreconditionError of type MISSING for `subjects` ("blobs/HASH/SIZE"):
// the store lacks them, and uploading them and asking again helps.
absl::Status MissingBlobsError(absl::string_view message, const std::vector<std::string>& subjects);

// The violation type of a build whose toolchain no connected worker has.
inline constexpr char kToolchainUnserved[] = "TOOLCHAIN";

// Whether `status` carries a PreconditionFailure (an older coordinator's
// FAILED_PRECONDITION does not).
bool HasPreconditionFailure(const absl::Status& status);

// Whether `status` is such an error: FAILED_PRECONDITION with a MISSING
// violation. Any other FAILED_PRECONDITION (no worker has the toolchain, a
// build closed to more units) is not helped by an upload.
bool NamesMissingBlobs(const absl::Status& status);
bool NamesMissingBlobs(const grpc::Status& status);

// Returns `status` with `context` prepended to its message ("context:
// message"), its payloads (typed details) kept.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace distcc_cuda
