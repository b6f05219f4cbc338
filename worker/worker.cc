// SPDX-License-Identifier: Apache-2.0
#include "worker/worker.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/nvcc/nvcc_args.h"
#include "common/nvcc/toolchain.h"
#include "common/process/confined_run.h"
#include "common/process/subprocess.h"
#include "common/process/task_tree.h"
#include "common/store/digest.h"
#include "common/store/input_tree.h"
#include "common/transport/metrics.h"
#include "common/transport/tls_credentials.h"
#include "spdlog/spdlog.h"
#include "worker/task_result.h"

namespace distcc_cuda::worker {
namespace fs = std::filesystem;
namespace {

constexpr absl::Duration kLeaseWait = absl::Seconds(5);

std::chrono::system_clock::time_point DeadlineIn(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Worker>> Worker::Start(const WorkerOptions& options) {
  LogFields fields{{"worker", options.name}};
  if (options.slots <= 0) {
    return absl::InvalidArgumentError("--slots must be at least 1");
  }
  if (options.work_dir.empty()) {
    return absl::InvalidArgumentError("the worker needs a work dir");
  }
  if (!options.bots_api.empty() && options.remote_executor.has_value()) {
    return absl::InvalidArgumentError(
        "a worker is either another engine's bot or its client, not both");
  }
  std::unique_ptr<Worker> worker(new Worker());
  worker->options_ = options;
  // Two workers on one work dir would share a store and remove each other's
  // task folders.
  ASSIGN_OR_RETURN(FolderLock lock, FolderLock::Acquire(AbsolutePath(options.work_dir),
                                                        "another distcc-cuda-worker"));
  worker->work_dir_lock_ = std::make_unique<FolderLock>(std::move(lock));
  worker->toolkit_root_ = ToolkitRootOf(options.nvcc_path);
  worker->tasks_dir_ = options.work_dir + "/tasks";
  // The cap and the sandbox before any program of a toolkit runs: one the
  // coordinator served runs in them even to be fingerprinted.
  MemoryCapOptions cap;
  cap.cap_bytes = options.memory_cap_bytes;
  cap.name = options.name;
  cap.force_watchdog = options.force_watchdog;
  if (!options.remote_executor.has_value()) {
    ASSIGN_OR_RETURN(worker->memory_cap_, NodeMemoryCap::Create(cap));
  }
  RETURN_IF_ERROR(worker->PrepareIsolation());
  RETURN_IF_ERROR(worker->FingerprintToolkits());
  ASSIGN_OR_RETURN(worker->cache_,
                   CasStore::Open(options.work_dir + "/cas", options.cas_max_bytes));
  RETURN_IF_ERROR(MakeDirectories(worker->tasks_dir_));
  // Task folders a previous run of this worker left (it was killed, or the
  // machine went down): nothing runs in them any more.
  int leftover = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(worker->tasks_dir_, error)) {
    if (!absl::StartsWith(entry.path().filename().string(), "task-")) continue;
    leftover += RemoveAll(entry.path().string()).ok() ? 1 : 0;
  }
  if (leftover > 0) {
    spdlog::info("worker {}: removed {} task folders a previous run left in {}", options.name,
                 leftover, worker->tasks_dir_);
  }
  if (options.bots_api.empty()) {
    worker->channel_ =
        options.channel ? options.channel : OpenChannel(options.coordinator_address, options.tls);
    worker->stub_ = v1::WorkerService::NewStub(worker->channel_);
    worker->cas_client_ = std::make_unique<CasClient>(v1::ContentStore::NewStub(worker->channel_));
    if (options.remote_executor.has_value()) worker->StartEngine();
  }
  auto registry = std::make_shared<prometheus::Registry>();
  worker->metrics_ = std::make_unique<WorkerMetrics>(registry);
  // A bot's session starts before /metrics reads it.
  if (!options.bots_api.empty()) RETURN_IF_ERROR(worker->StartBot());
  if (!options.metrics_listen.empty()) {
    const Worker* reader = worker.get();
    ASSIGN_OR_RETURN(worker->metrics_server_,
                     ServeMetrics(options.metrics_listen, options.http_reachable, registry,
                                  {[reader] { return WorkerGaugeMetrics(reader->Gauges()); },
                                   [reader] { return StoreMetrics(*reader->cache_); }}));
    spdlog::info("worker {} metrics at {}/metrics", options.name, worker->metrics_server_->url());
  }
  if (!options.bots_api.empty()) return worker;
  // The heartbeat thread registers (and registers again whenever the
  // coordinator forgets this worker); the slots lease once it has.
  Worker* self = worker.get();
  worker->threads_.emplace_back([self] { self->HeartbeatLoop(); });
  for (int slot = 0; slot < options.slots; ++slot) {
    worker->threads_.emplace_back([self, slot] { self->SlotLoop(slot); });
  }
  if (options.connect_timeout > absl::ZeroDuration()) {
    absl::MutexLock lock(&worker->mu_);
    if (!worker->mu_.AwaitWithTimeout(absl::Condition(self, &Worker::RegisteredOrRefused),
                                      options.connect_timeout)) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach the coordinator at ", options.coordinator_address, " within ",
                       absl::FormatDuration(options.connect_timeout),
                       "; is distcc-cuda-coordinator running there?",
                       options.tls ? " (a TLS handshake that fails looks the "
                                     "same: check that its certificate names "
                                     "that address and comes from --tls-ca)"
                                   : " (one that requires certificates looks "
                                     "the same: pass --tls-ca, --tls-cert and "
                                     "--tls-key)"));
    }
    if (!worker->refused_.ok()) return worker->refused_;
  }
  return worker;
}

absl::Status Worker::PrepareIsolation() {
  if (options_.remote_executor.has_value()) {
    // Nothing compiles here: the engine's workers sandbox and cap.
  } else if (options_.sandbox) {
    SandboxOptions sandbox = options_.sandbox_options;
    sandbox.toolkit_root = toolkit_root_;
    for (const FurtherToolkit& more : options_.more_toolkits) {
      sandbox.more_toolkit_roots.push_back(ToolkitRootOf(more.nvcc_path));
    }
    // The sandbox user must reach the task folders; a work dir under a
    // private home folder (root's ~/.cache) is not reachable, so its tasks
    // go to a folder of their own under /var/tmp.
    std::string fallback =
        absl::StrCat("/var/tmp/distcc-cuda-sandbox/",
                     DigestOf(AbsolutePath(options_.work_dir)).hash.substr(0, 16));
    // Its proof that nvcc runs inside runs under the cap, as compiles do.
    absl::StatusOr<std::unique_ptr<Sandbox>> made =
        Sandbox::Create(sandbox, options_.nvcc_path, {tasks_dir_, fallback},
                        ConfinedRunner(nullptr, memory_cap_.get(), toolkit_root_));
    if (!made.ok()) {
      return Annotate(made.status(),
                      absl::StrCat("worker ", options_.name, " cannot sandbox compiles"));
    }
    sandbox_ = *std::move(made);
    tasks_dir_ = sandbox_->task_root();
  } else {
    spdlog::warn(
        "INSECURE: worker {} runs every compile WITHOUT a sandbox (--insecure-no-sandbox): "
        "nvcc runs as this worker's user with its files and network; run only builds you "
        "trust",
        options_.name);
    if (options_.stable_compile_path) {
      absl::Status mounts = MountNamespacesWork(kUnitRoot);
      if (mounts.ok()) {
        unit_root_ = kUnitRoot;
      } else {
        spdlog::info(
            "worker {}: units compile at their task folders' paths (no mount namespace: {})",
            options_.name, std::string(mounts.message()));
      }
    }
  }
  return absl::OkStatus();
}

std::string Worker::metrics_url() const {
  return metrics_server_ != nullptr ? metrics_server_->url() : "";
}

WorkerGauges Worker::Gauges() const {
  WorkerGauges gauges;
  if (bot_ != nullptr) {
    gauges.registered = !bot_->name().empty();
    gauges.busy = bot_->running();
  } else {
    absl::MutexLock lock(&mu_);
    gauges.registered = !worker_id_.empty();
    gauges.busy = running_.size();
  }
  gauges.slots = options_.slots;
  gauges.memory_cap_bytes = options_.memory_cap_bytes;
  if (memory_cap_ != nullptr) {
    gauges.memory_cap_bytes = memory_cap_->cap_bytes();
    gauges.memory_used_bytes = memory_cap_->CurrentBytes();
    gauges.memory_peak_bytes = memory_cap_->PeakBytes();
  }
  return gauges;
}

Worker::~Worker() {
  LogFields fields{{"worker", options_.name}};
  metrics_server_.reset();
  stop_.Notify();
  // A bot's running leases end and are reported to its engine as
  // UNAVAILABLE, so that the engine gives them to another bot.
  if (bot_ != nullptr) {
    bot_->Stop();
    cas_client_->CancelAll();
    bot_.reset();
  }
  std::string id;
  int killed = 0;
  {
    absl::MutexLock lock(&mu_);
    for (grpc::ClientContext* context : waiting_) context->TryCancel();
    for (auto& [task_id, cancel] : running_) {
      if (!cancel->cancelled()) ++killed;
      cancel->Cancel("the worker is stopping");
    }
    id = worker_id_;
  }
  // Uploads and downloads in flight end now: a dead link must not hold up
  // the stop.
  if (cas_client_ != nullptr) cas_client_->CancelAll();
  if (engine_store_ != nullptr) engine_store_->CancelAll();
  if (killed > 0) spdlog::info("worker {}: stopping {} running units", options_.name, killed);
  // The coordinator re-queues this worker's units now, not after its
  // heartbeat timeout.
  if (!id.empty() && stub_ != nullptr) {
    v1::DeregisterWorkerRequest request;
    request.set_worker_id(id);
    v1::DeregisterWorkerResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(absl::Seconds(2)));
    grpc::Status status = stub_->DeregisterWorker(&context, request, &response);
    if (!status.ok()) {
      spdlog::warn("worker {}: could not deregister from {}: {}", options_.name,
                   options_.coordinator_address, status.error_message());
    }
  }
  for (std::thread& thread : threads_) thread.join();
  // A stopped worker is not healthy (deploy/healthcheck.sh).
  std::error_code ignored;
  std::filesystem::remove(options_.work_dir + "/health", ignored);
  // Task folders outside the work dir (see Start) go with the worker.
  if (!tasks_dir_.empty() && tasks_dir_ != options_.work_dir + "/tasks" &&
      !options_.keep_sandboxes) {
    RemoveAll(tasks_dir_).IgnoreError();
  }
  // For benchmarks and people: how close the node came to its cap. (A
  // worker whose start failed early has no cap in force.)
  if (memory_cap_ != nullptr) {
    spdlog::info("worker {}: node peak {} of cap {}", options_.name, memory_cap_->PeakBytes(),
                 memory_cap_->cap_bytes());
  }
}

Worker::StoppableCall::StoppableCall(Worker* worker, grpc::ClientContext& context)
    : worker_(worker), context_(&context) {
  absl::MutexLock lock(&worker_->mu_);
  // A stop that came first ends the call at once.
  if (worker_->stop_.HasBeenNotified()) context_->TryCancel();
  worker_->waiting_.insert(context_);
}

Worker::StoppableCall::~StoppableCall() {
  absl::MutexLock lock(&worker_->mu_);
  worker_->waiting_.erase(context_);
}

absl::Status Worker::Register() {
  v1::RegisterWorkerRequest request;
  request.set_name(options_.name);
  *request.mutable_toolchain() = toolchain();
  request.set_memory_cap_bytes(options_.memory_cap_bytes);
  request.set_slots(options_.slots);
  request.set_memory_mechanism(memory_mechanism());
  request.set_sandbox(sandbox_description());
  request.set_reads_input_trees(true);
  request.set_toolkit_source(options_.toolkit_source);
  request.set_engine_client(options_.remote_executor.has_value());
  for (const FurtherToolkitState& more : more_toolkits_) {
    *request.add_more_toolchains() = more.toolchain;
  }
  v1::RegisterWorkerResponse response;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(absl::Seconds(10)));
  grpc::Status status;
  {
    StoppableCall call(this, context);
    status = stub_->RegisterWorker(&context, request, &response);
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Annotate(FromGrpcStatus(status),
                           absl::StrCat("registering with ", options_.coordinator_address)));
  worker_id_ = response.worker_id();
  registered_toolchain_ = request.toolchain().digest();
  return absl::OkStatus();
}

bool Worker::RegisterUntilStopped() {
  for (int attempt = 1; !stop_.HasBeenNotified(); ++attempt) {
    absl::Status registered = Register();
    if (registered.ok()) {
      spdlog::info("worker {} registered with {}{}: {} slots, {}; {}; {}", options_.name,
                   options_.coordinator_address,
                   attempt > 1 ? absl::StrCat(" (attempt ", attempt, ")") : "", options_.slots,
                   memory_mechanism(), DescribeToolchain(toolchain()), sandbox_description());
      return true;
    }
    if (stop_.HasBeenNotified()) break;
    if (!absl::IsUnavailable(registered) && !absl::IsDeadlineExceeded(registered)) {
      // Refused, not unreachable: trying again changes nothing.
      spdlog::error("worker {}: {}; not trying again", options_.name, registered.ToString());
      absl::MutexLock lock(&mu_);
      refused_ = registered;
      return false;
    }
    absl::Duration wait = absl::Seconds(1 << std::min(attempt - 1, 5));
    spdlog::warn("worker {}: attempt {} to register failed: {}; trying again in {}", options_.name,
                 attempt, std::string(registered.message()), absl::FormatDuration(wait));
    if (stop_.WaitForNotificationWithTimeout(wait)) break;
  }
  return false;
}

v1::ToolchainFingerprint Worker::toolchain() const {
  absl::MutexLock lock(&toolchain_mu_);
  return toolchain_;
}

void Worker::RefreshToolchainIfChanged() {
  std::string files = ToolchainFilesSignature(options_.nvcc_path, toolkit_programs_);
  {
    absl::MutexLock lock(&toolchain_mu_);
    if (files == toolchain_files_) return;
    // Claimed: a caller arriving meanwhile keeps the toolchain it has.
    toolchain_files_ = files;
  }
  // Outside the lock that leases and reports read the toolchain under: a
  // fetched toolkit's nvcc runs in a sandbox (a second or so).
  absl::StatusOr<v1::ToolchainFingerprint> fresh = ComputeToolchainFingerprint(
      options_.nvcc_path, kHostCompiler, options_.work_dir, toolkit_programs_);
  absl::MutexLock lock(&toolchain_mu_);
  if (!fresh.ok()) {
    spdlog::error("worker {}: the toolchain at {} changed and cannot be fingerprinted: {}",
                  options_.name, options_.nvcc_path, fresh.status().ToString());
    toolchain_.set_digest("unusable toolchain: " + std::string(fresh.status().message()));
    // Caught mid-upgrade, perhaps: look again at the next heartbeat.
    toolchain_files_.clear();
    return;
  }
  if (fresh->digest() == toolchain_.digest()) return;
  spdlog::error(
      "worker {}: the toolchain at {} changed under this worker, from {} to {}; results now "
      "carry the new fingerprint and the worker registers again with it",
      options_.name, options_.nvcc_path, DescribeToolchain(toolchain_), DescribeToolchain(*fresh));
  toolchain_ = *fresh;
}

absl::Status Worker::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

std::string Worker::worker_id() const {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

void Worker::HeartbeatLoop() {
  LogFields fields{{"worker", options_.name}};
  if (!RegisterUntilStopped()) return;
  int failures = 0;
  while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(1))) {
    // A toolkit upgraded (or broken) under an idle worker: the coordinator
    // must know it by what it has now, not only after its next unit.
    RefreshToolchainIfChanged();
    const std::string digest = toolchain().digest();
    std::string stale_id;
    {
      absl::MutexLock lock(&mu_);
      if (!worker_id_.empty() && digest != registered_toolchain_) {
        stale_id = worker_id_;
        worker_id_.clear();
      }
    }
    if (!stale_id.empty()) {
      spdlog::warn("worker {}: its toolchain is now {}; registering again with it", options_.name,
                   DescribeToolchain(toolchain()));
      v1::DeregisterWorkerRequest gone;
      gone.set_worker_id(stale_id);
      gone.set_toolchain_changed(true);
      v1::DeregisterWorkerResponse answer;
      grpc::ClientContext context;
      context.set_deadline(DeadlineIn(absl::Seconds(2)));
      {
        StoppableCall call(this, context);
        stub_->DeregisterWorker(&context, gone, &answer);
      }
      if (!RegisterUntilStopped()) return;
      failures = 0;
      continue;
    }
    v1::HeartbeatRequest request;
    {
      absl::MutexLock lock(&mu_);
      request.set_worker_id(worker_id_);
      for (const auto& [id, cancel] : running_) request.add_running_task_ids(id);
    }
    request.set_memory_used_bytes(memory_cap_ != nullptr ? memory_cap_->CurrentBytes() : 0);
    v1::HeartbeatResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(absl::Seconds(5)));
    grpc::Status status;
    {
      StoppableCall call(this, context);
      status = stub_->Heartbeat(&context, request, &response);
    }
    if (stop_.HasBeenNotified()) return;
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      // The coordinator dropped us (restart, or we were silent too long).
      spdlog::warn("worker {}: the coordinator forgot this worker; registering again",
                   options_.name);
      {
        absl::MutexLock lock(&mu_);
        worker_id_.clear();
      }
      if (!RegisterUntilStopped()) return;
      failures = 0;
    } else if (!status.ok()) {
      // Every failure is logged: the first few each second, then one in ten.
      if (++failures <= 5 || failures % 10 == 0) {
        spdlog::warn("worker {}: heartbeat {} to {} failed: {}; still trying", options_.name,
                     failures, options_.coordinator_address, status.error_message());
      }
    } else {
      if (failures > 0) {
        spdlog::info("worker {}: the coordinator answers again after {} failed heartbeats",
                     options_.name, failures);
      }
      failures = 0;
      // Kill what the coordinator cancelled (its build's client went away).
      std::vector<std::shared_ptr<CancelToken>> cancelled;
      {
        absl::MutexLock lock(&mu_);
        for (const std::string& id : response.cancel_task_ids()) {
          auto found = running_.find(id);
          if (found != running_.end()) cancelled.push_back(found->second);
        }
      }
      for (const auto& cancel : cancelled) cancel->Cancel("its build was cancelled");
      // What deploy/healthcheck.sh reads: the coordinator took a heartbeat
      // this recently. (A health check that asked the coordinator would need
      // a client certificate on every worker.)
      WriteFileAtomically(
          options_.work_dir + "/health",
          absl::StrCat("worker ", options_.name, " heartbeat accepted by ",
                       options_.coordinator_address, " at ", absl::FormatTime(absl::Now()), "\n"))
          .IgnoreError();
    }
  }
}

void Worker::SlotLoop(int slot) {
  LogFields worker_field{{"worker", options_.name}};
  while (!stop_.HasBeenNotified()) {
    if (worker_id().empty()) {
      // Not registered (yet, or again): the heartbeat thread is at it.
      stop_.WaitForNotificationWithTimeout(absl::Milliseconds(200));
      continue;
    }
    v1::LeaseTaskRequest request;
    request.set_worker_id(worker_id());
    request.set_wait_ms(absl::ToInt64Milliseconds(kLeaseWait));
    v1::LeaseTaskResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(kLeaseWait + absl::Seconds(10)));
    {
      absl::MutexLock lock(&mu_);
      if (stop_.HasBeenNotified()) return;
      waiting_.insert(&context);
    }
    grpc::Status status = stub_->LeaseTask(&context, request, &response);
    auto cancel = std::make_shared<CancelToken>();
    {
      absl::MutexLock lock(&mu_);
      waiting_.erase(&context);
      if (status.ok() && response.has_task()) {
        running_[response.task().task_id()] = cancel;
        // Leased while stopping: not started.
        if (stop_.HasBeenNotified()) cancel->Cancel("the worker is stopping");
      }
    }
    if (!status.ok()) {
      if (stop_.HasBeenNotified()) return;
      // Back off; the heartbeat loop re-registers if we were forgotten.
      stop_.WaitForNotificationWithTimeout(absl::Seconds(1));
      continue;
    }
    if (!response.has_task()) continue;
    const v1::Task& task = response.task();
    LogFields fields{
        {"build", task.build_id()}, {"unit", task.unit().name()}, {"task", task.task_id()}};
    spdlog::info("slot {} runs unit {} ({})", slot, task.unit().name(), task.task_id());
    // On the embedded default, behind what the build runs on this machine
    // itself (a cancel while waiting ends the task at RunTask's start).
    std::optional<MachineSlots::Held> machine_slot;
    if (options_.machine_slots != nullptr) {
      machine_slot = options_.machine_slots->Acquire(cancel.get());
    }
    v1::TaskResult result = RunTask(task, *cancel);
    machine_slot.reset();
    metrics_->TaskEnded(result);
    if (result.outcome() == v1::TASK_CANCELLED) {
      spdlog::info("slot {}: unit {} ({}) cancelled: {}", slot, task.unit().name(), task.task_id(),
                   cancel->reason());
    }
    // A worker that is stopping has deregistered: the coordinator re-queued
    // what it cancelled.
    if (!(stop_.HasBeenNotified() && result.outcome() == v1::TASK_CANCELLED)) {
      absl::Status reported = Report(task, result);
      if (!reported.ok()) spdlog::warn("{}", reported.ToString());
    }
    absl::MutexLock lock(&mu_);
    running_.erase(task.task_id());
  }
}

absl::Status Worker::Report(const v1::Task& task, const v1::TaskResult& result) {
  // A toolkit replaced while the unit compiled (an upgrade that landed
  // between heartbeats) is the one the result now names: the coordinator
  // then compiles the unit again elsewhere instead of taking an object that
  // the old toolkit may have begun and the new one finished.
  RefreshToolchainIfChanged();
  // A finished result is worth retrying for: it may have cost minutes.
  for (int attempt = 0; attempt < 5; ++attempt) {
    v1::ReportResultRequest request;
    request.set_worker_id(worker_id());
    request.set_task_id(task.task_id());
    *request.mutable_result() = result;
    // The task's further toolkit's, or (as refreshed above) its own.
    request.mutable_result()->set_toolchain_digest(ToolkitOf(task).digest);
    v1::ReportResultResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(absl::Seconds(10)));
    grpc::Status status;
    {
      StoppableCall call(this, context);
      status = stub_->ReportResult(&context, request, &response);
    }
    if (status.ok() || status.error_code() != grpc::StatusCode::UNAVAILABLE) {
      return Annotate(FromGrpcStatus(status), absl::StrCat("reporting unit ", task.unit().name()));
    }
    if (stop_.WaitForNotificationWithTimeout(absl::Seconds(1 << attempt))) break;
  }
  return absl::UnavailableError(absl::StrCat("could not report unit ", task.unit().name(), " to ",
                                             options_.coordinator_address));
}

}  // namespace distcc_cuda::worker
