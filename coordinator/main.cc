// SPDX-License-Identifier: Apache-2.0
// distcc-cuda-coordinator: accepts builds and leases their units to workers.
#include <algorithm>
#include <iostream>
#include <optional>
#include <tuple>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/base/command_line.h"
#include "common/base/logging.h"
#include "common/base/signals.h"
#include "common/base/status.h"
#include "common/store/cas_store.h"
#include "common/transport/tls_credentials.h"
#include "coordinator/coordinator.h"
#include "coordinator/toolkits/toolkit_command.h"
#include "coordinator/trust/certs_command.h"
#include "coordinator/trust/revoke_command.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:3633",
          "HOST:PORT to listen on for clients and workers; an address other than 127.0.0.1, "
          "::1 or localhost needs --tls-ca, --tls-cert and --tls-key (or --insecure)");
ABSL_FLAG(std::string, tls_ca, "",
          "the cluster's CA certificate (ca.crt from `distcc-cuda-coordinator certs init`); with "
          "--tls-cert and --tls-key, every client and worker must present a certificate from "
          "this CA, and its role decides what it may do (also tls-ca in the config file)");
ABSL_FLAG(std::string, tls_cert, "",
          "this coordinator's certificate, of role coordinator (`distcc-cuda-coordinator certs "
          "issue --role coordinator --host HOST NAME`)");
ABSL_FLAG(std::string, tls_key, "", "the private key of --tls-cert");
ABSL_FLAG(bool, insecure, false,
          "listen on an address other than loopback without TLS: anyone who can reach it can "
          "submit builds, read sources and register workers");
ABSL_FLAG(std::string, state_dir, "", "folder for the content store and result cache (required)");
ABSL_FLAG(std::string, cas_max_size, "",
          "the most the content store may hold, e.g. 20GiB; least recently used blobs that no "
          "running build needs are evicted beyond it (default: 10% of its disk, at most 50GiB)");
ABSL_FLAG(std::string, default_unit_memory, "2GiB",
          "peak memory predicted for a unit never measured and with no similar unit, per "
          "parallel compilation (-gencode targets run at once under --threads)");
ABSL_FLAG(int, default_unit_seconds, 60, "wall time predicted for such a unit");
ABSL_FLAG(int, arrival_grace_ms, distcc_cuda::coordinator::kArrivalGraceMs,
          "the units of a build submitted whole (a launcher call) that reach an empty queue "
          "wait this long before the first is offered, so that builds submitted together start "
          "longest first; 0: offered at once");
ABSL_FLAG(
    double, prior_memory_scale, 1.0,
    "multiplies the peaks of the measured profiles units of a known kind are first "
    "predicted from (coordinator/memory/data/unit_priors.csv); for simulations whose units are "
    "scaled (bench/replay.py)");
ABSL_FLAG(double, prior_time_scale, 1.0, "the same for their wall times");
ABSL_FLAG(std::string, admission, "memory",
          "memory: start a unit only where its predicted peak fits (the default); static: "
          "fill every worker slot regardless of memory, like ninja -j (for comparisons)");
ABSL_FLAG(int64_t, max_units_per_build, 100000,
          "refuse a build of more compile units than this (instantiation grids expanded)");
ABSL_FLAG(int64_t, max_grid_points, 100000,
          "refuse a build whose instantiation sets have more grid points than this in all");
ABSL_FLAG(int64_t, max_arguments_per_unit, 4096, "refuse a unit with more nvcc arguments");
ABSL_FLAG(std::string, max_argument_length, "64KiB", "refuse a unit with a longer nvcc argument");
ABSL_FLAG(int64_t, max_inputs_per_unit, 50000, "refuse a unit with more input files");
ABSL_FLAG(int64_t, max_input_listings_per_build, 20000000,
          "refuse a build whose units list more input files than this in all (a header every "
          "unit includes counts once per unit)");
ABSL_FLAG(std::string, max_build_plan_size, "256MiB",
          "refuse a build whose units, sent as a plan blob, take more bytes than this");
ABSL_FLAG(std::string, max_build_input_size, "64GiB",
          "refuse a build whose distinct input files add up to more");
ABSL_FLAG(std::string, max_blob_size, "4GiB", "refuse to store a larger blob (input or object)");
ABSL_FLAG(std::string, max_output, "1MiB",
          "keep at most this much of each of a unit's stdout and stderr from a worker's report");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on, at /metrics (e.g. 127.0.0.1:9464); off by "
          "default; an address other than loopback needs --http-open");
ABSL_FLAG(std::string, reapi_listen, "",
          "HOST:PORT to serve the Remote Execution API on (Bazel: "
          "--remote_executor=grpc://HOST:PORT): its nvcc and g++ actions run on this "
          "coordinator's workers, under the same TLS and roles as --listen; empty: not served");
ABSL_FLAG(std::string, http_listen, "",
          "HOST:PORT to serve the live dashboard on (e.g. 127.0.0.1:8080): workers, their "
          "memory and running units, the queue, the last builds and their timelines; off by "
          "default; an address other than loopback needs --http-open");
ABSL_FLAG(bool, http_open, false,
          "serve --metrics-listen and --http-listen on an address other than loopback: they "
          "need no credentials to read (worker and unit names, the queue, store figures); "
          "they change nothing");
ABSL_FLAG(std::string, log_format, "text",
          "text, or json: one JSON object per log line (time, level, program, message, and "
          "the build, unit, task and worker it concerns), for a log pipeline");
ABSL_FLAG(int, max_plans_per_client, 8,
          "builds and parts of builds one client may have being planned at once (queued or "
          "running); more are refused with RESOURCE_EXHAUSTED; 0: no limit");
ABSL_FLAG(double, cross_check_rate, 0,
          "compile this share of units (0 to 1, e.g. 0.01) a second time on a worker of another "
          "identity and compare the objects; a worker a third one outvotes is quarantined "
          "(revoked: its results leave the cache); see distcc-cuda-coordinator revoke");
ABSL_FLAG(int, heartbeat_timeout_s, 6,
          "drop a worker and re-queue its units after this many seconds "
          "without a heartbeat");

namespace {

constexpr char kProgram[] = "distcc-cuda-coordinator";

// `certs`, `revoke` and `toolkit` are commands of their own, with their own
// arguments: they run before the server's flags are parsed. Their exit
// status, or nothing when argv names none of them.
std::optional<int> RunSubcommand(int argc, char** argv) {
  using distcc_cuda::coordinator::RunCertsCommand;
  using distcc_cuda::coordinator::RunRevokeCommand;
  using distcc_cuda::coordinator::RunToolkitCommand;
  using Subcommand = absl::Status (*)(const std::vector<std::string>&, std::ostream&);
  for (auto [name, run] : {std::pair<const char*, Subcommand>{"certs", RunCertsCommand},
                           std::pair<const char*, Subcommand>{"revoke", RunRevokeCommand},
                           std::pair<const char*, Subcommand>{"toolkit", RunToolkitCommand}}) {
    if (argc < 2 || std::string(argv[1]) != name) continue;
    absl::Status status = run(std::vector<std::string>(argv + 2, argv + argc), std::cout);
    if (status.ok()) return 0;
    std::cerr << kProgram << ": " << status.message() << "\n";
    return absl::IsInvalidArgument(status) ? 2 : 1;
  }
  return std::nullopt;
}

// The scheduler's settings from the flags, each checked.
absl::Status SchedulerFromFlags(distcc_cuda::coordinator::CoordinatorOptions& options) {
  options.scheduler.heartbeat_timeout = absl::Seconds(absl::GetFlag(FLAGS_heartbeat_timeout_s));
  // Workers of a coordinator that restarted register again within a couple
  // of heartbeats; builds resubmitted meanwhile wait for them.
  options.scheduler.startup_grace = 2 * options.scheduler.heartbeat_timeout;
  options.scheduler.cross_check_rate = absl::GetFlag(FLAGS_cross_check_rate);
  options.scheduler.arrival_grace = absl::Milliseconds(absl::GetFlag(FLAGS_arrival_grace_ms));
  if (absl::GetFlag(FLAGS_arrival_grace_ms) < 0 || absl::GetFlag(FLAGS_arrival_grace_ms) > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--arrival-grace-ms must be between 0 (offer units at once) and 10000, not ",
                     absl::GetFlag(FLAGS_arrival_grace_ms)));
  }
  if (!(options.scheduler.cross_check_rate >= 0 && options.scheduler.cross_check_rate <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cross-check-rate must be between 0 and 1 (0.01: one unit in a hundred), "
                     "not ",
                     options.scheduler.cross_check_rate));
  }
  std::string admission = absl::GetFlag(FLAGS_admission);
  if (admission != "memory" && admission != "static") {
    return absl::InvalidArgumentError(
        absl::StrCat("--admission is 'memory' or 'static', not '", admission, "'"));
  }
  options.scheduler.memory_admission = admission == "memory";
  return absl::OkStatus();
}

// A build's bounds and the sizes the coordinator accepts, from the flags.
absl::Status LimitsFromFlags(distcc_cuda::coordinator::CoordinatorOptions& options) {
  options.limits.max_units = absl::GetFlag(FLAGS_max_units_per_build);
  options.limits.max_grid_points = absl::GetFlag(FLAGS_max_grid_points);
  options.limits.max_arguments_per_unit = absl::GetFlag(FLAGS_max_arguments_per_unit);
  options.limits.max_inputs_per_unit = absl::GetFlag(FLAGS_max_inputs_per_unit);
  options.limits.max_input_listings = absl::GetFlag(FLAGS_max_input_listings_per_build);
  options.limits.max_plans_per_client = std::max(0, absl::GetFlag(FLAGS_max_plans_per_client));
  for (auto [flag, value, into] :
       {std::make_tuple("--max-argument-length", absl::GetFlag(FLAGS_max_argument_length),
                        &options.limits.max_argument_bytes),
        std::make_tuple("--max-build-input-size", absl::GetFlag(FLAGS_max_build_input_size),
                        &options.limits.max_input_bytes),
        std::make_tuple("--max-build-plan-size", absl::GetFlag(FLAGS_max_build_plan_size),
                        &options.limits.max_plan_bytes),
        std::make_tuple("--max-blob-size", absl::GetFlag(FLAGS_max_blob_size),
                        &options.max_blob_bytes),
        std::make_tuple("--max-output", absl::GetFlag(FLAGS_max_output),
                        &options.scheduler.max_output_bytes)}) {
    auto bytes = distcc_cuda::ParseByteSize(value);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": ", bytes.status().message()));
    }
    *into = *bytes;
  }
  return absl::OkStatus();
}

// What a unit is predicted to cost before it was measured, from the flags.
absl::Status PredictionFromFlags(distcc_cuda::coordinator::CoordinatorOptions& options) {
  auto default_memory = distcc_cuda::ParseByteSize(absl::GetFlag(FLAGS_default_unit_memory));
  if (!default_memory.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--default-unit-memory: ", default_memory.status().message()));
  }
  options.prediction.peak_bytes = *default_memory;
  options.prediction.wall = absl::Seconds(absl::GetFlag(FLAGS_default_unit_seconds));
  options.prediction.prior_memory_scale = std::max(1e-6, absl::GetFlag(FLAGS_prior_memory_scale));
  options.prediction.prior_time_scale = std::max(1e-6, absl::GetFlag(FLAGS_prior_time_scale));
  return absl::OkStatus();
}

// Everything the server is told, from the flags, each checked.
absl::StatusOr<distcc_cuda::coordinator::CoordinatorOptions> OptionsFromFlags() {
  distcc_cuda::coordinator::CoordinatorOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.state_dir = absl::GetFlag(FLAGS_state_dir);
  ASSIGN_OR_RETURN(options.cas_max_bytes,
                   distcc_cuda::CasMaxBytesFromFlag(absl::GetFlag(FLAGS_cas_max_size),
                                                    options.state_dir + "/cas"));
  ASSIGN_OR_RETURN(options.tls, distcc_cuda::LoadTlsMaterial(
                                    {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
                                     absl::GetFlag(FLAGS_tls_key)},
                                    distcc_cuda::PeerRole::kCoordinator));
  options.insecure = absl::GetFlag(FLAGS_insecure);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.http_listen = absl::GetFlag(FLAGS_http_listen);
  options.reapi_listen = absl::GetFlag(FLAGS_reapi_listen);
  options.http_reachable = absl::GetFlag(FLAGS_http_open);
  RETURN_IF_ERROR(SchedulerFromFlags(options));
  RETURN_IF_ERROR(LimitsFromFlags(options));
  RETURN_IF_ERROR(PredictionFromFlags(options));
  return options;
}

// Where it listens, for people and for scripts started with port 0.
void PrintAddresses(const distcc_cuda::coordinator::Coordinator& coordinator,
                    const distcc_cuda::coordinator::CoordinatorOptions& options) {
  std::cout << "listening on " << coordinator.address() << std::endl;
  if (coordinator.reapi_port() != 0) {
    const std::string& reapi = options.reapi_listen;
    std::string host = reapi.substr(0, reapi.rfind(':'));
    std::cout << "Remote Execution API on " << host << ":" << coordinator.reapi_port()
              << " (Bazel: --remote_executor=" << (options.tls ? "grpcs://" : "grpc://") << host
              << ":" << coordinator.reapi_port() << ")" << std::endl;
  }
  if (!coordinator.dashboard_url().empty()) {
    std::cout << "dashboard at " << coordinator.dashboard_url() << "/" << std::endl;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (std::optional<int> exit_code = RunSubcommand(argc, argv)) return *exit_code;
  absl::SetProgramUsageMessage(
      "Accepts distcc-cuda builds and schedules their compile units on the "
      "workers that connect to it.\n"
      "Usage: distcc-cuda-coordinator --listen 0.0.0.0:3633 --state-dir DIR \\\n"
      "           --tls-ca ca.crt --tls-cert NAME.crt --tls-key NAME.key\n"
      "       distcc-cuda-coordinator --listen 127.0.0.1:3633 --state-dir DIR  (local only)\n"
      "       distcc-cuda-coordinator certs init|issue ...  (see certs --help)\n"
      "       distcc-cuda-coordinator revoke --state-dir DIR NAME  (see revoke --help)\n"
      "       distcc-cuda-coordinator toolkit add --state-dir DIR FOLDER  (see toolkit --help)");
  distcc_cuda::ParseFlags(argc, argv, "coordinator");
  if (absl::Status logs = distcc_cuda::UseLogFormat(absl::GetFlag(FLAGS_log_format), kProgram);
      !logs.ok()) {
    std::cerr << kProgram << ": " << logs.message() << "\n";
    return 2;
  }
  distcc_cuda::BlockTerminationSignals();
  absl::StatusOr<distcc_cuda::coordinator::CoordinatorOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    distcc_cuda::LogFatal(kProgram, options.status().message());
    return 2;
  }
  auto coordinator = distcc_cuda::coordinator::Coordinator::Start(*options);
  if (!coordinator.ok()) {
    distcc_cuda::LogFatal(kProgram, coordinator.status().message());
    return 1;
  }
  PrintAddresses(**coordinator, *options);
  int signal = distcc_cuda::WaitForTerminationSignal();
  spdlog::info("coordinator shutting down (signal {})", signal);
  return 0;
}
