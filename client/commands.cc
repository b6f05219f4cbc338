// SPDX-License-Identifier: Apache-2.0
#include "client/commands.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/coordinator_text.h"
#include "common/byte_size.h"
#include "common/fatbin.h"
#include "common/status.h"
#include "common/terminal_text.h"
#include "common/tls_credentials.h"
#include "common/toolchain.h"
#include "distcc_cuda/v1/build.grpc.pb.h"

namespace distcc_cuda::client {

absl::Status RunStatus(const std::string& coordinator_address, absl::Duration connect_timeout,
                       std::ostream& out, const std::optional<TlsMaterial>& tls) {
  auto channel = OpenChannel(coordinator_address, tls);
  auto stub = v1::BuildService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(connect_timeout));
  v1::ClusterStatus status;
  grpc::Status rpc = stub->GetClusterStatus(&context, {}, &status);
  MakePrintable(status);
  if (rpc.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
      rpc.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    return Annotate(FromGrpcStatus(rpc), absl::StrCat("the coordinator at ", coordinator_address));
  }
  if (!rpc.ok()) {
    // A TLS handshake that fails looks like an unreachable address to gRPC.
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the coordinator at ", coordinator_address, ": ",
        TerminalSafe(rpc.error_message()),
        tls ? "; if it is running, check that its certificate names the host you dialled and "
              "comes from the CA in --tls-ca"
            : "; if it uses mutual TLS, pass --tls-ca, --tls-cert and --tls-key"));
  }
  out << "coordinator " << coordinator_address << ": " << status.workers_size() << " workers, "
      << status.active_builds() << " builds, " << status.queued_units() << " units queued, "
      << status.running_units() << " running\n";
  for (const auto& worker : status.workers()) {
    out << absl::StrFormat("  %-24s slots %d/%d busy  reserved %s of cap %s  done %d\n",
                           worker.name(), worker.running_tasks(), worker.slots(),
                           FormatByteSize(worker.reserved_bytes()),
                           FormatByteSize(worker.memory_cap_bytes()), worker.tasks_completed());
    out << "      " << DescribeToolchain(worker.toolchain()) << "\n";
    if (!worker.memory_mechanism().empty()) {
      out << "      cap enforced by " << worker.memory_mechanism() << "\n";
    }
    if (!worker.sandbox().empty()) out << "      " << worker.sandbox() << "\n";
  }
  for (const auto& unit : status.running()) {
    out << absl::StrFormat("  running %-40s on %-16s reserved %s (predicted %s, %s)\n",
                           unit.unit_name(), unit.worker_name(),
                           FormatByteSize(unit.reserved_bytes()),
                           FormatByteSize(unit.predicted_peak_bytes()), unit.prediction_source());
  }
  return absl::OkStatus();
}

absl::Status RunInspect(const std::string& path, std::ostream& out) {
  ASSIGN_OR_RETURN(std::vector<DeviceImage> images, ReadDeviceImages(path));
  for (const DeviceImage& image : images) {
    out << DescribeDeviceImage(image);
    // A library linked by `nvcc -shared` holds such an sm_75 cubin of its
    // device link, none of the build's kernels in it (README: inspect).
    absl::StatusOr<int> kernels =
        image.kind == DeviceImageKind::kCubin ? CountKernels(image) : absl::StatusOr<int>(-1);
    if (kernels.ok() && *kernels == 0) out << " (no kernels)";
    out << "\n";
  }
  return absl::OkStatus();
}

}  // namespace distcc_cuda::client
