// SPDX-License-Identifier: Apache-2.0
// The coordinator process as a library: its CAS, result cache, scheduler and
// gRPC services behind one server. `main` and the in-process embedded default
// and tests all start it through Coordinator::Start.
#pragma once

#include <prometheus/registry.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/base/bounded_executor.h"
#include "common/base/files.h"
#include "common/store/cas_store.h"
#include "common/transport/http_server.h"
#include "common/transport/tls_credentials.h"
#include "coordinator/planning/build_planner.h"
#include "coordinator/scheduler/cross_check.h"
#include "coordinator/scheduler/scheduler.h"
#include "coordinator/services/memory_release.h"
#include "coordinator/trust/access_control.h"
#include "coordinator/trust/revocations.h"

namespace grpc {
class Channel;
class Server;
class Service;
}  // namespace grpc

namespace distcc_cuda::coordinator {

struct CoordinatorOptions {
  // HOST:PORT to listen on; port 0 picks a free one (see Coordinator::port).
  std::string listen_address = "127.0.0.1:0";
  // The cluster's CA and the coordinator's own certificate (role
  // coordinator): every peer must then present a certificate from that CA,
  // and its role decides what it may call. Without it the coordinator
  // listens on loopback only, unless `insecure`.
  std::optional<TlsMaterial> tls;
  // Without `tls`, listen on a reachable address anyway and let every peer
  // act as a client and a worker.
  bool insecure = false;
  // Listen on no address: only this process reaches it, through
  // InProcessChannel (the embedded default), trusted as a local peer.
  bool in_process = false;
  // Holds the CAS (cas/) and the result cache (results/); created if missing.
  std::string state_dir;
  // The most the content store may hold (least recently used blobs that no
  // running build needs are evicted beyond it); 0: no limit.
  int64_t cas_max_bytes = 0;
  SchedulerOptions scheduler;
  // What a unit never measured, with no similar unit, is predicted to cost.
  PredictionDefaults prediction;
  // What one build may ask for (units, grid points, arguments, inputs).
  BuildLimits limits;
  // The largest blob the content store takes (--max-blob-size).
  int64_t max_blob_bytes = int64_t{4} << 30;
  // HOST:PORT to serve the Remote Execution API on (Bazel's
  // --remote_executor; reapi_execution_service.h), with the same
  // credentials and roles as `listen_address`; "": not served.
  std::string reapi_listen;
  // HOST:PORT to serve Prometheus metrics on (/metrics); "": none.
  std::string metrics_listen;
  // HOST:PORT to serve the live dashboard on (/, /api/status,
  // /api/build); "": none.
  std::string http_listen;
  // Serve metrics and the dashboard on an address other than loopback:
  // they need no credentials to read (worker and unit names, the queue,
  // store figures).
  bool http_reachable = false;
};

class BuildService;
class CasService;
class ReapiMetrics;
class WorkerService;
class ResultCache;

class Coordinator {
 public:
  // Opens the state dir and starts serving. INVALID_ARGUMENT, before
  // anything else, for an address off loopback without TLS or insecure, or a
  // TLS certificate whose role is not coordinator; UNAVAILABLE if the address
  // cannot be bound (also when another process listens there);
  // FAILED_PRECONDITION, naming its pid, when another coordinator holds the
  // state dir; PERMISSION_DENIED if the state dir cannot be written.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(const CoordinatorOptions& options);
  // Stops serving: in-flight calls are cancelled.
  ~Coordinator();

  int port() const { return port_; }
  // The port the Remote Execution API is served on; 0 if it is not.
  int reapi_port() const { return reapi_port_; }
  // "127.0.0.1:PORT", where clients and workers reach it; for one started
  // `in_process`, a description for messages.
  std::string address() const;
  // A channel to it within this process: no socket, no TLS, no handshake.
  std::shared_ptr<grpc::Channel> InProcessChannel() const;
  // Where /metrics is served ("http://127.0.0.1:PORT"); "" if nowhere.
  std::string metrics_url() const;
  // Where the dashboard is served; "" if nowhere.
  std::string dashboard_url() const;

 private:
  Coordinator() = default;

  // Start's last steps: the metrics endpoint and the dashboard, where
  // options_ asks for them (registry: the coordinator's metrics); the log
  // line that says how it serves, with a warning when that is insecure.
  absl::Status StartHttpServers(std::shared_ptr<prometheus::Registry> registry);
  // Serves the Remote Execution API where options_ asks for it, counting
  // into `registry`.
  absl::Status StartReapiServer(prometheus::Registry& registry);
  void SayHowItServes(AccessControl::Mode mode, const std::string& state) const;

  // Revokes the worker identity `name` for `reason` and acts on it.
  void Revoke(const std::string& name, const std::string& reason);
  // Drops the workers of a newly revoked identity now and, on the
  // housekeeping thread, every cached result it produced.
  void ActOnRevocation(const std::string& name);
  // Reads the revocation file again (distcc-cuda-coordinator revoke may have
  // changed it) and acts on the names it newly revokes.
  void ReloadRevocations();

  CoordinatorOptions options_;
  // Held for the coordinator's life; destroyed last.
  std::unique_ptr<FolderLock> state_lock_;
  std::unique_ptr<CasStore> cas_;
  // The blobs of the toolkits it serves (served_toolkits.h), never evicted.
  std::unique_ptr<CasPin> toolkit_pin_;
  std::unique_ptr<WorkerRevocations> revocations_;
  std::unique_ptr<ResultCache> results_;
  std::unique_ptr<PeakHistory> history_;
  std::unique_ptr<UnitSizeChoices> unit_sizes_;
  std::unique_ptr<BuildScheduler> scheduler_;
  // Drops revoked workers' results; stopped before the scheduler and cache.
  std::unique_ptr<BoundedExecutor> housekeeping_;
  // With --cross-check-rate: destroyed after the server stopped, before the
  // scheduler it submits to.
  std::unique_ptr<CrossChecker> cross_checker_;
  std::string last_revocation_error_;  // the ticker's, logged once
  // Noted by the build service, released by the ticker.
  MemoryRelease memory_release_;
  std::unique_ptr<BoundedExecutor> planner_;
  // Takes the workers' reports (WorkerService), off the reactor threads.
  std::unique_ptr<BoundedExecutor> reports_;
  // Reads, writes, hashes and syncs the store's blobs for CasService, off
  // the reactor threads; shut down after the server, whose calls use it.
  std::unique_ptr<BoundedExecutor> cas_io_;
  std::unique_ptr<AccessControl> access_;
  std::unique_ptr<CasService> cas_service_;
  std::unique_ptr<BuildService> build_service_;
  std::unique_ptr<WorkerService> worker_service_;
  std::unique_ptr<grpc::Server> server_;
  // The Remote Execution API, on its own address (options_.reapi_listen).
  // Outlives the services and the builds' events that count into it.
  std::unique_ptr<ReapiMetrics> reapi_metrics_;
  std::vector<std::unique_ptr<grpc::Service>> reapi_services_;
  std::unique_ptr<grpc::Server> reapi_server_;
  int reapi_port_ = 0;
  // Reads the scheduler and the store: stopped first.
  std::unique_ptr<HttpServer> metrics_server_;
  std::unique_ptr<HttpServer> dashboard_server_;
  int port_ = 0;
  absl::Notification stop_;
  std::thread ticker_;
  // Offers the units an arrival grace held back when it ends
  // (SchedulerOptions::arrival_grace); none without a grace.
  std::thread grace_timer_;
};

}  // namespace distcc_cuda::coordinator
