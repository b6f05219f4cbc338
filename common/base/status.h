// SPDX-License-Identifier: Apache-2.0
// Status helpers shared by every role: propagation macros and the one place
// where absl::Status and grpc::Status are converted into each other.
#pragma once

#include <grpcpp/support/status.h>

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

// Converts an absl::Status into the grpc::Status with the same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Converts a grpc::Status into the absl::Status with the same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

// Returns `status` with `context` prepended to its message ("context: message").
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace distcc_cuda
