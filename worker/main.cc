// SPDX-License-Identifier: Apache-2.0
// distcc-cuda-worker: runs compile units for a coordinator with a pinned nvcc.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/base/command_line.h"
#include "common/base/host_resources.h"
#include "common/base/logging.h"
#include "common/base/signals.h"
#include "common/base/status.h"
#include "common/nvcc/toolchain.h"
#include "common/nvcc/toolkit_download.h"
#include "common/process/memory_cap.h"
#include "common/reapi/engine_channel.h"
#include "common/store/cas_store.h"
#include "common/transport/tls_credentials.h"
#include "spdlog/spdlog.h"
#include "worker/served_toolkit.h"
#include "worker/worker.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:3633", "HOST:PORT of the coordinator to work for");
ABSL_FLAG(int, slots, 0, "units run at once (default: the usable cores)");
ABSL_FLAG(std::string, memory_cap, "",
          "memory all of this worker's units may use together, e.g. 16GiB (default: the "
          "container's cgroup limit less 5%, else available memory less 10%)");
ABSL_FLAG(std::string, memory_mechanism, "auto",
          "how the cap is enforced: auto (a cgroup v2 or v1 memory group where one can be "
          "made, else the RSS watchdog) or watchdog");
ABSL_FLAG(std::string, nvcc, "",
          "the pinned nvcc (default: $CUDA_HOME/bin/nvcc, else "
          "/usr/local/cuda/bin/nvcc)");
ABSL_FLAG(std::string, served_toolkit, "",
          "compile with the coordinator's toolkit of this release (13.2: the newest it serves; "
          "13.2.86: that one) instead of --nvcc: fetched once into WORK_DIR/toolkits, every file "
          "checked (distcc-cuda-coordinator toolkit add serves one), its programs run only in "
          "the sandbox; 13.2@sha256:HEX takes it only with the manifest its operator's "
          "`toolkit list` prints (needed with --insecure-no-sandbox); several, comma-separated "
          "(12.8,13.2): the worker takes units of each one's builds, each compiled with its "
          "own toolkit");
ABSL_FLAG(std::string, toolkit_cache_size, "8GiB",
          "with --served-toolkit: the most its toolkit cache keeps (least recently used out)");
ABSL_FLAG(std::string, toolkit_max_size, "8GiB", distcc_cuda::kToolkitMaxSizeHelp);
ABSL_FLAG(std::string, toolkit_stall_timeout, "60s", distcc_cuda::kToolkitStallHelp);
ABSL_FLAG(std::string, toolkit_fetch_timeout, "30m", distcc_cuda::kToolkitFetchTimeoutHelp);
ABSL_FLAG(std::string, require_nvcc, "",
          "refuse to start unless nvcc is this release, e.g. 12.8 (any 12.8.x) or 12.8.93");
ABSL_FLAG(std::string, name, "",
          "name shown in status (default: HOST-PID; with --bots-api, the bot's id: HOST)");
ABSL_FLAG(std::string, work_dir, "",
          "folder for sandboxes and the input cache (default: "
          "/tmp/distcc-cuda-worker-NAME)");
ABSL_FLAG(bool, keep_sandboxes, false, "leave each task's folder behind");
ABSL_FLAG(std::string, cas_max_size, "",
          "the most the input cache (WORK_DIR/cas) may hold, e.g. 10GiB; least recently used "
          "blobs are evicted beyond it (default: 10% of its disk, at most 50GiB)");
ABSL_FLAG(bool, stable_compile_path, true,
          "with --insecure-no-sandbox only: compile every unit at /run/distcc-cuda-unit (a "
          "mount namespace per unit) where the kernel allows it; --nostable-compile-path "
          "compiles at the task folders' paths (sandboxed compiles always see the client's "
          "own paths)");
ABSL_FLAG(bool, insecure_no_sandbox, false,
          "run nvcc WITHOUT the bubblewrap sandbox, with this worker's user, files and "
          "network; only for machines where user namespaces are unavailable and every "
          "submitter is trusted. Printed at start and in `distcc-cuda status`");
ABSL_FLAG(std::string, sandbox_user, "",
          "the user compiles run as when the worker runs as root (default: "
          "distcc-cuda-sandbox if it exists, else nobody)");
ABSL_FLAG(std::string, bwrap, "bwrap", "the bubblewrap program that builds each sandbox");
ABSL_FLAG(std::string, max_output, "1MiB",
          "the most of each of a unit's stdout and stderr sent back; the rest is cut with a "
          "marker");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on, at /metrics (e.g. 127.0.0.1:9465); off by "
          "default; an address other than loopback needs --http-open");
ABSL_FLAG(bool, http_open, false,
          "serve --metrics-listen on an address other than loopback: it needs no credentials "
          "to read (slots, memory, cache figures); it changes nothing");
ABSL_FLAG(std::string, log_format, "text",
          "text, or json: one JSON object per log line (time, level, program, message, and "
          "the build, unit, task and worker it concerns), for a log pipeline");
ABSL_FLAG(bool, print_toolchain, false, "print this worker's toolchain fingerprint and exit");
ABSL_FLAG(std::string, tls_ca, "",
          "the cluster's CA certificate (ca.crt); with --tls-cert and --tls-key, connect to "
          "the coordinator over mutual TLS (also tls-ca in the config file's [worker] table)");
ABSL_FLAG(std::string, tls_cert, "",
          "this worker's certificate, of role worker (`distcc-cuda-coordinator certs issue "
          "--role worker NAME`)");
ABSL_FLAG(std::string, tls_key, "", "the private key of --tls-cert");
ABSL_FLAG(std::string, bots_api, "",
          "grpc://HOST:PORT or grpcs://HOST:PORT: work as a bot of that Remote Execution API "
          "engine (BuildGrid: its Remote Workers API) instead of for a coordinator; leased "
          "Actions run as units do, in the sandbox under --memory-cap");
ABSL_FLAG(std::string, instance, "", "with --bots-api: the engine's instance name");

namespace {

// --bots-api's grpc://HOST:PORT or grpcs://HOST:PORT into `options`.
absl::Status ParseBotsApi(const std::string& flag, distcc_cuda::worker::WorkerOptions& options) {
  if (flag.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(distcc_cuda::EngineAddress engine,
                   distcc_cuda::ParseEngineUrl(flag, "--bots-api"));
  options.bots_api = engine.host_port;
  options.bots_api_tls = engine.tls;
  return absl::OkStatus();
}

}  // namespace

namespace {

// --memory-cap, else the machine's default (said).
absl::StatusOr<int64_t> MemoryCapFlag() {
  const std::string cap = absl::GetFlag(FLAGS_memory_cap);
  if (cap.empty()) {
    distcc_cuda::DefaultCap default_cap = distcc_cuda::DefaultMemoryCap();
    distcc_cuda::LogNotice(absl::StrCat(
        "memory cap ", distcc_cuda::FormatByteSize(default_cap.bytes), ": ", default_cap.source));
    return default_cap.bytes;
  }
  absl::StatusOr<int64_t> parsed = distcc_cuda::ParseByteSize(cap);
  if (!parsed.ok())
    return absl::InvalidArgumentError(absl::StrCat("--memory-cap: ", parsed.status().message()));
  return parsed;
}

// What --served-toolkit and its limits ask for, checked: a toolkit's
// programs run as this worker without a sandbox only when pinned.
absl::StatusOr<distcc_cuda::worker::ServedToolkitRequest> ServedToolkitRequestFromFlags(
    const distcc_cuda::worker::WorkerOptions& options) {
  distcc_cuda::worker::ServedToolkitRequest request;
  request.wanted = absl::GetFlag(FLAGS_served_toolkit);
  if (request.wanted.empty()) return request;
  request.coordinator_address = options.coordinator_address;
  request.tls = options.tls;
  request.cache_dir = options.work_dir + "/toolkits";
  absl::StatusOr<int64_t> size =
      distcc_cuda::ParseByteSize(absl::GetFlag(FLAGS_toolkit_cache_size));
  if (!size.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--toolkit-cache-size: ", size.status().message()));
  }
  request.cache_max_bytes = *size;
  ASSIGN_OR_RETURN(request.limits, distcc_cuda::ParseToolkitFetchLimits(
                                       absl::GetFlag(FLAGS_toolkit_max_size),
                                       absl::GetFlag(FLAGS_toolkit_stall_timeout),
                                       absl::GetFlag(FLAGS_toolkit_fetch_timeout)));
  ASSIGN_OR_RETURN(std::vector<distcc_cuda::WantedToolkit> wanted,
                   distcc_cuda::ParseWantedToolkits(request.wanted));
  for (const distcc_cuda::WantedToolkit& one : wanted) {
    // Without a sandbox its programs would run as this worker: only what
    // the operator pinned, never whatever the coordinator sends.
    if (!options.sandbox && one.pinned_hash.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--served-toolkit ", one.ToString(),
          " is not pinned, and with --insecure-no-sandbox a fetched toolkit's programs run "
          "as this worker's user: pin it to the manifest its operator's "
          "`distcc-cuda-coordinator toolkit list` prints (--served-toolkit ",
          one.release.ToString(), "@sha256:HEX), or drop --insecure-no-sandbox"));
    }
  }
  return request;
}

constexpr char kProgram[] = "distcc-cuda-worker";

// A reason to stop before the worker starts: its words and the exit status
// (2: a flag is wrong; 1: this machine cannot run the worker).
struct Stop {
  int exit_code;
  std::string message;
};

int Fail(const Stop& stop) {
  distcc_cuda::LogFatal(kProgram, stop.message);
  return stop.exit_code;
}

Stop FailWith(int exit_code, const absl::Status& status, absl::string_view flag = "") {
  return Stop{exit_code, absl::StrCat(flag, flag.empty() ? "" : ": ", status.message())};
}

// Where it works (a coordinator or another engine), how it proves who it is,
// its name and the nvcc it was given.
std::optional<Stop> ConnectionFromFlags(const std::string& nvcc,
                                        distcc_cuda::worker::WorkerOptions& options) {
  options.coordinator_address = absl::GetFlag(FLAGS_coordinator);
  auto tls = distcc_cuda::LoadTlsMaterial(
      {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key)},
      distcc_cuda::PeerRole::kWorker);
  if (!tls.ok()) return FailWith(2, tls.status());
  options.tls = std::move(*tls);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.http_reachable = absl::GetFlag(FLAGS_http_open);
  options.nvcc_path = nvcc;
  options.required_nvcc_release = absl::GetFlag(FLAGS_require_nvcc);
  options.name = absl::GetFlag(FLAGS_name);
  if (options.name.empty()) {
    // A bot keeps its name across restarts: the engine then gives the
    // leases of the bot that died to another at once.
    options.name = options.bots_api.empty() ? absl::StrCat(distcc_cuda::HostName(), "-", getpid())
                                            : distcc_cuda::HostName();
  }
  return std::nullopt;
}

// What it may use of this machine: slots, the memory cap and how it is
// enforced, the work folder and its cache, the sandbox, output sizes.
std::optional<Stop> ResourcesFromFlags(distcc_cuda::worker::WorkerOptions& options) {
  options.slots = absl::GetFlag(FLAGS_slots);
  if (options.slots <= 0) options.slots = distcc_cuda::UsableCores();
  auto cap = MemoryCapFlag();
  if (!cap.ok()) return FailWith(1, cap.status());
  options.memory_cap_bytes = *cap;
  options.work_dir = absl::GetFlag(FLAGS_work_dir);
  if (options.work_dir.empty()) {
    options.work_dir = absl::StrCat("/tmp/distcc-cuda-worker-", options.name);
  }
  options.keep_sandboxes = absl::GetFlag(FLAGS_keep_sandboxes);
  auto cas_max = distcc_cuda::CasMaxBytesFromFlag(absl::GetFlag(FLAGS_cas_max_size),
                                                  options.work_dir + "/cas");
  if (!cas_max.ok()) return FailWith(2, cas_max.status());
  options.cas_max_bytes = *cas_max;
  options.stable_compile_path = absl::GetFlag(FLAGS_stable_compile_path);
  options.sandbox = !absl::GetFlag(FLAGS_insecure_no_sandbox);
  options.sandbox_options.user = absl::GetFlag(FLAGS_sandbox_user);
  options.sandbox_options.bwrap = absl::GetFlag(FLAGS_bwrap);
  auto max_output = distcc_cuda::ParseByteSize(absl::GetFlag(FLAGS_max_output));
  if (!max_output.ok()) return FailWith(2, max_output.status(), "--max-output");
  options.max_output_bytes = *max_output;
  std::string mechanism = absl::GetFlag(FLAGS_memory_mechanism);
  if (mechanism != "auto" && mechanism != "watchdog") {
    return Stop{2,
                absl::StrCat("--memory-mechanism is 'auto' or 'watchdog', not '", mechanism, "'")};
  }
  options.force_watchdog = mechanism == "watchdog";
  return std::nullopt;
}

// The toolkits its coordinator serves (--served-toolkit), fetched: the first
// instead of --nvcc, the rest beside it.
std::optional<Stop> UseServedToolkitsFromFlags(distcc_cuda::worker::WorkerOptions& options) {
  auto request = ServedToolkitRequestFromFlags(options);
  if (!request.ok()) return FailWith(2, request.status());
  if (request->wanted.empty()) return std::nullopt;
  auto served = distcc_cuda::worker::UseServedToolkits(*request);
  if (!served.ok()) return FailWith(1, served.status());
  for (size_t i = 0; i < served->size(); ++i) {
    const distcc_cuda::worker::ServedToolkitUse& use = (*served)[i];
    if (i == 0) {
      options.nvcc_path = use.nvcc;
      options.toolkit_source = use.source;
      options.toolkit_fetched = true;
      options.toolkit_pinned = use.pinned;
    } else {
      options.more_toolkits.push_back({use.nvcc, use.source});
    }
  }
  return std::nullopt;
}

// Starts the worker and runs it until a signal, or until its coordinator
// refuses it for good.
int RunUntilStopped(distcc_cuda::worker::WorkerOptions options) {
  // Started before its coordinator, or cut off from it: keep trying (with
  // backoff, logging each attempt) and answer SIGTERM at once meanwhile.
  options.connect_timeout = absl::ZeroDuration();
  auto worker = distcc_cuda::worker::Worker::Start(options);
  if (!worker.ok()) return Fail(FailWith(1, worker.status()));
  distcc_cuda::LogNotice(absl::StrCat("memory cap enforced by ", (*worker)->memory_mechanism()));
  distcc_cuda::LogNotice((*worker)->sandbox_description());
  if (options.bots_api.empty()) {
    distcc_cuda::LogNotice(absl::StrCat("working for the coordinator at ",
                                        options.coordinator_address,
                                        " (registering; Ctrl-C or SIGTERM stops this worker)"));
  } else {
    distcc_cuda::LogNotice(absl::StrCat(
        "a bot of the engine at ", absl::GetFlag(FLAGS_bots_api), ", instance '", options.instance,
        "' (opening a session; Ctrl-C or SIGTERM stops this worker)"));
  }
  int signal = 0;
  while (signal == 0 && (*worker)->refused().ok()) {
    signal = distcc_cuda::WaitForTerminationSignalFor(1);
  }
  if (signal == 0) return Fail(FailWith(1, (*worker)->refused()));
  spdlog::info("worker {} stopping (signal {})", options.name, signal);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Runs compile units for a distcc-cuda coordinator with a pinned nvcc.\n"
      "Usage: distcc-cuda-worker --coordinator HOST:PORT [--slots N] "
      "[--memory-cap SIZE] [--nvcc PATH]\n"
      "   or: distcc-cuda-worker --bots-api grpc://HOST:PORT --instance NAME [...]: a bot of "
      "another Remote Execution API engine (BuildGrid)");
  distcc_cuda::ParseFlags(argc, argv, "worker");
  if (absl::Status logs = distcc_cuda::UseLogFormat(absl::GetFlag(FLAGS_log_format), kProgram);
      !logs.ok()) {
    std::cerr << kProgram << ": " << logs.message() << "\n";
    return 2;
  }
  distcc_cuda::BlockTerminationSignals();
  distcc_cuda::worker::WorkerOptions options;
  if (absl::Status engine = ParseBotsApi(absl::GetFlag(FLAGS_bots_api), options); !engine.ok()) {
    return Fail(FailWith(2, engine));
  }
  options.instance = absl::GetFlag(FLAGS_instance);
  const char* cuda_home = std::getenv("CUDA_HOME");
  auto nvcc = distcc_cuda::ResolveNvcc(absl::GetFlag(FLAGS_nvcc), cuda_home ? cuda_home : "");
  // A served toolkit needs no nvcc of this machine's.
  if (!nvcc.ok() && !absl::GetFlag(FLAGS_served_toolkit).empty()) nvcc = "";
  if (!nvcc.ok()) return Fail(FailWith(1, nvcc.status()));
  if (absl::GetFlag(FLAGS_print_toolchain)) {
    auto toolchain = distcc_cuda::ComputeToolchainFingerprint(*nvcc);
    if (!toolchain.ok()) return Fail(FailWith(1, toolchain.status()));
    std::cout << toolchain->DebugString();
    return 0;
  }
  if (std::optional<Stop> stop = ConnectionFromFlags(*nvcc, options)) return Fail(*stop);
  // Every line from here on is about this worker.
  distcc_cuda::LogFields worker_field{{"worker", options.name}};
  if (std::optional<Stop> stop = ResourcesFromFlags(options)) return Fail(*stop);
  if (std::optional<Stop> stop = UseServedToolkitsFromFlags(options)) return Fail(*stop);
  return RunUntilStopped(std::move(options));
}
