// SPDX-License-Identifier: Apache-2.0
// The worker process as a library: registers with a coordinator, keeps a
// heartbeat, leases units into its slots and runs the pinned nvcc on each in
// a sandbox folder. `main`, the embedded default and tests start it through
// Worker::Start.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/cancellation.h"
#include "common/base/files.h"
#include "common/base/machine_slots.h"
#include "common/nvcc/toolchain.h"
#include "common/process/memory_cap.h"
#include "common/process/sandbox.h"
#include "common/process/subprocess.h"
#include "common/process/task_tree.h"
#include "common/reapi/engine_channel.h"
#include "common/reapi/execution_client.h"
#include "common/reapi/reapi_cas_client.h"
#include "common/reapi/unit_action.h"
#include "common/store/cas_client.h"
#include "common/store/cas_store.h"
#include "common/transport/http_server.h"
#include "common/transport/tls_credentials.h"
#include "distcc_cuda/v1/worker.grpc.pb.h"
#include "worker/bot_session.h"
#include "worker/worker_metrics.h"

namespace distcc_cuda::worker {

// A further toolkit a worker compiles with: one more its coordinator serves
// (`--served-toolkit 12.8,13.2`: 13.2's), fetched before it started; its
// programs run only as WorkerOptions::toolkit_fetched says.
// The folder above `nvcc_path`'s bin/: its toolkit's root.
std::string ToolkitRootOf(const std::string& nvcc_path);

struct FurtherToolkit {
  std::string nvcc_path;  // in the worker's toolkit cache
  std::string source;     // as WorkerOptions::toolkit_source
};

struct WorkerOptions {
  std::string coordinator_address;  // HOST:PORT
  std::string name;                 // shown in status and summaries
  int slots = 1;                    // units run at once
  int64_t memory_cap_bytes = 0;     // enforced on all running units together
  bool force_watchdog = false;      // enforce with the RSS watchdog, not a cgroup
  std::string nvcc_path;            // the pinned nvcc every unit runs with
  // Where it came from, for status ("" installed here; served_toolkit.h).
  std::string toolkit_source;
  // It was fetched from the coordinator (--served-toolkit): its programs
  // run as a compile does, in the sandbox under the cap, also to
  // fingerprint it, never as the worker itself; without a sandbox
  // (--insecure-no-sandbox) only when `toolkit_pinned` (Start refuses).
  // The further toolkits are fetched ones, as pinned as this one.
  bool toolkit_fetched = false;
  bool toolkit_pinned = false;
  // Further toolkits: units of builds with their toolchains come here too,
  // each compiled with its own toolkit, in the same sandbox and under the
  // same cap. `required_nvcc_release` applies to each.
  std::vector<FurtherToolkit> more_toolkits;
  std::string required_nvcc_release;  // "12.8": refuse to start with another release
  std::string work_dir;               // sandboxes (tasks/) and the input cache (cas/)
  int64_t cas_max_bytes = 0;          // the input cache's limit (LRU eviction); 0: none
  bool keep_sandboxes = false;        // leave task folders behind for debugging
  // Compile every unit at the same path (kUnitRoot, through a mount
  // namespace per task) where the kernel allows it, so objects do not depend
  // on which worker or sandbox compiled them.
  bool stable_compile_path = true;
  // Run every compile in a bubblewrap sandbox (common/process/sandbox.h). False only
  // with --insecure-no-sandbox: nvcc then runs with the worker's own rights.
  bool sandbox = true;
  SandboxOptions sandbox_options;  // bwrap and the user; toolkit_root is set from nvcc_path
  // The embedded default's: this machine's slots, shared with the client's
  // own work (scans, compiles and links run here); a leased unit starts
  // once it holds one. Null on a worker of its own.
  std::shared_ptr<MachineSlots> machine_slots;
  // What a unit's stdout and stderr may each bring back; the rest is cut
  // with a marker.
  int64_t max_output_bytes = 1 << 20;
  // How long Start waits for the first registration with the coordinator
  // before it fails with UNAVAILABLE. Zero: Start returns at once and the
  // worker keeps trying, with backoff, for ever (distcc-cuda-worker). Either
  // way a worker that loses its coordinator later keeps trying to get back.
  absl::Duration connect_timeout = absl::Seconds(30);
  // The cluster's CA and this worker's certificate (role worker); nullopt:
  // no TLS, for a coordinator on loopback or one run with --insecure.
  std::optional<TlsMaterial> tls;
  // A channel to the coordinator to use instead of `coordinator_address`
  // and `tls` (the embedded default's in-process one); that address then
  // only names it in messages.
  std::shared_ptr<grpc::Channel> channel;
  // Set: the worker is a bot of another Remote Execution API engine
  // (BuildGrid) at this HOST:PORT, over the Remote Workers API, instead of
  // working for a coordinator (worker/bot_session.h).
  std::string bots_api;
  bool bots_api_tls = false;  // grpcs://: TLS, with `tls` where given, else the system's CAs
  std::string instance;       // the engine's instance name (--bots-api, remote_executor)
  // Set: every unit this worker leases runs on this Remote Execution API
  // engine as an Action instead of here (`distcc-cuda build
  // --remote-executor`; worker_engine.cc). The worker then has no sandbox
  // and no cap of its own: `memory_cap_bytes` is the memory of the engine's
  // largest worker, which the coordinator admits units against, and each
  // unit's reservation goes to the engine in `memory_property`.
  std::optional<EngineAddress> remote_executor;
  EngineHeaders remote_headers;  // sent with every call to it
  // Over grpcs://: its CA and the client certificate presented to it
  // (--remote-tls-*); nullopt: the system's CAs and no certificate.
  std::optional<TlsMaterial> remote_tls;
  MemoryProperty memory_property;  // its name empty: none is sent
  // HOST:PORT to serve Prometheus metrics on (/metrics); "": none.
  std::string metrics_listen;
  // Serve metrics on an address other than loopback (no credentials).
  bool http_reachable = false;
};

class Worker {
 public:
  // Computes the toolchain fingerprint, puts the memory cap in force (a
  // cgroup, else the RSS watchdog), registers and starts the slots.
  // NOT_FOUND if nvcc is missing; FAILED_PRECONDITION if it is not the
  // required release; INVALID_ARGUMENT for a cap above the
  // machine's or the container's memory; UNAVAILABLE naming the address if
  // the coordinator cannot be reached within connect_timeout.
  static absl::StatusOr<std::unique_ptr<Worker>> Start(const WorkerOptions& options);
  // Stops leasing, kills the units it runs (removing their sandboxes),
  // deregisters, so that the coordinator re-queues them at once, and joins
  // the slots.
  ~Worker();

  v1::ToolchainFingerprint toolchain() const;
  // How the cap is enforced, for people: "cgroup v1 at ..., cap 4.0 GiB".
  std::string memory_mechanism() const;
  // How compiles are isolated, for people: the sandbox's Describe(), or a
  // warning that there is none.
  std::string sandbox_description() const;
  // Where /metrics is served ("http://127.0.0.1:PORT"); "" if nowhere.
  std::string metrics_url() const;
  // Not OK once the coordinator refused this worker for good (a wrong
  // certificate, a bad name): it stopped trying and should exit.
  absl::Status refused() const;

 private:
  bool RegisteredOrRefused() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !worker_id_.empty() || !refused_.ok();
  }
  Worker() = default;
  // A call to the coordinator that stopping the worker ends at once (the
  // destructor cancels every call in `waiting_`): a dead link must not hold
  // up SIGTERM.
  class StoppableCall {
   public:
    StoppableCall(Worker* worker, grpc::ClientContext& context);
    ~StoppableCall();

   private:
    Worker* worker_;
    grpc::ClientContext* context_;
  };
  absl::Status Register();
  // Registers, with backoff and a log line per failed attempt, until it
  // succeeds or the worker stops. False when stopped.
  bool RegisterUntilStopped();
  std::string worker_id() const;
  // Its slots and memory now, for /metrics.
  WorkerGauges Gauges() const;
  void HeartbeatLoop();
  void SlotLoop(int slot);
  // Runs one task and returns its result; never throws away a finished
  // result. Its stages: Materialize, RunCompile, then (task_result.h)
  // ResultOfRun and CollectOutputs, and the upload.
  v1::TaskResult RunTask(const v1::Task& task, const CancelToken& cancel);
  // The toolkit a task compiles with.
  struct TaskToolkit {
    std::string nvcc_path;
    std::string root;    // the folder above nvcc's bin/
    std::string digest;  // its toolchain's, for the result
  };
  // The toolkit of the task's build (Task.toolchain_digest): one of the
  // further toolkits when it names one's toolchain, else the worker's own.
  TaskToolkit ToolkitOf(const v1::Task& task) const;
  // Its own toolkit's fingerprint (checked against --require-nvcc), then
  // the further toolkits' (AddFurtherToolkits); a fetched toolkit's
  // programs confined. After PrepareIsolation.
  absl::Status FingerprintToolkits();
  // Fingerprints the further toolkits, each held to --require-nvcc, their
  // programs confined (all were fetched).
  absl::Status AddFurtherToolkits();
  // How compiles are isolated (Start): the sandbox over every toolkit, or
  // with --insecure-no-sandbox the unit root where mount namespaces work;
  // nothing for another engine's client.
  absl::Status PrepareIsolation();
  // A task's unit laid out in a folder of its own, removed with it (unless
  // --keep-sandboxes); its inputs pinned in the cache until then.
  struct MaterializedTask {
    ~MaterializedTask();
    TaskToolkit toolkit;
    v1::CompileUnit unit;  // its tree's files listed
    std::string folder;
    bool keep = false;
    std::unique_ptr<CasPin> pin;
    std::optional<TaskTree> tree;
  };
  // Lists the unit's input tree, checks it as the client and coordinator
  // did, and lays out its inputs from the cache (fetching what it lacks).
  // Returns the task's result when it ends here (refused, could not start,
  // cancelled).
  std::optional<v1::TaskResult> Materialize(const v1::Task& task, const CancelToken& cancel,
                                            MaterializedTask& out);
  // How nvcc ran, in the sandbox under the node's cap.
  struct CompileRun {
    ProcessResult process;
    TaskMemoryUsage usage;
  };
  // Runs the unit's nvcc; the task's result instead when it ends without a
  // compile (could not start, cancelled, the sandbox not built).
  std::variant<CompileRun, v1::TaskResult> RunCompile(const v1::Task& task,
                                                      const MaterializedTask& materialized,
                                                      const CancelToken& cancel);
  // The process that runs `spec` for the unit: in the sandbox at the
  // client's workspace root, or (without one) at the unit root or its task
  // path.
  // The program that compiles `unit`: `nvcc` (the task's toolkit's), or for
  // a host compiler's unit the g++ of this worker's PATH, absolute.
  absl::StatusOr<std::string> CompilerFor(const v1::CompileUnit& unit,
                                          const std::string& nvcc) const;
  absl::StatusOr<ProcessSpec> PlaceProcess(ProcessSpec spec,
                                           const MaterializedTask& materialized) const;
  absl::Status Report(const v1::Task& task, const v1::TaskResult& result);
  // As a bot of another engine (worker_bot.cc): opens the channel, the
  // engine's CAS client and the bot session.
  absl::Status StartBot();
  // Runs one leased Action: its Command and input root read from the
  // engine's CAS, the unit run as any other (RunTask), its outputs,
  // stdout and stderr uploaded, and its ActionResult returned.
  LeaseOutcome RunLease(const reapi::Action& action, const CancelToken& cancel);
  // The leased unit's input files, listed: INVALID_ARGUMENT when they take
  // more than a compile reads; FAILED_PRECONDITION with a MISSING violation
  // for each the engine lacks (its client uploads them again), so that none
  // is found missing only once the unit runs.
  absl::Status CheckLeaseInputs(const v1::CompileUnit& unit);
  // Runs a leased unit; one that the cap killed while other units ran
  // beside it runs once more, alone (the bot's retry ladder: the engine
  // knows nothing of memory).
  v1::TaskResult RunLeasedTask(v1::Task& task, const CancelToken& cancel);
  // As the client of another engine (worker_engine.cc): opens the channel
  // and the engine's CAS and Execution clients.
  void StartEngine();
  // Runs one task on the engine: its inputs listed and checked as for a
  // compile here, uploaded as an Action's with the unit's reservation in the
  // memory property, executed (or answered from the engine's ActionCache),
  // and its outputs brought into the coordinator's store. An exit of 137 or
  // RESOURCE_EXHAUSTED is a memory kill, which the coordinator's retry ladder
  // answers with a larger reservation.
  v1::TaskResult RunOnEngine(const v1::Task& task, const CancelToken& cancel);
  // The result the engine's ActionCache holds for `action` at its own
  // memory value or at another near the unit's reservation, with its
  // outputs: nullopt where it holds none, which Execute then makes.
  std::optional<v1::TaskResult> CachedOnEngine(const UnitAction& action,
                                               const v1::CompileUnit& unit, const v1::Task& task,
                                               const CancelToken& cancel);
  // The result of an execution the engine ended with OK: exit 137 as a
  // memory kill, a compile's exit code, and for exit 0 its outputs.
  v1::TaskResult ResultOfEngineAction(const reapi::ExecuteResponse& response,
                                      const v1::CompileUnit& unit, const v1::Task& task);
  // Downloads the unit's outputs from the engine and uploads them to the
  // coordinator's store, into `result`.
  v1::TaskResult CollectEngineOutputs(const reapi::ActionResult& action_result,
                                      const v1::CompileUnit& unit, v1::TaskResult result);
  // The platform the bot advertises: OSFamily, ISA, toolchain, nvcc, memory.
  std::vector<std::pair<std::string, std::string>> BotProperties() const;
  // Fingerprints the toolchain again if its files changed since the last
  // look (someone upgraded CUDA under a running worker): results then carry
  // the new fingerprint, which the coordinator refuses for builds of the old
  // one, and the worker registers again with it.
  void RefreshToolchainIfChanged();

  WorkerOptions options_;
  // One worker per work dir; held for the worker's life, released last.
  std::unique_ptr<FolderLock> work_dir_lock_;
  mutable absl::Mutex toolchain_mu_;
  v1::ToolchainFingerprint toolchain_ ABSL_GUARDED_BY(toolchain_mu_);
  std::string toolchain_files_ ABSL_GUARDED_BY(toolchain_mu_);  // ToolchainFilesSignature
  // How the programs of its own toolkit run to fingerprint it: as they are,
  // or confined (ConfinedRunner) when it was fetched. Fixed at Start.
  ToolkitPrograms toolkit_programs_;
  std::string unit_root_;  // where nvcc sees a task's sandbox; empty: at its own path
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  std::unique_ptr<BlobClient> cas_client_;  // the coordinator's store, or the engine's
  ReapiCasClient* engine_cas_ = nullptr;    // cas_client_ as a bot's
  std::unique_ptr<BotSession> bot_;         // as a bot of another engine
  // As the client of another engine: its store and its Execution service.
  std::unique_ptr<ReapiCasClient> engine_store_;
  std::unique_ptr<ReapiExecutionClient> engine_execution_;
  std::unique_ptr<CasStore> cache_;
  std::unique_ptr<NodeMemoryCap> memory_cap_;  // null for another engine's client
  std::unique_ptr<Sandbox> sandbox_;           // null with --insecure-no-sandbox
  std::string tasks_dir_;                      // where task folders are made
  std::string toolkit_root_;                   // the folder above nvcc's bin/
  // The further toolkits (WorkerOptions::more_toolkits), fixed at Start.
  struct FurtherToolkitState {
    std::string nvcc_path;
    std::string root;
    v1::ToolchainFingerprint toolchain;
  };
  std::vector<FurtherToolkitState> more_toolkits_;
  absl::Notification stop_;
  mutable absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  // The fingerprint the coordinator knows this worker by (its last Register).
  std::string registered_toolchain_ ABSL_GUARDED_BY(mu_);
  absl::Status refused_ ABSL_GUARDED_BY(mu_);
  // Running tasks by id, each with what kills it.
  std::map<std::string, std::shared_ptr<CancelToken>> running_ ABSL_GUARDED_BY(mu_);
  std::set<grpc::ClientContext*> waiting_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
  std::unique_ptr<WorkerMetrics> metrics_;
  // Reads the cache, the cap and the slots: stopped first.
  std::unique_ptr<HttpServer> metrics_server_;
  std::atomic<int64_t> leases_run_{0};  // names a bot's tasks
  // A bot's compiles hold it shared; a unit run again alone, exclusively.
  absl::Mutex lease_gate_;
  std::atomic<int> leases_compiling_{0};
};

}  // namespace distcc_cuda::worker
