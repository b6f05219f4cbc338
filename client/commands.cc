// SPDX-License-Identifier: Apache-2.0
#include "client/commands.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "client/text/cluster_view.h"
#include "client/text/coordinator_text.h"
#include "common/base/byte_size.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/nvcc/fatbin.h"
#include "common/nvcc/toolchain.h"
#include "common/transport/tls_credentials.h"
#include "distcc_cuda/v1/build.grpc.pb.h"

namespace distcc_cuda::client {

namespace {

// One GetClusterStatus, its strings made safe to print.
absl::StatusOr<v1::ClusterStatus> FetchStatus(v1::BuildService::Stub& stub,
                                              const std::string& coordinator_address,
                                              absl::Duration timeout, bool tls) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  v1::ClusterStatus status;
  grpc::Status rpc = stub.GetClusterStatus(&context, {}, &status);
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
  return status;
}

}  // namespace

absl::Status RunStatus(const std::string& coordinator_address, absl::Duration connect_timeout,
                       std::ostream& out, const std::optional<TlsMaterial>& tls) {
  auto stub = v1::BuildService::NewStub(OpenChannel(coordinator_address, tls));
  ASSIGN_OR_RETURN(v1::ClusterStatus status,
                   FetchStatus(*stub, coordinator_address, connect_timeout, tls.has_value()));
  out << "coordinator " << coordinator_address << ": " << status.workers_size() << " workers, "
      << status.active_builds() << " builds, " << status.queued_units() << " units queued, "
      << status.running_units() << " running\n";
  for (const auto& worker : status.workers()) {
    out << absl::StrFormat("  %-24s slots %d/%d busy  reserved %s of cap %s  done %d\n",
                           worker.name(), worker.running_tasks(), worker.slots(),
                           FormatByteSize(worker.reserved_bytes()),
                           FormatByteSize(worker.memory_cap_bytes()), worker.tasks_completed());
    out << "      " << DescribeToolchain(worker.toolchain()) << "\n";
    if (!worker.toolkit_source().empty())
      out << "      toolkit " << worker.toolkit_source() << "\n";
    for (const v1::ToolchainFingerprint& more : worker.more_toolchains()) {
      out << "      and " << DescribeToolchain(more) << " (served by the coordinator)\n";
    }
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
  for (const auto& revoked : status.revoked_workers()) {
    out << "  revoked " << revoked.name() << " since "
        << absl::FormatTime("%Y-%m-%d %H:%M UTC",
                            absl::FromUnixSeconds(revoked.since_unix_seconds()),
                            absl::UTCTimeZone())
        << ": " << revoked.reason() << "\n";
  }
  return absl::OkStatus();
}

absl::Status RunStatusWatch(const std::string& coordinator_address, absl::Duration connect_timeout,
                            const StatusWatchOptions& watch, std::ostream& out,
                            const std::optional<TlsMaterial>& tls) {
  auto stub = v1::BuildService::NewStub(OpenChannel(coordinator_address, tls));
  // The first answer decides whether there is anything to watch.
  ASSIGN_OR_RETURN(v1::ClusterStatus status,
                   FetchStatus(*stub, coordinator_address, connect_timeout, tls.has_value()));
  absl::Status last = absl::OkStatus();
  for (int frame = 0; watch.frames <= 0 || frame < watch.frames; ++frame) {
    if (frame > 0) {
      absl::SleepFor(watch.interval);
      absl::StatusOr<v1::ClusterStatus> next =
          FetchStatus(*stub, coordinator_address, connect_timeout, tls.has_value());
      last = next.status();
      if (next.ok()) status = *std::move(next);
    }
    std::string view = RenderClusterView(status, coordinator_address, absl::Now(), watch.width);
    if (!last.ok()) {
      absl::StrAppend(&view, "\n(no answer now, showing the last: ", last.message(), ")\n");
    }
    // In place on a terminal: home, the view, clear what the last one left.
    if (watch.terminal) {
      out << "\x1b[H" << absl::StrReplaceAll(view, {{"\n", "\x1b[K\n"}}) << "\x1b[J";
    } else {
      out << view << "\n";
    }
    out.flush();
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
