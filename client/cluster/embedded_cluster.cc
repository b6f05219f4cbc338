// SPDX-License-Identifier: Apache-2.0
#include "client/cluster/embedded_cluster.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/base/host_resources.h"
#include "common/base/status.h"
#include "common/process/memory_cap.h"
#include "common/reapi/execution_client.h"
#include "common/store/cas_store.h"
#include "common/transport/certificates.h"

namespace distcc_cuda::client {

absl::StatusOr<std::unique_ptr<EmbeddedCluster>> EmbeddedCluster::Start(
    const std::string& state_dir, const std::string& nvcc, int slots, bool sandbox,
    bool worker_in_background, const RemoteEngineSettings* remote) {
  auto cluster = std::make_unique<EmbeddedCluster>();
  coordinator::CoordinatorOptions coordinator_options;
  coordinator_options.in_process = true;
  coordinator_options.state_dir = state_dir + "/coordinator";
  coordinator_options.cas_max_bytes = DefaultCasMaxBytes(coordinator_options.state_dir + "/cas");
  // The worker registers while the build's command starts: a unit sent
  // before it has waits for it, as at a coordinator's own start, instead of
  // being refused for want of workers.
  coordinator_options.scheduler.startup_grace = 2 * coordinator_options.scheduler.heartbeat_timeout;
  // The launcher's calls of a burst start longest first (scan_cohort.h).
  coordinator_options.scheduler.arrival_grace = absl::Milliseconds(coordinator::kArrivalGraceMs);
  absl::StatusOr<std::unique_ptr<coordinator::Coordinator>> started =
      coordinator::Coordinator::Start(coordinator_options);
  if (absl::IsFailedPrecondition(started.status())) {
    // Two embedded builds would each take this machine's whole memory.
    return absl::FailedPreconditionError(absl::StrCat(
        "another distcc-cuda build is running on this machine with the same state dir (",
        started.status().message(),
        "). Wait for it to finish, or give this build its own --state-dir (the two would not "
        "know of each other's memory use)"));
  }
  if (!started.ok()) return started.status();
  cluster->coordinator_ = *std::move(started);
  cluster->channel_ = cluster->coordinator_->InProcessChannel();
  worker::WorkerOptions worker_options;
  worker_options.coordinator_address = cluster->coordinator_->address();
  worker_options.channel = cluster->coordinator_->InProcessChannel();
  worker_options.name = "local";
  worker_options.slots = slots > 0 ? slots : UsableCores();
  worker_options.memory_cap_bytes = DefaultMemoryCap().bytes;
  worker_options.nvcc_path = nvcc;
  worker_options.work_dir = state_dir + "/worker";
  worker_options.cas_max_bytes = DefaultCasMaxBytes(worker_options.work_dir + "/cas");
  worker_options.sandbox = sandbox;
  cluster->machine_slots_ = std::make_shared<MachineSlots>(worker_options.slots);
  worker_options.machine_slots = cluster->machine_slots_;
  if (remote != nullptr) {
    // Units compile on the engine: this machine's slots are for the build's
    // own scans and links.
    worker_options.name = "engine";
    worker_options.slots = remote->jobs;
    worker_options.memory_cap_bytes = remote->memory_bytes;
    worker_options.machine_slots = nullptr;
    worker_options.remote_executor = remote->address;
    worker_options.instance = remote->instance;
    worker_options.remote_headers = remote->headers;
    worker_options.remote_tls = remote->tls;
    worker_options.memory_property = remote->memory_property;
  }
  cluster->slots_ = worker_options.slots;
  cluster->memory_cap_bytes_ = worker_options.memory_cap_bytes;
  EmbeddedCluster* self = cluster.get();
  auto start_worker = [self, worker_options] {
    absl::StatusOr<std::unique_ptr<worker::Worker>> worker = worker::Worker::Start(worker_options);
    if (worker.ok()) {
      self->worker_ = *std::move(worker);
    } else if (worker_options.sandbox && absl::IsFailedPrecondition(worker.status())) {
      self->worker_status_ = absl::FailedPreconditionError(absl::StrCat(
          worker.status().message(),
          ". For `distcc-cuda build` on this machine, --insecure-no-sandbox compiles without "
          "one (only your own builds reach this machine's embedded coordinator, but any local "
          "user could connect to it while it runs)"));
    } else {
      self->worker_status_ = worker.status();
    }
    self->worker_started_.Notify();
  };
  if (worker_in_background) {
    cluster->worker_start_ = std::thread(start_worker);
  } else {
    start_worker();
    RETURN_IF_ERROR(cluster->worker_status_);
  }
  return cluster;
}

EmbeddedCluster::~EmbeddedCluster() {
  if (worker_start_.joinable()) worker_start_.join();
  worker_.reset();
  coordinator_.reset();
}

absl::Status EmbeddedCluster::WorkerStarted() {
  worker_started_.WaitForNotification();
  return worker_status_;
}

std::string EmbeddedCluster::sandbox_description() {
  if (!WorkerStarted().ok()) return "no worker: it could not start";
  return worker_->sandbox_description();
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectToCoordinator(
    const std::string& address, const EmbeddedCluster* embedded,
    const std::optional<TlsMaterial>& tls, absl::Duration timeout) {
  if (embedded != nullptr) return embedded->channel();
  auto channel = OpenChannel(address, tls);
  if (channel->WaitForConnected(std::chrono::system_clock::now() +
                                absl::ToChronoMilliseconds(timeout))) {
    return channel;
  }
  return absl::UnavailableError(absl::StrCat(
      "cannot reach the coordinator at ", address, " within ", absl::FormatDuration(timeout),
      "; check the address and that distcc-cuda-coordinator is running, or "
      "leave out --coordinator to build on this machine",
      embedded != nullptr ? ""
      : tls               ? " (a TLS handshake that fails looks the same: check that the "
                            "coordinator's certificate names this address and comes from the CA in "
                            "--tls-ca)"
                          : " (a coordinator that requires certificates looks the same: pass "
                            "--tls-ca, --tls-cert and --tls-key)"));
}

std::string DescribeRemoteEngine(const RemoteEngineSettings& remote) {
  const MemoryProperty& memory = remote.memory_property;
  return absl::StrCat(
      "distcc-cuda: compiling on the engine at ", remote.address.Url(),
      remote.instance.empty() ? "" : absl::StrCat(" (instance ", remote.instance, ")"), ": up to ",
      remote.jobs, " units at once, its largest worker taken as ",
      FormatByteSize(remote.memory_bytes), ", ",
      memory.name.empty()
          ? "no memory property"
          : absl::StrCat("each unit's predicted peak in property ", memory.name,
                         memory.unit_bytes == 1
                             ? " (bytes)"
                             : absl::StrCat(" (units of ", memory.unit_bytes, " bytes)")),
      "\n");
}

namespace {

// What to check of TLS when an engine reached over it does not answer.
std::string TlsHints(const RemoteEngineSettings& remote) {
  const EngineTlsFiles& files = remote.tls_files;
  return absl::StrCat(
      "; over TLS, the engine's certificate must come from ",
      files.ca.empty() ? "a CA this system trusts (else name its CA with --remote-tls-ca)"
                       : absl::StrCat("the CA in --remote-tls-ca ", files.ca),
      files.cert.empty()
          ? ", and an engine that asks for a client certificate (mutual TLS) needs "
            "--remote-tls-cert and --remote-tls-key"
          : absl::StrCat(", and it must take the client certificate --remote-tls-cert ",
                         files.cert));
}

}  // namespace

absl::StatusOr<ClusterConnection> ConnectToCluster(const ClusterSettings& settings,
                                                   std::ostream& out) {
  ClusterConnection cluster;
  cluster.address = settings.coordinator_address;
  if (settings.remote.has_value()) {
    // An engine that is not there fails the build in seconds, before any
    // scanning.
    const RemoteEngineSettings& remote = *settings.remote;
    absl::Status executes =
        CheckEngineExecutes(OpenEngineChannel(remote.address, remote.tls, remote.headers),
                            remote.instance, remote.address.Url(), settings.connect_timeout);
    if (absl::IsUnavailable(executes) && remote.address.tls) {
      return absl::UnavailableError(absl::StrCat(executes.message(), TlsHints(remote)));
    }
    RETURN_IF_ERROR(executes);
  }
  if (cluster.address.empty()) {
    ASSIGN_OR_RETURN(
        cluster.embedded,
        EmbeddedCluster::Start(settings.state_dir, settings.nvcc_path, settings.embedded_slots,
                               settings.embedded_sandbox, settings.worker_in_background,
                               settings.remote ? &*settings.remote : nullptr));
    cluster.address = cluster.embedded->address();
    if (settings.remote.has_value()) {
      out << DescribeRemoteEngine(*settings.remote);
    } else {
      out << "distcc-cuda: no --coordinator given; building on this machine ("
          << cluster.embedded->slots() << " slots, memory cap "
          << FormatByteSize(cluster.embedded->memory_cap_bytes()) << ")\n";
    }
    // A worker starting in the background says how it isolates compiles
    // only once it has started.
    if (!settings.embedded_sandbox && !settings.worker_in_background) {
      out << "distcc-cuda: " << cluster.embedded->sandbox_description() << "\n";
    }
  }
  // The embedded coordinator speaks mutual TLS with certificates of its own.
  ASSIGN_OR_RETURN(cluster.channel, ConnectToCoordinator(cluster.address, cluster.embedded.get(),
                                                         settings.tls, settings.connect_timeout));
  return cluster;
}

}  // namespace distcc_cuda::client
