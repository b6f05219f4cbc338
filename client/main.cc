// SPDX-License-Identifier: Apache-2.0
// distcc-cuda: build CUDA kernel sets across workers, check status, inspect
// fatbinaries.
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <iostream>
#include <optional>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/cluster/embedded_cluster.h"
#include "client/commands.h"
#include "client/launcher/build_session.h"
#include "client/launcher/launcher.h"
#include "client/plan/options.h"
#include "client/stages/build_command.h"
#include "client/stages/verify.h"
#include "client/text/progress.h"
#include "client/toolkit/build_toolkit.h"
#include "client/toolkit/toolkit_command.h"
#include "common/base/byte_size.h"
#include "common/base/cancellation.h"
#include "common/base/command_line.h"
#include "common/base/logging.h"
#include "common/base/signals.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/nvcc/gpu_targets.h"
#include "common/nvcc/host_compiler_args.h"
#include "common/nvcc/toolchain.h"
#include "common/nvcc/toolkit_download.h"
#include "common/transport/tls_credentials.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, coordinator, "",
          "HOST:PORT of a coordinator (default for build: an embedded one on "
          "this machine; $DISTCC_CUDA_COORDINATOR if set)");
ABSL_FLAG(std::string, remote_executor, "",
          "grpc://HOST:PORT or grpcs://HOST:PORT of a Remote Execution API engine (BuildGrid, "
          "Buildfarm, NativeLink, BuildBuddy) to compile every unit on, as Actions; planning, "
          "memory admission, the retry ladder, merges and the link stay here");
ABSL_FLAG(std::string, remote_instance, "", "--remote-executor's instance name");
ABSL_FLAG(std::vector<std::string>, remote_header, {},
          "KEY=VALUE header sent with every call to --remote-executor (an API key); give it "
          "again for another");
ABSL_FLAG(std::string, remote_memory_property, "memory",
          "NAME[:UNIT]: the platform property the engine reads an action's memory from, UNIT "
          "B (default), KiB, MiB, GiB, KB, MB or GB; each unit's predicted peak goes there, and "
          "a larger one after a memory kill (NativeLink: memory_kb:KiB, Buildfarm: min-mem, "
          "BuildBuddy: EstimatedMemory; empty: none)");
ABSL_FLAG(std::string, remote_tls_ca, "",
          "--remote-executor grpcs://: the CA certificate that issued the engine's (default: "
          "the system's CAs)");
ABSL_FLAG(std::string, remote_tls_cert, "",
          "--remote-executor grpcs://: the client certificate to present to an engine that asks "
          "for one (mutual TLS), with --remote-tls-key");
ABSL_FLAG(std::string, remote_tls_key, "", "the private key of --remote-tls-cert");
ABSL_FLAG(int, remote_jobs, 32, "--remote-executor: units on the engine at once");
ABSL_FLAG(std::string, remote_memory, "64GiB",
          "--remote-executor: the memory of the engine's largest worker; no unit is sent "
          "reserving more, and the units on the engine at once reserve no more in all");
ABSL_FLAG(std::string, o, "distcc-cuda-out",
          "output folder: the library, and a manifest's objects in obj/");
ABSL_FLAG(std::string, library, "", "library file name to link (compile_commands.json plans only)");
ABSL_FLAG(std::string, objects_dir, "",
          "compile_commands.json plans only: put the objects here (as UNIT.o) instead of at "
          "each command's own -o");
ABSL_FLAG(std::string, verify, "",
          "rebuild this many units (or \"all\") here, in the sandbox the workers use, and fail "
          "the build if their device code differs from what the workers returned");
ABSL_FLAG(std::string, link_command, "",
          "compile_commands.json plans only: the link as you run it, with {objects} and "
          "{output} as words of their own (default: g++ -shared -Wl,-soname,LIBRARY {objects} "
          "-L$CUDA/lib64 -lcudart -o {output}); manifests use their [link] table");
ABSL_FLAG(std::string, nvcc, "",
          "the pinned nvcc for scanning and linking (default: "
          "$CUDA_HOME/bin/nvcc, else /usr/local/cuda/bin/nvcc)");
ABSL_FLAG(std::string, toolkit, "",
          "the CUDA toolkit to build with: auto (the release the command's torch was built "
          "with), a release (13.2, 13.2.86: installed from PyPI the first time), or a CUDA folder; "
          "the command gets it as CUDA_HOME, PATH and PYTORCH_NVCC (default: --nvcc, checked "
          "against torch's release before the command runs)");
ABSL_FLAG(std::string, toolkit_dir, "",
          "where `toolkit install` puts toolkits and builds find them (default: "
          "$DISTCC_CUDA_TOOLKITS, else $XDG_CACHE_HOME/distcc-cuda/toolkits or "
          "~/.cache/distcc-cuda/toolkits)");
ABSL_FLAG(std::string, python, "python3", "the Python whose pip installs toolkits from PyPI");
ABSL_FLAG(std::string, toolkit_pin, "",
          "toolkit install from a coordinator takes a toolkit of these releases only with "
          "this manifest digest, as its operator's `distcc-cuda-coordinator toolkit list` "
          "prints it: 13.2@sha256:HEX, comma-separated (also toolkit-pin in the config file's "
          "[client] table)");
ABSL_FLAG(std::string, toolkit_max_size, "8GiB", distcc_cuda::kToolkitMaxSizeHelp);
ABSL_FLAG(std::string, toolkit_stall_timeout, "60s", distcc_cuda::kToolkitStallHelp);
ABSL_FLAG(std::string, toolkit_fetch_timeout, "30m", distcc_cuda::kToolkitFetchTimeoutHelp);
ABSL_FLAG(std::string, require_nvcc, "",
          "refuse to build unless nvcc is this release, e.g. 12.8 (any 12.8.x) or 12.8.93");
ABSL_FLAG(std::string, state_dir, "",
          "embedded default's store (default: $XDG_CACHE_HOME/distcc-cuda or "
          "~/.cache/distcc-cuda)");
ABSL_FLAG(int, slots, 0, "embedded default's slots (default: the usable cores)");
ABSL_FLAG(bool, watch, false,
          "status: redraw the cluster view in place until Ctrl-C (one view after another "
          "when the output is not a terminal)");
ABSL_FLAG(double, watch_interval_s, 1.0, "status --watch: seconds between views");
ABSL_FLAG(int, watch_frames, 0, "status --watch: stop after this many views (0: never)");
ABSL_FLAG(std::string, log_format, "text",
          "text, or json: one JSON object per log line (--verbose; the embedded coordinator's and "
          "worker's lines with the build, unit, task and worker they concern); the progress "
          "and the summary stay text");
ABSL_FLAG(int, connect_timeout_s, 5, "seconds to wait for the coordinator");
ABSL_FLAG(absl::Duration, reconnect_timeout, absl::Minutes(5),
          "how long a build waits for a coordinator it lost (a restart) before giving up, e.g. "
          "30s or 10m; the build is then submitted again and finished units come from the "
          "result cache (0: give up at once)");
ABSL_FLAG(std::string, split_architectures, "auto",
          "compile a unit's -gencode targets as units of their own and merge their objects: "
          "auto (when it fits the caps or packs better), always, never");
ABSL_FLAG(bool, verbose, false, "log what the embedded coordinator and worker do");
ABSL_FLAG(bool, insecure_no_sandbox, false,
          "embedded default only: compile without the bubblewrap sandbox (where this machine "
          "cannot make one); the build says so");
ABSL_FLAG(std::string, target_gpus, "",
          "the GPUs that will load what you build, e.g. sm_120,sm_100 (default: this machine's, "
          "from nvidia-smi); a build none of whose images one of them can run is warned about "
          "before anything compiles");
ABSL_FLAG(std::string, trace, "",
          "write the build's timeline to this file as Chrome trace-event JSON (open it in "
          "ui.perfetto.dev): a track per worker slot with each unit's queue and compile, its "
          "peak memory, and this machine's scans, uploads and downloads");
ABSL_FLAG(bool, strict_arch, false,
          "refuse to build (instead of warning) when a GPU of --target-gpus cannot load the "
          "build's targets");
ABSL_FLAG(bool, absolute_paths, false,
          "compile every file at its own absolute path on the workers, so that an object's "
          "debug information and nvcc's internal names are those of a local nvcc in your folder; "
          "results are then keyed by where the workspace sits and shared only with builds in "
          "the same folder (also $DISTCC_CUDA_ABSOLUTE_PATHS=1; without either, the workspace is "
          "compiled at /distcc-cuda/workspace and its results serve the same tree in any folder)");
ABSL_FLAG(std::string, tls_ca, "",
          "the cluster's CA certificate (ca.crt); with --tls-cert and --tls-key, talk to "
          "--coordinator over mutual TLS (also tls-ca in the config file's [client] table)");
ABSL_FLAG(std::string, tls_cert, "",
          "your certificate, of role client (`distcc-cuda-coordinator certs issue --role "
          "client NAME`)");
ABSL_FLAG(std::string, tls_key, "", "the private key of --tls-cert");

namespace {

constexpr char kUsage[] =
    "distributed, cached nvcc builds for CUDA kernel sets.\n"
    "Usage:\n"
    "  distcc-cuda build PLAN [--coordinator HOST:PORT] [-o OUT_DIR]\n"
    "      PLAN is a kernel manifest (.toml) or a compile_commands.json\n"
    "      (with --library NAME.so). Without --coordinator the build runs\n"
    "      on this machine through an embedded coordinator and worker.\n"
    "  distcc-cuda build [--coordinator HOST:PORT] -- COMMAND...\n"
    "      runs your own build (pip install, python setup.py build_ext,\n"
    "      cmake --build, ninja, make) with every nvcc compile on the cluster:\n"
    "      sets PYTORCH_NVCC, CMAKE_CUDA_COMPILER_LAUNCHER and MAX_JOBS for it.\n"
    "  distcc-cuda build ... --remote-executor grpc[s]://HOST:PORT [--remote-instance NAME]\n"
    "      either kind of build with every unit compiled on another Remote\n"
    "      Execution API engine (BuildGrid, Buildfarm, NativeLink, BuildBuddy)\n"
    "      as Actions; the plan, memory admission, the retry ladder and the\n"
    "      link stay here (--remote-memory-property, --remote-header,\n"
    "      --remote-jobs, --remote-memory; mutual TLS: --remote-tls-ca,\n"
    "      --remote-tls-cert, --remote-tls-key).\n"
    "  distcc-cuda build --toolkit auto|RELEASE|FOLDER ...\n"
    "      either kind of build with another toolkit: auto is the CUDA release\n"
    "      torch was built with; a release missing here comes from PyPI once.\n"
    "      Without it, `build -- COMMAND` checks the nvcc against torch first.\n"
    "  distcc-cuda toolkit install RELEASE[@sha256:HEX] | list | remove RELEASE\n"
    "      compile toolkits: from the cluster's coordinator when one is named\n"
    "      and serves the release, else from PyPI's NVIDIA wheels (CUDA 13);\n"
    "      @sha256:HEX (or --toolkit-pin) takes the coordinator's toolkit only\n"
    "      with the manifest its operator gave; install prints the folder, a\n"
    "      CUDA_HOME, last.\n"
    "  distcc-cuda [/path/to/]nvcc ARGS...\n"
    "      the launcher: one compile, as nvcc would do it (what cannot go to\n"
    "      the cluster runs nvcc here). DISTCC_CUDA_VERBOSE=1 says where each\n"
    "      compile runs and why; DISTCC_CUDA_FALLBACK=local compiles here when\n"
    "      the cluster cannot be reached.\n"
    "  distcc-cuda status --coordinator HOST:PORT [--watch]\n"
    "      the workers, their memory and slots, what runs and waits, the\n"
    "      last builds; --watch redraws it every --watch-interval-s\n"
    "  distcc-cuda inspect FILE      list the device images of an object or library\n"
    "                                (a cubin of no kernel says so)\n"
    "A coordinator that uses mutual TLS also needs --tls-ca ca.crt\n"
    "--tls-cert NAME.crt --tls-key NAME.key (a client certificate).\n";

int Fail(const absl::Status& status) {
  // Words of a coordinator, a worker or an engine may be in it.
  std::cerr << "distcc-cuda: "
            << distcc_cuda::TerminalSafe(status.message(), /*keep_newlines=*/true, 64 << 10)
            << "\n";
  // 1: the compiler said no (its messages are above); 2: anything else.
  return status.code() == absl::StatusCode::kAborted ? 1 : 2;
}

// Ctrl-C or SIGTERM cancels `cancel`; a second one quits at once. Returns
// the first signal once it came (0 before).
const std::atomic<int>& CancelOnTerminationSignals(distcc_cuda::CancelToken& cancel,
                                                   const char* what) {
  static std::atomic<int> cancelled_by{0};
  distcc_cuda::BlockTerminationSignals();
  std::thread([&cancel, what] {
    int first = distcc_cuda::WaitForTerminationSignal();
    cancelled_by = first;
    std::cerr << "\ndistcc-cuda: " << (first == SIGINT ? "Ctrl-C" : "SIGTERM") << ": cancelling "
              << what << " (Ctrl-C again quits at once)" << std::endl;
    cancel.Cancel(first == SIGINT ? "Ctrl-C" : "SIGTERM");
    int second = distcc_cuda::WaitForTerminationSignal();
    std::cerr << "distcc-cuda: quitting at once" << std::endl;
    _exit(128 + second);
  }).detach();
  return cancelled_by;
}

// --target-gpus, or the GPUs of this machine.
absl::StatusOr<std::vector<distcc_cuda::TargetGpu>> TargetGpus(const std::string& nvcc) {
  const std::string named = absl::GetFlag(FLAGS_target_gpus);
  if (!named.empty()) return distcc_cuda::ParseTargetGpus(named);
  return distcc_cuda::DetectLocalGpus(nvcc);
}

// Every value `--NAME=V` or `--NAME V` (one dash too) has before a "--":
// absl keeps only a flag's last.
std::vector<std::string> EveryValueOf(int argc, char** argv, const std::string& name) {
  std::vector<std::string> values;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    for (const std::string& dashes : {"--", "-"}) {
      const std::string flag = dashes + name;
      if (absl::StartsWith(arg, flag + "=")) {
        values.push_back(arg.substr(flag.size() + 1));
      } else if (arg == flag && i + 1 < argc) {
        values.push_back(argv[++i]);
      } else {
        continue;
      }
      break;
    }
  }
  return values;
}

// Each --remote-header given, in order (main fills it).
std::vector<std::string> remote_headers;

// --remote-executor and the flags that go with it; nullopt without it.
absl::StatusOr<std::optional<distcc_cuda::client::RemoteEngineSettings>> RemoteEngineFlags() {
  const std::string url = absl::GetFlag(FLAGS_remote_executor);
  if (url.empty()) return std::nullopt;
  distcc_cuda::client::RemoteEngineSettings remote;
  ASSIGN_OR_RETURN(remote.address, distcc_cuda::ParseEngineUrl(url, "--remote-executor"));
  remote.instance = absl::GetFlag(FLAGS_remote_instance);
  // Given on the command line, each of them; else the config file's list.
  std::vector<std::string> headers = remote_headers;
  if (headers.empty()) headers = absl::GetFlag(FLAGS_remote_header);
  for (const std::string& header : headers) {
    ASSIGN_OR_RETURN(auto parsed, distcc_cuda::ParseEngineHeader(header));
    remote.headers.push_back(std::move(parsed));
  }
  remote.tls_files = {absl::GetFlag(FLAGS_remote_tls_ca), absl::GetFlag(FLAGS_remote_tls_cert),
                      absl::GetFlag(FLAGS_remote_tls_key)};
  ASSIGN_OR_RETURN(remote.tls, distcc_cuda::LoadEngineTls(remote.tls_files, remote.address));
  ASSIGN_OR_RETURN(remote.memory_property,
                   distcc_cuda::ParseMemoryProperty(absl::GetFlag(FLAGS_remote_memory_property)));
  remote.jobs = absl::GetFlag(FLAGS_remote_jobs);
  if (remote.jobs < 1 || remote.jobs > 4096) {
    return absl::InvalidArgumentError("--remote-jobs must be between 1 and 4096");
  }
  absl::StatusOr<int64_t> memory = distcc_cuda::ParseByteSize(absl::GetFlag(FLAGS_remote_memory));
  if (!memory.ok() || *memory < (int64_t{256} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--remote-memory '", absl::GetFlag(FLAGS_remote_memory),
                     "' is not a size of at least 256MiB (the memory of the engine's largest "
                     "worker, e.g. 64GiB)"));
  }
  remote.memory_bytes = *memory;
  return remote;
}

// --toolkit-dir, else the default.
std::string ToolkitDir(const distcc_cuda::client::ClientEnvironment& environment) {
  const std::string named = absl::GetFlag(FLAGS_toolkit_dir);
  return named.empty() ? distcc_cuda::client::DefaultToolkitDir(environment) : named;
}

// The build's nvcc: --toolkit's, else --nvcc's (or $CUDA_HOME's) checked
// against the CUDA the command's torch needs; its notes are said here.
absl::Status ChooseToolkit(const std::vector<std::string>& command,
                           const distcc_cuda::client::ClientEnvironment& environment,
                           distcc_cuda::client::CommonBuildOptions& options) {
  distcc_cuda::client::ToolkitRequest request;
  request.toolkit = absl::GetFlag(FLAGS_toolkit);
  request.nvcc = distcc_cuda::ResolveNvcc(absl::GetFlag(FLAGS_nvcc), environment.cuda_home);
  request.nvcc_named = !absl::GetFlag(FLAGS_nvcc).empty();
  request.command = command;
  std::error_code no_folder;
  request.working_directory = std::filesystem::current_path(no_folder).string();
  request.toolkit_dir = ToolkitDir(environment);
  request.python = absl::GetFlag(FLAGS_python);
  request.environment = {environment.path, environment.virtual_env};
  ASSIGN_OR_RETURN(distcc_cuda::client::BuildToolkit toolkit,
                   distcc_cuda::client::ChooseBuildToolkit(request, std::cerr));
  for (const std::string& note : toolkit.notes) std::cerr << "distcc-cuda: " << note << "\n";
  options.nvcc_path = toolkit.nvcc;
  options.toolkit_environment = distcc_cuda::client::ToolkitEnvironment(toolkit, environment.path);
  return absl::OkStatus();
}

// What both kinds of build take from the flags and the environment, parsed
// once: the cluster (or the embedded default), the nvcc (ChooseToolkit), the scan's
// environment, the trace and --strict-arch.
absl::StatusOr<distcc_cuda::client::CommonBuildOptions> CommonOptions(
    const std::string& coordinator, absl::Duration connect_timeout,
    const std::optional<distcc_cuda::TlsMaterial>& tls,
    const distcc_cuda::client::ClientEnvironment& environment,
    const std::vector<std::string>& command) {
  distcc_cuda::client::CommonBuildOptions options;
  options.coordinator_address = coordinator;
  options.tls = tls;
  options.connect_timeout = connect_timeout;
  options.state_dir = absl::GetFlag(FLAGS_state_dir);
  if (options.state_dir.empty()) options.state_dir = DefaultStateDir(environment);
  RETURN_IF_ERROR(ChooseToolkit(command, environment, options));
  options.embedded_slots = absl::GetFlag(FLAGS_slots);
  options.embedded_sandbox = !absl::GetFlag(FLAGS_insecure_no_sandbox);
  options.scan_cache = environment.scan_cache;
  options.nvcc_variables = environment.nvcc_variables;
  options.trace_path = absl::GetFlag(FLAGS_trace);
  options.strict_arch = absl::GetFlag(FLAGS_strict_arch);
  options.absolute_paths = absl::GetFlag(FLAGS_absolute_paths) || environment.absolute_paths;
  ASSIGN_OR_RETURN(options.remote, RemoteEngineFlags());
  if (options.remote.has_value() && !coordinator.empty()) {
    return absl::InvalidArgumentError(
        "--remote-executor and --coordinator (or $DISTCC_CUDA_COORDINATOR) name two clusters; "
        "give one");
  }
  return options;
}

// `distcc-cuda status [--watch]`: the cluster as the coordinator at
// `address` sees it, once or refreshed.
int StatusCommand(const std::string& coordinator, absl::Duration connect_timeout,
                  const std::optional<distcc_cuda::TlsMaterial>& tls) {
  const std::string address = coordinator.empty() ? "127.0.0.1:3633" : coordinator;
  if (!absl::GetFlag(FLAGS_watch)) {
    absl::Status status = distcc_cuda::client::RunStatus(address, connect_timeout, std::cout, tls);
    return status.ok() ? 0 : Fail(status);
  }
  distcc_cuda::client::StatusWatchOptions watch;
  double interval = absl::GetFlag(FLAGS_watch_interval_s);
  if (!(interval >= 0.05 && interval <= 3600)) {
    return Fail(
        absl::InvalidArgumentError("--watch-interval-s must be between 0.05 and 3600 seconds"));
  }
  watch.interval = absl::Seconds(interval);
  watch.frames = std::max(0, absl::GetFlag(FLAGS_watch_frames));
  watch.terminal = isatty(STDOUT_FILENO) == 1;
  winsize size;
  if (watch.terminal && ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) {
    watch.width = size.ws_col;
  }
  absl::Status status =
      distcc_cuda::client::RunStatusWatch(address, connect_timeout, watch, std::cout, tls);
  return status.ok() ? 0 : Fail(status);
}

// --split-architectures: auto, always or never.
absl::StatusOr<distcc_cuda::v1::ArchitectureSplit> ArchitectureSplitFlag() {
  const std::string split = absl::GetFlag(FLAGS_split_architectures);
  if (split == "auto") return distcc_cuda::v1::ARCHITECTURE_SPLIT_AUTO;
  if (split == "always") return distcc_cuda::v1::ARCHITECTURE_SPLIT_ALWAYS;
  if (split == "never") return distcc_cuda::v1::ARCHITECTURE_SPLIT_NEVER;
  return absl::InvalidArgumentError(
      absl::StrCat("--split-architectures=", split, " is not one of auto, always, never"));
}

// The host compiler the caller's $CXX (or c++) names, resolved; "" when
// CXX holds a launcher already ("ccache g++") or names no compiler found.
std::string RealCxx(const distcc_cuda::client::ClientEnvironment& environment) {
  const std::string cxx = environment.cxx.empty() ? "c++" : environment.cxx;
  if (cxx.find_first_of(" \t") != std::string::npos || !distcc_cuda::LooksLikeHostCompiler(cxx)) {
    return "";
  }
  absl::StatusOr<std::string> real = distcc_cuda::client::ResolveRealCompiler(cxx, environment);
  return real.ok() ? *real : "";
}

// `distcc-cuda build [FLAGS] -- COMMAND...`: the command's build as one
// session; exits as the command did (or by its signal).
int CommandBuildCommand(const std::vector<std::string>& positional,
                        const distcc_cuda::client::CommonBuildOptions& common,
                        const distcc_cuda::client::ClientEnvironment& environment) {
  distcc_cuda::client::CommandBuildOptions options;
  static_cast<distcc_cuda::client::CommonBuildOptions&>(options) = common;
  options.command.assign(positional.begin() + 2, positional.end());
  // GPUs named on the command line are checked now; this machine's are
  // found beside the build's start (nvidia-smi can take a tenth of a
  // second), before its first compile.
  if (absl::GetFlag(FLAGS_target_gpus).empty()) {
    options.target_gpus =
        std::async(std::launch::async, distcc_cuda::DetectLocalGpus, options.nvcc_path).share();
  } else {
    auto gpus = TargetGpus(options.nvcc_path);
    if (!gpus.ok()) return Fail(gpus.status());
    std::promise<std::vector<distcc_cuda::TargetGpu>> named;
    named.set_value(*gpus);
    options.target_gpus = named.get_future().share();
  }
  options.fallback_local = environment.fallback_local;
  options.real_cxx = RealCxx(environment);
  options.live_terminal = distcc_cuda::client::IsLiveTerminal(STDERR_FILENO, environment.term);
  distcc_cuda::CancelToken cancel;
  const std::atomic<int>& cancelled_by = CancelOnTerminationSignals(cancel, "the build");
  options.cancel = &cancel;
  absl::StatusOr<int> status = distcc_cuda::client::RunCommandBuild(options, std::cerr);
  if (!status.ok()) return Fail(status.status());
  // A Ctrl-C reaches the command and this process at once; the command may
  // end before the signal thread has noted it. Die of it all the same.
  int interrupted = cancelled_by;
  const bool looks_interrupted =
      (WIFSIGNALED(*status) && (WTERMSIG(*status) == SIGINT || WTERMSIG(*status) == SIGTERM)) ||
      (WIFEXITED(*status) &&
       (WEXITSTATUS(*status) == 128 + SIGINT || WEXITSTATUS(*status) == 128 + SIGTERM));
  for (int i = 0; interrupted == 0 && looks_interrupted && i < 50; ++i) {
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGINT)) interrupted = SIGINT;
    if (sigismember(&pending, SIGTERM)) interrupted = SIGTERM;
    if (interrupted == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (interrupted == 0) interrupted = cancelled_by;
  }
  if (interrupted != 0) distcc_cuda::ExitBySignal(interrupted);
  if (WIFSIGNALED(*status)) distcc_cuda::ExitBySignal(WTERMSIG(*status));
  // The build is over and said so; its state is on disk. Returning would
  // shut gRPC down and join its threads first: about 10 ms of every
  // build, measured.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  _exit(WIFEXITED(*status) ? WEXITSTATUS(*status) : 1);
}

// `distcc-cuda build PLAN`: a kernel manifest or compile_commands.json
// built and linked.
int PlanBuildCommand(const std::vector<std::string>& positional,
                     const distcc_cuda::client::CommonBuildOptions& common) {
  distcc_cuda::client::BuildOptions options;
  static_cast<distcc_cuda::client::CommonBuildOptions&>(options) = common;
  options.plan_path = positional[2];
  options.output_dir = absl::GetFlag(FLAGS_o);
  options.library_name = absl::GetFlag(FLAGS_library);
  options.objects_dir = absl::GetFlag(FLAGS_objects_dir);
  options.link_command = absl::GetFlag(FLAGS_link_command);
  auto verify = distcc_cuda::client::ParseVerifySample(absl::GetFlag(FLAGS_verify));
  if (!verify.ok()) return Fail(verify.status());
  options.verify_sample = *verify;
  options.required_nvcc_release = absl::GetFlag(FLAGS_require_nvcc);
  auto gpus = TargetGpus(options.nvcc_path);
  if (!gpus.ok()) return Fail(gpus.status());
  options.target_gpus = *gpus;
  auto split = ArchitectureSplitFlag();
  if (!split.ok()) {
    std::cerr << "distcc-cuda: " << split.status().message() << "\n";
    return 2;
  }
  options.architecture_split = *split;
  options.reconnect_timeout = absl::GetFlag(FLAGS_reconnect_timeout);
  // Ctrl-C or SIGTERM cancels the build (the coordinator stops its units
  // on the workers); a second one quits at once.
  distcc_cuda::CancelToken cancel;
  const std::atomic<int>& cancelled_by = CancelOnTerminationSignals(cancel, "the build");
  options.cancel = &cancel;
  absl::Status status = distcc_cuda::client::RunBuild(options, std::cout);
  if (status.code() == absl::StatusCode::kCancelled && cancelled_by != 0) {
    distcc_cuda::ExitBySignal(cancelled_by);
  }
  return status.ok() ? 0 : Fail(status);
}

// `toolkit install|list|remove ...` (`words` after "toolkit"), with the
// toolkit flags, the coordinator and its TLS material.
int ToolkitCommand(std::vector<std::string> words, const std::string& coordinator,
                   const distcc_cuda::client::ClientEnvironment& environment) {
  distcc_cuda::client::ToolkitCommandOptions options;
  options.words = std::move(words);
  options.toolkit_dir = ToolkitDir(environment);
  options.python = absl::GetFlag(FLAGS_python);
  options.coordinator = coordinator;
  if (!coordinator.empty()) {
    auto tls = distcc_cuda::LoadTlsMaterial(
        {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key)},
        distcc_cuda::PeerRole::kClient);
    if (!tls.ok()) return Fail(tls.status());
    options.tls = *tls;
  }
  if (!absl::GetFlag(FLAGS_toolkit_pin).empty()) {
    auto pins = distcc_cuda::ParseWantedToolkits(absl::GetFlag(FLAGS_toolkit_pin));
    if (!pins.ok()) return Fail(distcc_cuda::Annotate(pins.status(), "--toolkit-pin"));
    options.pins = *pins;
  }
  auto limits = distcc_cuda::ParseToolkitFetchLimits(absl::GetFlag(FLAGS_toolkit_max_size),
                                                     absl::GetFlag(FLAGS_toolkit_stall_timeout),
                                                     absl::GetFlag(FLAGS_toolkit_fetch_timeout));
  if (!limits.ok()) return Fail(limits.status());
  options.limits = *limits;
  absl::Status status = distcc_cuda::client::RunToolkitCommand(options, std::cout, std::cerr);
  return status.ok() ? 0 : Fail(status);
}

}  // namespace

int main(int argc, char** argv) {
  // The environment, read here once; nothing below calls getenv.
  const auto environment = distcc_cuda::client::ClientEnvironment::Of(environ);
  // The launcher: `distcc-cuda nvcc ARGS` (or g++, c++...) takes no flags of
  // its own; every argument is the compiler's.
  if (argc >= 2 && distcc_cuda::client::LooksLikeCompiler(argv[1])) {
    return distcc_cuda::client::RunLauncher(argc, argv, environment);
  }
  // The launcher as $CXX: a link named as the host compiler (`build --`
  // makes one), whose real compiler DISTCC_CUDA_CXX or the link's folder
  // names.
  if (const std::string name = std::filesystem::path(argv[0]).filename().string();
      distcc_cuda::LooksLikeHostCompiler(name)) {
    std::string compiler = distcc_cuda::client::RealCompilerBehind(argv[0], environment);
    std::vector<char*> arguments = {argv[0], compiler.data()};
    arguments.insert(arguments.end(), argv + 1, argv + argc);
    arguments.push_back(nullptr);
    return distcc_cuda::client::RunLauncher(argc + 1, arguments.data(), environment);
  }
  absl::SetProgramUsageMessage(kUsage);
  // `build [FLAGS] -- COMMAND...`: everything after "--" is the command's.
  int dashes = 0;
  for (int i = 1; i < argc && dashes == 0; ++i) {
    if (std::string(argv[i]) == "--") dashes = i;
  }
  remote_headers = EveryValueOf(argc, argv, "remote-header");
  std::vector<std::string> positional = distcc_cuda::ParseFlags(argc, argv, "client");
  if (positional.size() < 2) {
    std::cerr << kUsage;
    return 2;
  }
  std::string command = positional[1];
  spdlog::set_level(absl::GetFlag(FLAGS_verbose) ? spdlog::level::info : spdlog::level::warn);
  if (absl::Status logs = distcc_cuda::UseLogFormat(absl::GetFlag(FLAGS_log_format), "distcc-cuda");
      !logs.ok()) {
    return Fail(logs);
  }
  // Priority: the command line, then $DISTCC_CUDA_COORDINATOR, then the
  // config file (which ParseFlags merged into the flag's value).
  bool on_command_line = std::any_of(argv + 1, argv + argc, [](const char* arg) {
    return absl::StartsWith(arg, "--coordinator") || absl::StartsWith(arg, "-coordinator");
  });
  std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (!on_command_line && !environment.coordinator.empty()) coordinator = environment.coordinator;
  absl::Duration connect_timeout = absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s));
  if (command == "inspect" && positional.size() == 3) {
    absl::Status status = distcc_cuda::client::RunInspect(positional[2], std::cout);
    return status.ok() ? 0 : Fail(status);
  }
  if (command == "toolkit" && positional.size() >= 3) {
    return ToolkitCommand({positional.begin() + 2, positional.end()}, coordinator, environment);
  }
  auto tls = distcc_cuda::LoadTlsMaterial(
      {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key)},
      distcc_cuda::PeerRole::kClient);
  if (!tls.ok()) return Fail(tls.status());
  if (command == "status" && positional.size() == 2) {
    return StatusCommand(coordinator, connect_timeout, *tls);
  }
  if (command == "build" && dashes > 0 && positional.size() < 3) {
    std::cerr << "distcc-cuda: build -- needs a command after \"--\", e.g. distcc-cuda build "
                 "-- pip install --no-build-isolation .\n";
    return 2;
  }
  if (command == "build" && (dashes > 0 || positional.size() == 3)) {
    const std::vector<std::string> build_command =
        dashes > 0 ? std::vector<std::string>(positional.begin() + 2, positional.end())
                   : std::vector<std::string>();
    auto common = CommonOptions(coordinator, connect_timeout, *tls, environment, build_command);
    if (!common.ok()) return Fail(common.status());
    return dashes > 0 ? CommandBuildCommand(positional, *common, environment)
                      : PlanBuildCommand(positional, *common);
  }
  std::cerr << kUsage;
  return 2;
}
