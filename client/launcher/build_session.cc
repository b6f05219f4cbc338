// SPDX-License-Identifier: Apache-2.0
#include "client/launcher/build_session.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/cluster/embedded_cluster.h"
#include "client/launcher/launcher.h"
#include "client/launcher/remote_compile.h"
#include "client/scan/scan_cache.h"
#include "client/text/coordinator_text.h"
#include "client/text/prediction_report.h"
#include "client/text/progress.h"
#include "client/text/trace.h"
#include "common/base/byte_size.h"
#include "common/base/cancellation.h"
#include "common/base/files.h"
#include "common/base/host_resources.h"
#include "common/base/status.h"
#include "common/store/digest.h"
#include "distcc_cuda/v1/build.grpc.pb.h"
#include "distcc_cuda/v1/launcher.grpc.pb.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

// What the session saw, for its progress lines and its summary.
struct SessionTally {
  int remote = 0;                   // compiled on a worker
  int cached = 0;                   // from the result cache
  int failed = 0;                   // nvcc said no on a worker
  int errors = 0;                   // the cluster could not compile it
  int running = 0;                  // on the cluster now
  std::map<std::string, int> here;  // ran here, by reason
  std::map<std::string, int> per_worker;
  int64_t largest_peak = 0;
  std::string largest_name;
  PredictionReport predictions;
  int scans_cached = 0;  // includes from the scan cache: no nvcc -M ran
  std::string toolchain;
  std::map<std::string, int> workspaces;  // units by the workspace they were in
  OutsideFiles outside;                   // what they read outside it (the most per folder)
  InputRoots input_roots;                 // where else the workers saw what they read
};

// Serves the launcher calls of one command.
class Session final : public v1::LauncherSession::Service {
 public:
  // `machine_slots`: the embedded default's (null on a cluster): what the
  // command compiles or links here holds one while it runs.
  Session(RemoteCompiler& compiler, std::string nvcc, std::shared_ptr<MachineSlots> machine_slots,
          ArchCheck& arch, BuildTrace& trace, const CancelToken* cancel, bool fallback_local,
          ProgressDisplay& display)
      : compiler_(compiler),
        nvcc_(std::move(nvcc)),
        machine_slots_(std::move(machine_slots)),
        arch_(arch),
        trace_(trace),
        cancel_(cancel),
        fallback_local_(fallback_local),
        display_(display) {}

  grpc::Status Compile(grpc::ServerContext* context, const v1::LauncherCompileRequest* request,
                       v1::LauncherCompileReply* reply) override {
    LauncherCall call;
    call.compiler = request->nvcc();
    call.host_compiler = request->host_compiler();
    if (call.host_compiler) call.toolchain_nvcc = nvcc_;
    call.arguments.assign(request->arguments().begin(), request->arguments().end());
    call.working_directory = request->working_directory();
    if (!fs::path(call.working_directory).is_absolute() || !fs::path(call.compiler).is_absolute()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "the launcher must send an absolute folder and compiler");
    }
    LauncherDecision decision = DecideWhereToCompile(call.arguments, call.host_compiler);
    if (decision.remote && !call.host_compiler) {
      // Targets no GPU that loads the result can run: said at first sight.
      absl::StatusOr<std::vector<std::string>> warnings = arch_.Check(decision.plan.flags);
      absl::MutexLock lock(&mu_);
      if (!warnings.ok()) {
        ++tally_.errors;
        display_.Print(absl::StrCat("distcc-cuda: error  ", decision.plan.name, ": ",
                                    warnings.status().message(), "\n"));
        reply->set_exit_code(2);
        reply->set_stderr_text(absl::StrCat("distcc-cuda: ", decision.plan.source, ": ",
                                            warnings.status().message(), "\n"));
        return grpc::Status::OK;
      }
      for (const std::string& warning : *warnings) {
        display_.Print(absl::StrCat("distcc-cuda: warning: ", warning, "\n"));
      }
    }
    if (decision.remote) {
      absl::MutexLock lock(&mu_);
      ++tally_.running;
    }
    // The call's own cancel: the session's (Ctrl-C), or its launcher gone.
    CancelToken token;
    absl::Notification done;
    std::thread watch([&] {
      while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
        if (context->IsCancelled()) {
          token.Cancel("the build tool stopped this compile");
          return;
        }
        if (cancel_ != nullptr && cancel_->cancelled()) {
          token.Cancel(cancel_->reason());
          return;
        }
      }
    });
    LauncherOutcome outcome = CompileOrRunHere(compiler_, call, decision, &token, fallback_local_);
    done.Notify();
    watch.join();
    Record(decision, outcome);
    *reply = std::move(outcome.reply);
    // Compiles and links run here hold a slot of this machine; queries
    // (-v, --version) do not wait for one.
    const bool makes_a_file =
        std::find(call.arguments.begin(), call.arguments.end(), "-o") != call.arguments.end();
    reply->set_hold_machine_slot(reply->run_locally() && machine_slots_ != nullptr && makes_a_file);
    return grpc::Status::OK;
  }

  grpc::Status HoldMachineSlot(grpc::ServerContext* context, const v1::HoldMachineSlotRequest*,
                               grpc::ServerWriter<v1::HoldMachineSlotReply>* writer) override {
    if (machine_slots_ == nullptr) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no slots to hold on a cluster");
    }
    auto gone = [&] { return context->IsCancelled() || (cancel_ && cancel_->cancelled()); };
    std::optional<MachineSlots::Held> held = machine_slots_->Acquire(gone);
    if (!held.has_value()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    if (!writer->Write(v1::HoldMachineSlotReply())) return grpc::Status::OK;
    // Held while the launcher's compiler runs; it ends the call then.
    for (absl::Time until = absl::Now() + absl::Hours(24); !gone() && absl::Now() < until;) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    return grpc::Status::OK;
  }

  SessionTally tally() {
    absl::MutexLock lock(&mu_);
    return tally_;
  }

 private:
  void Record(const LauncherDecision& decision, const LauncherOutcome& outcome) {
    absl::MutexLock lock(&mu_);
    if (decision.remote) --tally_.running;
    if (outcome.reply.run_locally()) {
      ++tally_.here[outcome.reply.reason()];
      display_.Print(
          absl::StrCat("distcc-cuda: here   ", decision.what, ": ", outcome.reply.reason(), "\n"));
      return;
    }
    if (!outcome.remote) {
      ++tally_.errors;
      display_.Print(absl::StrCat("distcc-cuda: error  ", decision.plan.name, ": ",
                                  outcome.cluster_error, "\n"));
      return;
    }
    const RemoteCompileResult& result = *outcome.remote;
    const std::string& name = decision.plan.name;
    const std::string exit_label =
        decision.plan.host_compiler ? "host compiler exit code" : "nvcc exit code";
    trace_.Add("this machine", name, "scan", result.asked, result.scanned);
    trace_.Add("this machine", name, "upload", result.scanned, result.uploaded);
    trace_.Add("coordinator queue", name, "queue", result.uploaded,
               result.cached ? result.finished : result.started);
    trace_.Add("worker " + result.worker, name, "compile", result.started, result.finished,
               {{"peak memory", FormatByteSize(result.peak_bytes)},
                {"predicted peak", FormatByteSize(result.predicted_bytes)},
                {"nvcc wall time", absl::StrFormat("%.1f s", result.wall_ms / 1000.0)},
                {exit_label, std::to_string(result.exit_code)}});
    trace_.Add("this machine", name, result.cached ? "download (cached)" : "download",
               result.finished, result.downloaded);
    tally_.toolchain = result.toolchain;
    ++tally_.workspaces[result.workspace];
    MergeOutsideFiles(result.outside, tally_.outside);
    tally_.input_roots.insert(result.input_roots.begin(), result.input_roots.end());
    if (result.scan_cached) ++tally_.scans_cached;
    if (result.cached) {
      ++tally_.cached;
    } else {
      ++tally_.remote;
      ++tally_.per_worker[result.worker];
      // A compile that failed stopped early: its peak says nothing of the unit's.
      if (result.exit_code == 0) {
        tally_.predictions.Add(result.peak_bytes, result.predicted_bytes, result.prediction_source);
      }
      if (result.peak_bytes > tally_.largest_peak) {
        tally_.largest_peak = result.peak_bytes;
        tally_.largest_name = decision.plan.name;
      }
    }
    if (result.exit_code != 0) ++tally_.failed;
    int done = tally_.remote + tally_.cached;
    display_.Print(absl::StrCat(
        absl::StrFormat(
            "distcc-cuda: [%d done, %d on the cluster] %-40s %s", done, tally_.running,
            decision.plan.name,
            result.cached
                ? std::string("cached")
                : absl::StrFormat("%-10s %5.1f s  peak %s (predicted %s)%s", result.worker,
                                  result.wall_ms / 1000.0, FormatByteSize(result.peak_bytes),
                                  FormatByteSize(result.predicted_bytes),
                                  result.exit_code != 0
                                      ? absl::StrCat("  ", exit_label, " ", result.exit_code)
                                      : "")),
        "\n"));
  }

  RemoteCompiler& compiler_;
  const std::string nvcc_;  // the build's nvcc: the toolchain of its host compiles too
  const std::shared_ptr<MachineSlots> machine_slots_;  // may be null
  ArchCheck& arch_;
  BuildTrace& trace_;
  const CancelToken* cancel_;
  bool fallback_local_;
  ProgressDisplay& display_;
  absl::Mutex mu_;
  SessionTally tally_ ABSL_GUARDED_BY(mu_);
};

std::string RandomId() {
  std::random_device random;
  return absl::StrFormat("%08x%08x", random(), random());
}

// The total slots of the workers the coordinator knows; 0 if it cannot say.
int ClusterSlots(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ClusterStatus status;
  if (!v1::BuildService::NewStub(channel)->GetClusterStatus(&context, {}, &status).ok()) return 0;
  int slots = 0;
  for (const v1::WorkerStatus& worker : status.workers()) slots += worker.slots();
  return slots;
}

// Starts the command with `environment` added; its stdin is ours, and so are
// its stdout and stderr unless `out_fd` / `err_fd` name others. The child
// gets the signals this process blocks (Ctrl-C) back.
absl::StatusOr<pid_t> StartCommand(
    const std::vector<std::string>& command,
    const std::vector<std::pair<std::string, std::string>>& environment, int out_fd, int err_fd) {
  std::vector<char*> argv;
  for (const std::string& word : command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork failed: ", strerror(errno)));
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    for (const auto& [name, value] : environment) setenv(name.c_str(), value.c_str(), 1);
    execvp(argv[0], argv.data());
    int error = errno;
    (void)!write(ready[1], &error, sizeof(error));
    _exit(127);
  }
  close(ready[1]);
  int error = 0;
  ssize_t got = read(ready[0], &error, sizeof(error));
  close(ready[0]);
  if (got == sizeof(error)) {
    waitpid(pid, nullptr, 0);
    return absl::NotFoundError(absl::StrCat("cannot run ", command[0], ": ", strerror(error)));
  }
  return pid;
}

// Copies what the command writes to `fd` through `display`, whole lines at
// a time, until the pipe closes or, once `ended`, stays quiet for 100 ms (a
// grandchild that keeps it open does not hold the build).
void ForwardLines(int fd, ProgressDisplay& display, bool to_stdout,
                  const absl::Notification& ended) {
  std::string pending;
  char buffer[64 * 1024];
  auto emit = [&](const std::string& text) {
    if (to_stdout) {
      display.PrintOut(text);
    } else {
      display.Print(text);
    }
  };
  for (;;) {
    pollfd ready{fd, POLLIN, 0};
    int polled = poll(&ready, 1, 100);
    if (polled > 0) {
      ssize_t got = read(fd, buffer, sizeof(buffer));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      pending.append(buffer, static_cast<size_t>(got));
      size_t last = pending.rfind('\n');
      if (last != std::string::npos) {
        emit(pending.substr(0, last + 1));
        pending.erase(0, last + 1);
      }
      continue;
    }
    if (polled < 0 && errno != EINTR) break;
    if (ended.HasBeenNotified()) break;
  }
  if (!pending.empty()) emit(pending + "\n");
  close(fd);
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("was killed by signal ", WTERMSIG(status));
  return "ended";
}

// The folder of a session's socket, which only this user can open;
// removed with what it holds.
struct SessionFolder {
  std::string path;
  ~SessionFolder() {
    std::error_code ignored;
    if (!path.empty()) fs::remove_all(path, ignored);
  }
};

absl::Status MakeSessionFolder(SessionFolder& folder) {
  std::string path = absl::StrCat(fs::temp_directory_path().string(), "/distcc-cuda-XXXXXX");
  if (mkdtemp(path.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot make a folder for the session under ",
                                            fs::temp_directory_path().string(), ": ",
                                            strerror(errno)));
  }
  folder.path = path;
  return absl::OkStatus();
}

// A link to the launcher `self` named as the host compiler `real_cxx`
// (STATE_DIR/compilers/HASH/g++-12, beside a file `real` naming it), or ""
// without one. It outlives the session: CMake keeps CXX in a build folder's
// cache, and the link still runs the real compiler after the session.
absl::StatusOr<std::string> MakeCxxLauncher(const std::string& state_dir, const std::string& self,
                                            const std::string& real_cxx) {
  if (real_cxx.empty() || !fs::path(self).is_absolute()) return std::string();
  const std::string folder =
      absl::StrCat(state_dir, "/compilers/", DigestOf(real_cxx).hash.substr(0, 16));
  const std::string link = absl::StrCat(folder, "/", fs::path(real_cxx).filename().string());
  RETURN_IF_ERROR(MakeDirectories(folder));
  RETURN_IF_ERROR(WriteFileAtomically(folder + "/" + kRealCompilerFile, real_cxx + "\n"));
  std::error_code error;
  if (fs::read_symlink(link, error) == fs::path(self)) return link;
  // Replaced whole, should a build of another session run it meanwhile.
  const std::string fresh = absl::StrCat(link, ".new-", getpid());
  fs::remove(fresh, error);
  fs::create_symlink(self, fresh, error);
  if (!error) fs::rename(fresh, link, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot make the launcher's link ", link, ": ", error.message()));
  }
  return link;
}

// Starts the command (StartCommand); on a live terminal its output comes
// through `display`, above the status line, copied by `forwarders` until
// the pipes close or `ended`.
absl::StatusOr<pid_t> StartShownCommand(
    const std::vector<std::string>& command,
    const std::vector<std::pair<std::string, std::string>>& environment, ProgressDisplay& display,
    const absl::Notification& ended, std::vector<std::thread>& forwarders) {
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (display.live() && (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)) {
    return absl::InternalError(absl::StrCat("pipe2 failed: ", strerror(errno)));
  }
  absl::StatusOr<pid_t> child = StartCommand(command, environment, out_pipe[1], err_pipe[1]);
  for (int fd : {out_pipe[1], err_pipe[1]}) {
    if (fd >= 0) close(fd);
  }
  if (!child.ok()) {
    for (int fd : {out_pipe[0], err_pipe[0]}) {
      if (fd >= 0) close(fd);
    }
    return child.status();
  }
  if (display.live()) {
    forwarders.emplace_back(ForwardLines, out_pipe[0], std::ref(display), true, std::cref(ended));
    forwarders.emplace_back(ForwardLines, err_pipe[0], std::ref(display), false, std::cref(ended));
  }
  return child;
}

// The status line, from the coordinator's view of the cluster, each second
// until `ended`; nothing unless the display is live.
void ShowClusterStatus(const std::shared_ptr<grpc::Channel>& channel, Session& session,
                       ProgressDisplay& display, const absl::Notification& ended,
                       absl::Time start) {
  if (!display.live()) return;
  auto stub = v1::BuildService::NewStub(channel);
  while (!ended.WaitForNotificationWithTimeout(absl::Seconds(1))) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::ClusterStatus cluster;
    if (!stub->GetClusterStatus(&context, {}, &cluster).ok()) continue;
    MakePrintable(cluster);
    SessionTally now = session.tally();
    display.SetStatus(StatusLine(now.remote + now.cached, absl::Now() - start, cluster));
  }
}

// The summary at the end of a session: how the command ended, where its
// compiles ran, the memory they took, the trace.
void PrintSessionSummary(const CommandBuildOptions& options, int status, absl::Duration took,
                         const SessionTally& tally, BuildTrace& trace, std::ostream& out) {
  int here = 0;
  std::vector<std::string> reasons;
  for (const auto& [reason, count] : tally.here) {
    here += count;
    reasons.push_back(absl::StrCat(count, " × ", reason));
  }
  std::vector<std::string> workers;
  for (const auto& [worker, count] : tally.per_worker) {
    workers.push_back(absl::StrCat(worker, ": ", count));
  }
  out << "\ndistcc-cuda: `" << absl::StrJoin(options.command, " ") << "` "
      << DescribeWaitStatus(status) << " after " << Seconds(took) << "\n";
  out << absl::StrFormat("  units     %d on the cluster (%d compiled, %d cached, %d failed)\n",
                         tally.remote + tally.cached, tally.remote, tally.cached, tally.failed);
  if (tally.scans_cached > 0) {
    out << "  scans     " << tally.scans_cached
        << " include scans unchanged since the last build, from the scan cache\n";
  }
  if (here > 0)
    out << "  here      " << here
        << " calls ran their compiler here: " << absl::StrJoin(reasons, "; ") << "\n";
  if (tally.errors > 0) {
    out << "  errors    " << tally.errors
        << " compiles could not run on the cluster (their messages are above)\n";
  }
  out << "  workers   " << tally.per_worker.size()
      << (workers.empty() ? "" : absl::StrCat(" (", absl::StrJoin(workers, ", "), ")")) << "\n";
  if (tally.remote > 0) {
    out << "  memory    largest peak " << FormatByteSize(tally.largest_peak) << " ("
        << tally.largest_name << "); " << tally.predictions.Describe() << "\n";
  }
  if (!tally.toolchain.empty()) out << "  toolchain " << tally.toolchain << "\n";
  if (!tally.workspaces.empty()) {
    out << "  "
        << DescribeWorkspaces(tally.workspaces, tally.input_roots, tally.outside,
                              options.absolute_paths)
        << "\n";
  }
  if (!options.trace_path.empty()) {
    absl::Status written = trace.Write(options.trace_path);
    out << "  trace     "
        << (written.ok() ? options.trace_path + " (open it in ui.perfetto.dev)"
                         : std::string(written.message()))
        << "\n";
  }
}

}  // namespace

int MaxJobsFor(int cluster_slots) { return std::clamp(4 * cluster_slots, 16, 512); }

std::vector<std::pair<std::string, std::string>> SessionEnvironment(
    const std::string& self, const std::string& nvcc, const std::string& cxx_launcher,
    const std::string& real_cxx, const std::string& session_address, const std::string& build_id,
    int max_jobs) {
  std::vector<std::pair<std::string, std::string>> environment = {
      {"DISTCC_CUDA_SESSION", session_address},        {"DISTCC_CUDA_BUILD_ID", build_id},
      {"PYTORCH_NVCC", absl::StrCat(self, " ", nvcc)}, {"CMAKE_CUDA_COMPILER_LAUNCHER", self},
      {"CMAKE_CXX_COMPILER_LAUNCHER", self},           {"MAX_JOBS", std::to_string(max_jobs)}};
  if (!cxx_launcher.empty()) {
    environment.emplace_back("CXX", cxx_launcher);
    environment.emplace_back("DISTCC_CUDA_CXX", real_cxx);
  }
  return environment;
}

absl::StatusOr<int> RunCommandBuild(const CommandBuildOptions& options, std::ostream& out) {
  absl::Time start = absl::Now();
  if (options.command.empty()) {
    return absl::InvalidArgumentError(
        "distcc-cuda build -- needs a command, e.g. distcc-cuda build -- pip install "
        "--no-build-isolation .");
  }
  ClusterSettings settings = options;
  settings.worker_in_background = true;
  ASSIGN_OR_RETURN(ClusterConnection cluster, ConnectToCluster(settings, out));
  std::unique_ptr<EmbeddedCluster>& embedded = cluster.embedded;
  const std::string& address = cluster.address;
  std::shared_ptr<grpc::Channel>& channel = cluster.channel;
  const int slots = embedded != nullptr ? embedded->slots() : ClusterSlots(channel);

  // The session's socket, in a folder only this user can open.
  SessionFolder folder;
  RETURN_IF_ERROR(MakeSessionFolder(folder));
  const std::string session_address = "unix:" + folder.path + "/session";
  const std::string self = LauncherPath().empty() ? "distcc-cuda" : LauncherPath();
  ASSIGN_OR_RETURN(const std::string cxx_launcher,
                   MakeCxxLauncher(options.state_dir, self, options.real_cxx));

  RemoteCompiler compiler(channel, address, UsableCores(),
                          ScanCache::FolderFor(options.state_dir, options.scan_cache),
                          options.nvcc_variables, options.state_dir);
  ArchCheck arch(options.target_gpus, options.strict_arch);
  BuildTrace trace;
  // On a terminal, one status line at the bottom; the command's output then
  // comes through here, above it.
  ProgressDisplay display(out, std::cout, options.live_terminal);
  // The build's cancel: the caller's (Ctrl-C), or the embedded worker
  // failing to start, after the command has.
  CancelToken cancel;
  CancelWatch forward_cancel(options.cancel, [&] { cancel.Cancel(options.cancel->reason()); });
  std::shared_ptr<MachineSlots> machine_slots =
      embedded != nullptr ? embedded->machine_slots() : nullptr;
  compiler.ShareMachineSlots(machine_slots);
  std::error_code no_folder;
  compiler.SetLayoutSettings({options.absolute_paths, fs::current_path(no_folder).string()});
  Session session(compiler, options.nvcc_path, machine_slots, arch, trace, &cancel,
                  options.fallback_local, display);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(session_address, grpc::InsecureServerCredentials());
  builder.RegisterService(&session);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    return absl::InternalError(absl::StrCat("cannot listen on ", session_address));
  }

  const std::string build_id = RandomId();
  const int max_jobs = MaxJobsFor(slots);
  out << "distcc-cuda: build " << build_id << ": running `" << absl::StrJoin(options.command, " ")
      << "` with the launcher (PYTORCH_NVCC, CXX, CMAKE_CUDA_COMPILER_LAUNCHER, "
         "CMAKE_CXX_COMPILER_LAUNCHER; MAX_JOBS="
      << max_jobs << " so that the cluster's " << slots
      << " slots and memory admission decide what runs)\n"
      << std::flush;
  absl::Notification child_ended;
  std::vector<std::thread> forwarders;
  std::vector<std::pair<std::string, std::string>> environment = SessionEnvironment(
      self, options.nvcc_path, cxx_launcher, options.real_cxx, session_address, build_id, max_jobs);
  environment.insert(environment.end(), options.toolkit_environment.begin(),
                     options.toolkit_environment.end());
  absl::StatusOr<pid_t> child =
      StartShownCommand(options.command, environment, display, child_ended, forwarders);
  if (!child.ok()) {
    server->Shutdown();
    return child.status();
  }
  // The status line, from the coordinator's view of the cluster, each second.
  std::thread status_line(ShowClusterStatus, std::cref(channel), std::ref(session),
                          std::ref(display), std::cref(child_ended), start);
  // A cancel (Ctrl-C reached the command too; SIGTERM only us) stops it;
  // the watch ends at once when the command does.
  std::optional<CancelWatch> stop;
  stop.emplace(&cancel, [&] { kill(*child, SIGTERM); });
  absl::Status worker_started;
  std::thread worker_watch([&] {
    if (embedded == nullptr) return;
    worker_started = embedded->WorkerStarted();
    if (!worker_started.ok()) {
      cancel.Cancel(
          absl::StrCat("this machine's worker could not start: ", worker_started.message()));
    }
  });
  int status = 0;
  while (waitpid(*child, &status, 0) < 0 && errno == EINTR) {
  }
  stop.reset();
  worker_watch.join();
  child_ended.Notify();
  status_line.join();
  for (std::thread& forwarder : forwarders) forwarder.join();
  display.Finish();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  // As when the worker started before the command: the build fails, saying
  // why (a sandbox that cannot run here, and what to do).
  if (!worker_started.ok()) {
    return absl::Status(worker_started.code(),
                        absl::StrCat("this machine's worker could not start, so `",
                                     absl::StrJoin(options.command, " "),
                                     "` was stopped: ", worker_started.message()));
  }

  ScanCache(ScanCache::FolderFor(options.state_dir, options.scan_cache), "", {})
      .Trim(kScanCacheBytes);
  PrintSessionSummary(options, status, absl::Now() - start, session.tally(), trace, out);
  out << std::flush;
  return status;
}

}  // namespace distcc_cuda::client
