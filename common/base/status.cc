// SPDX-License-Identifier: Apache-2.0
#include "common/base/status.h"

#include "absl/strings/str_cat.h"
#include "common/base/terminal_text.h"

namespace distcc_cuda {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // A peer's words: nothing in them may act on the terminal they reach.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      TerminalSafe(status.error_message(), /*keep_newlines=*/true));
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace distcc_cuda
