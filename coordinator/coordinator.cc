// SPDX-License-Identifier: Apache-2.0
#include "coordinator/coordinator.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/store/cas_client.h"
#include "common/store/cas_store.h"
#include "common/transport/metrics.h"
#include "coordinator/dashboard/dashboard.h"
#include "coordinator/planning/result_cache.h"
#include "coordinator/reapi/reapi_cas_service.h"
#include "coordinator/reapi/reapi_execution_service.h"
#include "coordinator/scheduler/scheduler_metrics.h"
#include "coordinator/services/build_service.h"
#include "coordinator/services/cas_service.h"
#include "coordinator/services/worker_service.h"
#include "coordinator/toolkits/served_toolkits.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::coordinator {

namespace {

// How peers are trusted, decided before anything is opened: certificates,
// else loopback only, else --insecure.
absl::StatusOr<AccessControl::Mode> AccessMode(const CoordinatorOptions& options) {
  if (options.tls) {
    if (options.tls->identity.role != PeerRole::kCoordinator) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the coordinator's certificate is a ", RoleName(options.tls->identity.role),
          " certificate (", options.tls->identity.name,
          "); it needs a coordinator certificate: distcc-cuda-coordinator certs issue --dir DIR "
          "--role coordinator --host HOST NAME"));
    }
    return AccessControl::Mode::kMutualTls;
  }
  // Nothing outside this process reaches an in-process coordinator.
  if (options.in_process || IsLoopbackAddress(options.listen_address)) {
    return AccessControl::Mode::kLocalTrust;
  }
  if (options.insecure) return AccessControl::Mode::kInsecure;
  return absl::InvalidArgumentError(absl::StrCat(
      "refusing to listen on ", options.listen_address,
      " without TLS: anyone who can reach it could submit builds, read sources and register "
      "workers. Make the cluster's certificates (distcc-cuda-coordinator certs init --dir DIR; "
      "distcc-cuda-coordinator certs issue --dir DIR --role coordinator --host HOST NAME) and "
      "pass --tls-ca, --tls-cert and --tls-key; or listen on 127.0.0.1 only; or pass --insecure "
      "on a network where you trust everyone"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& options) {
  if (options.state_dir.empty()) {
    return absl::InvalidArgumentError("the coordinator needs --state-dir DIR");
  }
  ASSIGN_OR_RETURN(AccessControl::Mode mode, AccessMode(options));
  std::unique_ptr<Coordinator> coordinator(new Coordinator());
  coordinator->options_ = options;
  std::string state = AbsolutePath(options.state_dir);
  // One coordinator per state dir: two would corrupt each other's store,
  // cache and history.
  ASSIGN_OR_RETURN(FolderLock lock, FolderLock::Acquire(state, "another distcc-cuda-coordinator"));
  coordinator->state_lock_ = std::make_unique<FolderLock>(std::move(lock));
  ASSIGN_OR_RETURN(coordinator->cas_, CasStore::Open(state + "/cas", options.cas_max_bytes));
  RETURN_IF_ERROR(MakeDirectories(state + "/results"));
  ASSIGN_OR_RETURN(coordinator->revocations_, WorkerRevocations::Open(RevocationsPathIn(state)));
  coordinator->access_ = std::make_unique<AccessControl>(mode, coordinator->revocations_.get());
  coordinator->results_ = std::make_unique<ResultCache>(state + "/results", coordinator->cas_.get(),
                                                        coordinator->revocations_.get());
  ResultCache* results = coordinator->results_.get();
  // Measured peaks and times, kept across restarts.
  ASSIGN_OR_RETURN(coordinator->history_,
                   PeakHistory::Open(state + "/history.tsv", options.prediction));
  ASSIGN_OR_RETURN(coordinator->unit_sizes_, UnitSizeChoices::Open(state + "/unit_sizes.tsv"));
  auto registry = std::make_shared<prometheus::Registry>();
  coordinator->scheduler_ = std::make_unique<BuildScheduler>(
      options.scheduler,
      [results](const std::string& action, const v1::TaskResult& result) {
        results->Record(action, result);
      },
      coordinator->history_.get(),
      [results](const std::string& action) { return results->Lookup(action); },
      std::make_shared<SchedulerMetrics>(registry));
  coordinator->scheduler_->ShowRevocations(coordinator->revocations_.get());
  coordinator->housekeeping_ = std::make_unique<BoundedExecutor>(1, 64);
  Coordinator* self = coordinator.get();
  if (options.scheduler.cross_check_rate > 0) {
    coordinator->cross_checker_ = std::make_unique<CrossChecker>(
        CrossChecker::Hooks{coordinator->scheduler_.get(), coordinator->cas_.get(),
                            [self](const std::string& peer, const std::string& reason) {
                              self->Revoke(peer, reason);
                            },
                            [results](const std::string& action) { results->Forget(action); }},
        *registry);
    CrossChecker* checker = coordinator->cross_checker_.get();
    coordinator->scheduler_->SetCrossCheck(
        [checker](CrossCheckCandidate candidate) { checker->Check(std::move(candidate)); });
  }
  const AccessControl* access = coordinator->access_.get();
  // The store's disk work, off the reactors' threads (CasService).
  coordinator->cas_io_ = std::make_unique<BoundedExecutor>(4, 4096);
  coordinator->cas_service_ = std::make_unique<CasService>(
      access, coordinator->cas_.get(), options.max_blob_bytes, coordinator->cas_io_.get());
  coordinator->cas_service_->ServeToolkits(
      LoadServedToolkits(state, *coordinator->cas_, &coordinator->toolkit_pin_));
  // Two planners: planning a build hashes and stores its generated units.
  coordinator->planner_ = std::make_unique<BoundedExecutor>(2, 64);
  coordinator->build_service_ = std::make_unique<BuildService>(
      access, coordinator->cas_.get(), results, coordinator->history_.get(),
      coordinator->unit_sizes_.get(), coordinator->scheduler_.get(), coordinator->planner_.get(),
      options.limits, &coordinator->memory_release_);
  // Reports are taken off the reactor threads (a result's record is synced
  // to disk); two at once, as the scheduler's lock lets them.
  coordinator->reports_ = std::make_unique<BoundedExecutor>(2, 4096);
  coordinator->worker_service_ = std::make_unique<WorkerService>(
      access, coordinator->scheduler_.get(), coordinator->cas_.get(),
      options.scheduler.heartbeat_interval, WorkerMessageLimits{}, coordinator->reports_.get());

  grpc::ServerBuilder builder;
  // A port in use is an error, not shared with the coordinator already
  // there (gRPC sets SO_REUSEPORT by default on Linux).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (!options.in_process) {
    builder.AddListeningPort(
        options.listen_address,
        options.tls ? ServerCredentials(*options.tls) : grpc::InsecureServerCredentials(),
        &coordinator->port_);
  }
  builder.RegisterService(coordinator->cas_service_.get());
  builder.RegisterService(coordinator->build_service_.get());
  builder.RegisterService(coordinator->worker_service_.get());
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  coordinator->server_ = builder.BuildAndStart();
  if (coordinator->server_ == nullptr || (coordinator->port_ == 0 && !options.in_process)) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address,
                     " (address in use or not local?); choose another --listen address"));
  }
  RETURN_IF_ERROR(coordinator->StartReapiServer(*registry));
  RETURN_IF_ERROR(coordinator->StartHttpServers(registry));
  coordinator->ticker_ = std::thread([self] {
    while (!self->stop_.WaitForNotificationWithTimeout(absl::Milliseconds(200))) {
      self->scheduler_->Tick(absl::Now());
      self->ReloadRevocations();
      self->memory_release_.ReleaseIfDue(absl::Now());
    }
  });
  if (options.scheduler.arrival_grace > absl::ZeroDuration()) {
    coordinator->grace_timer_ = std::thread([self] {
      while (!self->stop_.HasBeenNotified()) {
        self->scheduler_->OfferAfterGrace(absl::Milliseconds(200));
      }
    });
  }
  coordinator->SayHowItServes(mode, state);
  return coordinator;
}

absl::Status Coordinator::StartReapiServer(prometheus::Registry& registry) {
  if (options_.reapi_listen.empty()) return absl::OkStatus();
  if (!options_.tls && !options_.insecure && !IsLoopbackAddress(options_.reapi_listen)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refusing to serve the Remote Execution API on ", options_.reapi_listen,
        " without TLS: anyone who can reach it could run compiles and read sources. Pass "
        "--tls-ca, --tls-cert and --tls-key (REAPI clients then need a client certificate: Bazel's "
        "--tls_certificate, --tls_client_certificate, --tls_client_key), or serve it on "
        "127.0.0.1"));
  }
  Planning planning{cas_.get(),       results_.get(),  history_.get(), unit_sizes_.get(),
                    scheduler_.get(), options_.limits, nullptr};
  const AccessControl* access = access_.get();
  reapi_metrics_ = std::make_unique<ReapiMetrics>(registry);
  reapi_services_.push_back(std::make_unique<ReapiCapabilities>(access));
  reapi_services_.push_back(
      std::make_unique<ReapiContentStore>(access, cas_service_.get(), &memory_release_));
  reapi_services_.push_back(std::make_unique<ReapiByteStream>(access, cas_service_.get()));
  reapi_services_.push_back(
      std::make_unique<ReapiActionCache>(access, planning, cas_io_.get(), reapi_metrics_.get()));
  reapi_services_.push_back(std::make_unique<ReapiExecution>(access, planning, planner_.get(),
                                                             cas_io_.get(), reapi_metrics_.get()));
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(
      options_.reapi_listen,
      options_.tls ? ServerCredentials(*options_.tls) : grpc::InsecureServerCredentials(),
      &reapi_port_);
  for (const auto& service : reapi_services_) builder.RegisterService(service.get());
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  reapi_server_ = builder.BuildAndStart();
  if (reapi_server_ == nullptr || reapi_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve the Remote Execution API on ", options_.reapi_listen,
                     " (address in use or not local?); choose another --reapi-listen address"));
  }
  spdlog::info("serving the Remote Execution API on port {}", reapi_port_);
  return absl::OkStatus();
}

absl::Status Coordinator::StartHttpServers(std::shared_ptr<prometheus::Registry> registry) {
  if (!options_.metrics_listen.empty()) {
    ASSIGN_OR_RETURN(
        metrics_server_,
        ServeMetrics(options_.metrics_listen, options_.http_reachable, registry,
                     {[this] { return ClusterMetrics(scheduler_->Status(absl::Now())); },
                      [this] { return StoreMetrics(*cas_); }}));
    spdlog::info("coordinator metrics at {}/metrics", metrics_server_->url());
  }
  if (!options_.http_listen.empty()) {
    HttpServerOptions http;
    http.listen_address = options_.http_listen;
    http.reachable = options_.http_reachable;
    http.purpose = "dashboard";
    http.routes = DashboardRoutes(scheduler_.get());
    ASSIGN_OR_RETURN(dashboard_server_, HttpServer::Start(std::move(http)));
    spdlog::info("coordinator dashboard at {}/", dashboard_server_->url());
  }
  return absl::OkStatus();
}

void Coordinator::SayHowItServes(AccessControl::Mode mode, const std::string& state) const {
  spdlog::info("coordinator serves {} (state in {}; {})", address(), state,
               mode == AccessControl::Mode::kMutualTls    ? "mutual TLS"
               : options_.in_process                      ? "this process only"
               : mode == AccessControl::Mode::kLocalTrust ? "no TLS, loopback only"
                                                          : "INSECURE");
  if (mode == AccessControl::Mode::kInsecure) {
    std::string bound = absl::StrCat(
        options_.listen_address.substr(0, options_.listen_address.rfind(':')), ":", port_);
    spdlog::warn(
        "INSECURE: no TLS on {}: anyone who can reach {} can submit builds, read sources and "
        "register workers, and no worker's result enters the result cache (none is "
        "authenticated). Make certificates (distcc-cuda-coordinator certs init/issue) and "
        "pass --tls-ca, --tls-cert and --tls-key instead of --insecure",
        bound, bound);
  }
}

void Coordinator::Revoke(const std::string& name, const std::string& reason) {
  absl::StatusOr<bool> added = revocations_->Revoke(name, reason, absl::Now());
  if (!added.ok()) {
    spdlog::error("cannot revoke worker {}: {}", name, added.status().ToString());
    return;
  }
  if (*added) ActOnRevocation(name);
}

void Coordinator::ActOnRevocation(const std::string& name) {
  std::optional<Revocation> revoked = revocations_->Find(name);
  std::string reason = revoked ? revoked->reason : "revoked";
  int workers = scheduler_->DropWorkersOf(name, absl::StrCat("was revoked: ", reason), absl::Now());
  ResultCache* results = results_.get();
  bool queued = housekeeping_->Submit([results, name, workers] {
    int dropped = results->ForgetProducedBy(name);
    spdlog::warn(
        "worker identity {} revoked: {} of its workers dropped, {} cached results it produced "
        "dropped",
        name, workers, dropped);
  });
  if (!queued) {
    spdlog::warn("worker identity {} revoked; its cached results are refused as they are read",
                 name);
  }
}

void Coordinator::ReloadRevocations() {
  absl::StatusOr<std::vector<std::string>> added = revocations_->Reload();
  if (!added.ok()) {
    // Keeps the revocations it had: a file being fixed by hand revokes
    // nobody less.
    if (std::string error = added.status().ToString(); error != last_revocation_error_) {
      spdlog::error("cannot read the revoked workers: {}", error);
      last_revocation_error_ = error;
    }
    return;
  }
  last_revocation_error_.clear();
  for (const std::string& name : *added) ActOnRevocation(name);
}

std::string Coordinator::address() const {
  if (options_.in_process) return "this process (embedded)";
  std::string host = options_.listen_address.substr(0, options_.listen_address.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  return absl::StrCat(host, ":", port_);
}

std::shared_ptr<grpc::Channel> Coordinator::InProcessChannel() const {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(kMaxMessageBytes);
  return server_->InProcessChannel(arguments);
}

std::string Coordinator::metrics_url() const {
  return metrics_server_ != nullptr ? metrics_server_->url() : "";
}

std::string Coordinator::dashboard_url() const {
  return dashboard_server_ != nullptr ? dashboard_server_->url() : "";
}

Coordinator::~Coordinator() {
  dashboard_server_.reset();
  metrics_server_.reset();
  stop_.Notify();
  // Builds still being planned finish their calls before the server stops.
  if (planner_) planner_->Shutdown();
  // So do the reports being taken; one that comes later is taken on its
  // gRPC thread.
  if (reports_) reports_->Shutdown();
  if (ticker_.joinable()) ticker_.join();
  if (grace_timer_.joinable()) grace_timer_.join();
  if (reapi_server_) {
    reapi_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (cas_io_) cas_io_->Shutdown();
  cross_checker_.reset();
  if (housekeeping_) housekeeping_->Shutdown();
}

}  // namespace distcc_cuda::coordinator
