// SPDX-License-Identifier: Apache-2.0
#include "common/process/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/base/cancellation.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/process/process_child.h"

// Before 2.25 glibc's clone() wrote the child's ids into the thread-local
// data it shares with the caller under CLONE_VM.
#if defined(__GLIBC__) && !__GLIBC_PREREQ(2, 25)
#error "distcc-cuda needs glibc 2.25 or later (clone with CLONE_VM)"
#endif

extern char** environ;

namespace distcc_cuda {
namespace {

using process_child::ChildFailure;
using process_child::ChildMain;
using process_child::ChildPlan;
using process_child::ChildStage;
using process_child::PlannedBind;
using process_child::PlannedWrite;

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
// The child's stack between clone and exec: it makes a few system calls.
constexpr size_t kChildStackBytes = 256 << 10;

// Once the program has exited and its group is killed, the pipes reach EOF at
// once unless a descendant left the group (setsid) and kept them; its output
// is waited for this long at most.
constexpr absl::Duration kDrainAfterExit = absl::Seconds(2);
// Without a pidfd (kernel < 5.3, or a seccomp profile that refuses it) the
// program is checked for having exited this often.
constexpr absl::Duration kExitPollInterval = absl::Milliseconds(10);
// Without close_range (kernel < 5.11) descriptors up to this bound are marked
// close-on-exec one by one.
constexpr int kMaxFdWithoutCloseRange = 1 << 16;
constexpr size_t kReadChunkBytes = 64 << 10;

// An owned file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    Reset(other.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() { return std::exchange(fd_, -1); }
  // close() is not retried on EINTR: Linux releases the descriptor anyway, and
  // a retry could close one that another thread has just been given.
  void Reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

struct FdPair {
  UniqueFd parent_end;
  UniqueFd child_end;
};

absl::StatusCode StartErrorCode(int error) {
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::StatusCode::kNotFound;
    case EACCES:
    case EPERM:
      return absl::StatusCode::kPermissionDenied;
    case ENOEXEC:
    case EISDIR:
    case ELOOP:
    case ETXTBSY:
    case ENAMETOOLONG:
    case ELIBBAD:
      return absl::StatusCode::kFailedPrecondition;
    case EAGAIN:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return absl::StatusCode::kResourceExhausted;
    case E2BIG:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

// "what: strerror(error)" with the code that `error` means when starting a
// program.
absl::Status StartError(int error, absl::string_view what) {
  return absl::Status(StartErrorCode(error), absl::ErrnoToStatus(error, what).message());
}

// Every descriptor is created close-on-exec, atomically: another thread may
// fork at any moment, and a pipe end leaking into its child would hold our
// pipes open (no EOF) until that child exits.
absl::StatusOr<FdPair> MakePipe(bool parent_reads) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return StartError(errno, "cannot create a pipe for a child process");
  }
  FdPair pair;
  pair.parent_end = UniqueFd(fds[parent_reads ? 0 : 1]);
  pair.child_end = UniqueFd(fds[parent_reads ? 1 : 0]);
  return pair;
}

// The child's environment, by name.
absl::StatusOr<std::map<std::string, std::string>> BuildEnvironment(const ProcessSpec& spec) {
  std::map<std::string, std::string> merged;
  if (spec.inherit_environment && environ != nullptr) {
    for (char** entry = environ; *entry != nullptr; ++entry) {
      absl::string_view text(*entry);
      size_t equals = text.find('=');
      if (equals == absl::string_view::npos || equals == 0) continue;
      // emplace keeps the first of duplicate names, the one getenv() sees.
      merged.emplace(text.substr(0, equals), text.substr(equals + 1));
    }
  }
  for (const auto& [name, value] : spec.environment) {
    if (name.empty() || name.find('=') != std::string::npos ||
        name.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable name '", name,
                       "' is empty or contains '=' or NUL; pass names without them"));
    }
    if (value.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("value of environment variable ", name, " contains a NUL byte"));
    }
    merged[name] = value;
  }
  return merged;
}

// Kills what is left of the process group that `pid` leads. Called only
// while `pid` is not yet reaped, so the group id cannot have been reused.
void KillGroup(pid_t pid) { kill(-pid, SIGKILL); }

// Whether `pid` has exited, without reaping it.
bool HasExited(pid_t pid) {
  siginfo_t info;
  memset(&info, 0, sizeof(info));
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno != EINTR) return true;  // ECHILD: nothing left to wait for
  }
  return info.si_pid == pid;
}

int ToPollTimeoutMs(absl::Duration wait) {
  if (wait == absl::InfiniteDuration()) return -1;
  if (wait <= absl::ZeroDuration()) return 0;
  int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(wait, absl::Milliseconds(1)));
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

// One captured output stream.
struct Capture {
  UniqueFd fd;
  std::string* text;
};

// Reads what `capture` has available, keeping at most `limit` bytes in total,
// and returns how many bytes it read. Closes the stream at EOF or on an error.
size_t ReadAvailable(Capture& capture, size_t limit, char* buffer, bool& truncated) {
  ssize_t got = read(capture.fd.get(), buffer, kReadChunkBytes);
  if (got < 0) {
    if (errno != EINTR && errno != EAGAIN) capture.fd.Reset();
    return 0;
  }
  if (got == 0) {
    capture.fd.Reset();
    return 0;
  }
  size_t room = limit > capture.text->size() ? limit - capture.text->size() : 0;
  size_t keep = std::min(room, static_cast<size_t>(got));
  capture.text->append(buffer, keep);
  if (keep < static_cast<size_t>(got)) truncated = true;
  return static_cast<size_t>(got);
}

// Reaps `pid`, which has exited, and returns its status and resource usage.
absl::Status Reap(pid_t pid, int& status, struct rusage& usage) {
  while (wait4(pid, &status, 0, &usage) < 0) {
    if (errno == EINTR) continue;
    return absl::InternalError(absl::StrCat(
        absl::ErrnoToStatus(errno, absl::StrCat("cannot wait for child ", pid)).message(),
        "; is SIGCHLD ignored in this process?"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ResolveProgram(const std::string& program,
                                           const std::map<std::string, std::string>& environment,
                                           const std::string& working_directory) {
  if (program.find('/') != std::string::npos) return program;
  auto path_entry = environment.find("PATH");
  std::string search_path = path_entry == environment.end() ? "/bin:/usr/bin" : path_entry->second;
  bool found_not_executable = false;
  for (absl::string_view dir : absl::StrSplit(search_path, ':')) {
    // An empty PATH entry means the current directory.
    std::string candidate = absl::StrCat(dir.empty() ? absl::string_view(".") : dir, "/", program);
    std::string on_disk = candidate;
    if (candidate[0] != '/' && !working_directory.empty()) {
      on_disk = absl::StrCat(working_directory, "/", candidate);
    }
    struct stat info;
    if (stat(on_disk.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) continue;
    if (access(on_disk.c_str(), X_OK) != 0) {
      found_not_executable = true;
      continue;
    }
    return candidate;
  }
  if (found_not_executable) {
    return absl::PermissionDeniedError(absl::StrCat("program '", program, "' is in PATH '",
                                                    search_path,
                                                    "' but not executable; check its permissions"));
  }
  return absl::NotFoundError(absl::StrCat("program '", program, "' not found in PATH '",
                                          search_path, "'; install it or give its path"));
}

namespace {

// INVALID_ARGUMENT for what no program can be started with.
absl::Status CheckSpec(const ProcessSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return absl::InvalidArgumentError(
        "cannot run a process with an empty argv; argv[0] names the program");
  }
  for (const std::string& arg : spec.argv) {
    if (arg.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("an argument of '", spec.argv[0].c_str(), "' contains a NUL byte"));
    }
  }
  if (spec.working_directory.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("working directory contains a NUL byte");
  }
  if (spec.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("timeout for '", spec.argv[0],
                                                   "' must be positive, not ",
                                                   absl::FormatDuration(spec.timeout)));
  }
  return absl::OkStatus();
}

// Everything the child reads between clone and exec, made beforehand (it
// may not allocate) and kept alive until it has executed: the plan points
// into it. Not movable.
struct Launch {
  Launch() = default;
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  std::string exec_path;
  std::vector<std::string> env_entries;
  std::vector<char*> envp;
  std::vector<char*> argv;
  std::vector<PlannedWrite> writes;
  std::vector<PlannedBind> binds;
  UniqueFd dev_null;
  FdPair out;
  FdPair err;
  UniqueFd parent_pidfd;
  ChildFailure failure;
  ChildPlan plan;
};

// The program resolved, its environment, arguments and descriptors, and the
// child's plan.
absl::StatusOr<std::unique_ptr<Launch>> PrepareLaunch(const ProcessSpec& spec) {
  auto launch = std::make_unique<Launch>();
  ASSIGN_OR_RETURN(auto environment, BuildEnvironment(spec));
  ASSIGN_OR_RETURN(launch->exec_path,
                   ResolveProgram(spec.argv[0], environment, spec.working_directory));
  launch->env_entries.reserve(environment.size());
  for (const auto& [name, value] : environment) {
    launch->env_entries.push_back(absl::StrCat(name, "=", value));
  }
  for (std::string& entry : launch->env_entries) launch->envp.push_back(entry.data());
  launch->envp.push_back(nullptr);
  for (const std::string& arg : spec.argv) launch->argv.push_back(const_cast<char*>(arg.c_str()));
  launch->argv.push_back(nullptr);
  launch->dev_null.Reset(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!launch->dev_null.valid()) {
    return StartError(errno, "cannot open /dev/null for a child's stdin");
  }
  ASSIGN_OR_RETURN(launch->out, MakePipe(/*parent_reads=*/true));
  ASSIGN_OR_RETURN(launch->err, MakePipe(/*parent_reads=*/true));
  int max_fd = kMaxFdWithoutCloseRange;
  struct rlimit fd_limit;
  if (getrlimit(RLIMIT_NOFILE, &fd_limit) == 0 && fd_limit.rlim_cur < static_cast<rlim_t>(max_fd)) {
    max_fd = static_cast<int>(fd_limit.rlim_cur);
  }
  for (const ProcessSpec::ChildWrite& file : spec.child_writes) {
    launch->writes.push_back(
        {file.path.c_str(), file.text.data(), file.text.size(), file.required});
  }
  for (const ProcessSpec::Bind& bind : spec.binds) {
    launch->binds.push_back({bind.source.c_str(), bind.target.c_str(), bind.read_only});
  }
  ChildPlan& plan = launch->plan;
  plan.program = launch->exec_path.c_str();
  plan.argv = launch->argv.data();
  plan.envp = launch->envp.data();
  plan.working_directory =
      spec.working_directory.empty() ? nullptr : spec.working_directory.c_str();
  plan.binds = launch->binds.data();
  plan.bind_count = launch->binds.size();
  plan.writes = launch->writes.data();
  plan.write_count = launch->writes.size();
  plan.drop_identity = spec.run_as.has_value();
  plan.run_as_uid = spec.run_as ? spec.run_as->uid : 0;
  plan.run_as_gid = spec.run_as ? spec.run_as->gid : 0;
  plan.stdin_fd = launch->dev_null.get();
  plan.stdout_fd = launch->out.child_end.get();
  plan.stderr_fd = launch->err.child_end.get();
  plan.max_fd = max_fd;
  plan.parent = getpid();
  launch->parent_pidfd.Reset(static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0)));
  plan.parent_pidfd = launch->parent_pidfd.get();
  plan.failure = &launch->failure;
  return launch;
}

// Why the child reported it could not execute the program, for `spec`.
absl::Status ChildStartError(const ChildFailure& failure, const ProcessSpec& spec,
                             const std::string& exec_path) {
  const std::string& program = spec.argv[0];
  switch (failure.stage) {
    case ChildStage::kChdir:
      return StartError(failure.error,
                        absl::StrCat("cannot enter working directory '", spec.working_directory,
                                     "' to run '", program, "'"));
    case ChildStage::kMount:
      return StartError(
          failure.error,
          absl::StrCat("cannot mount '", spec.binds[failure.index].source, "' at '",
                       spec.binds[failure.index].target, "' in a mount namespace of its own"));
    case ChildStage::kRedirect:
      return StartError(failure.error,
                        absl::StrCat("cannot set up stdin/stdout/stderr of '", program, "'"));
    case ChildStage::kIdentity:
      return StartError(failure.error,
                        absl::StrCat("cannot run '", program, "' as user ", spec.run_as->uid,
                                     " and group ", spec.run_as->gid));
    case ChildStage::kWrite:
      return StartError(failure.error,
                        absl::StrCat("cannot write '", spec.child_writes[failure.index].path,
                                     "' before running '", program, "'"));
    case ChildStage::kNone:
    case ChildStage::kExec:
      break;
  }
  return StartError(failure.error, absl::StrCat("cannot execute '", exec_path, "'"));
}

// Starts the program of `launch`, which leads its own process group; returns
// its pid once it executes. The child's ends of the pipes are closed here.
absl::StatusOr<pid_t> StartChild(Launch& launch, const ProcessSpec& spec) {
  const std::string& program = spec.argv[0];
  // The child runs on a stack of its own in the caller's memory: no copy of
  // the caller's page tables, whose cost grows with its size (fork took 8 ms
  // from a 100 MB process and 78 ms from a 1 GB one on a 2-core VM; this
  // takes about 1.5 ms from either).
  void* stack = mmap(nullptr, kChildStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) {
    return StartError(errno, absl::StrCat("cannot map a stack to start '", program, "'"));
  }
  // All signals stay blocked across clone so that none of the caller's
  // handlers runs in the child before it has restored the defaults.
  sigset_t all_signals;
  sigset_t saved_mask;
  sigfillset(&all_signals);
  pthread_sigmask(SIG_SETMASK, &all_signals, &saved_mask);
  // CLONE_VFORK: this thread resumes once the child has executed the
  // program or exited, so the plan and the stack stay valid while it needs
  // them, and the failure report is complete when it is read.
  int flags = CLONE_VM | CLONE_VFORK | SIGCHLD;
  if (spec.new_pid_namespace) flags |= CLONE_NEWPID;
  pid_t pid = clone(ChildMain, static_cast<char*>(stack) + kChildStackBytes, flags, &launch.plan);
  int clone_error = errno;
  pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
  munmap(stack, kChildStackBytes);
  if (pid < 0) {
    return StartError(clone_error, absl::StrCat("cannot start a process to run '", program, "'"));
  }
  launch.dev_null.Reset();
  launch.out.child_end.Reset();
  launch.err.child_end.Reset();
  if (launch.failure.stage != ChildStage::kNone) {
    int status;
    struct rusage usage;
    RETURN_IF_ERROR(Reap(pid, status, usage));
    return ChildStartError(launch.failure, spec, launch.exec_path);
  }
  return pid;
}

// Captures the program's output into `result` until it has exited and its
// pipes are drained, killing its group at the timeout or a cancel. Returns
// how long it ran; an error (its group killed and reaped) if it cannot wait.
absl::StatusOr<absl::Duration> CaptureUntilExit(pid_t pid, Launch& launch, const ProcessSpec& spec,
                                                ProcessResult& result) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&start] { return absl::FromChrono(std::chrono::steady_clock::now() - start); };
  Capture captures[2] = {{std::move(launch.out.parent_end), &result.stdout_text},
                         {std::move(launch.err.parent_end), &result.stderr_text}};
  for (Capture& capture : captures) {
    int flags = fcntl(capture.fd.get(), F_GETFL);
    fcntl(capture.fd.get(), F_SETFL, flags | O_NONBLOCK);
  }
  // A pidfd makes the child's exit pollable next to its pipes without a
  // SIGCHLD handler, which would be process-wide state.
  UniqueFd pid_fd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  std::vector<char> buffer(kReadChunkBytes);
  bool exited = false;
  absl::Duration exit_time;
  auto on_exit = [&] {
    exited = true;
    exit_time = elapsed();
    // Whatever the program left running in its group goes with it; this
    // also brings EOF to pipes that a lingering descendant holds.
    KillGroup(pid);
  };
  for (;;) {
    const bool capturing = captures[0].fd.valid() || captures[1].fd.valid();
    if (!exited && !pid_fd.valid() && HasExited(pid)) on_exit();
    if (exited && !capturing) break;
    const absl::Duration now = elapsed();
    if (!exited && !result.timed_out && now >= spec.timeout) {
      KillGroup(pid);
      result.timed_out = true;
    }
    if (!exited && !result.cancelled && spec.cancel != nullptr && spec.cancel->cancelled()) {
      KillGroup(pid);
      result.cancelled = true;
    }
    absl::Duration wait = absl::InfiniteDuration();
    if (exited) {
      wait = exit_time + kDrainAfterExit - now;
      if (wait <= absl::ZeroDuration()) {
        // A descendant outside the group still holds a pipe: take what is
        // buffered and stop.
        for (Capture& capture : captures) {
          while (capture.fd.valid() && ReadAvailable(capture, spec.output_limit_bytes,
                                                     buffer.data(), result.output_truncated) > 0) {
          }
          capture.fd.Reset();
        }
        break;
      }
    } else {
      if (!result.timed_out) wait = spec.timeout - now;
      if (!pid_fd.valid()) wait = std::min(wait, kExitPollInterval);
      if (spec.cancel != nullptr && spec.cancel->fd() < 0) {
        wait = std::min(wait, kExitPollInterval);
      }
    }
    struct pollfd poll_fds[4];
    Capture* polled[4] = {nullptr, nullptr, nullptr, nullptr};
    nfds_t count = 0;
    for (Capture& capture : captures) {
      if (!capture.fd.valid()) continue;
      poll_fds[count] = {capture.fd.get(), POLLIN, 0};
      polled[count++] = &capture;
    }
    bool is_exit_fd[4] = {false, false, false, false};
    if (!exited && pid_fd.valid()) {
      is_exit_fd[count] = true;
      poll_fds[count++] = {pid_fd.get(), POLLIN, 0};
    }
    // Readable once cancelled: wakes the wait, and the check above acts.
    if (!exited && !result.cancelled && spec.cancel != nullptr && spec.cancel->fd() >= 0) {
      poll_fds[count++] = {spec.cancel->fd(), POLLIN, 0};
    }
    int ready = poll(poll_fds, count, ToPollTimeoutMs(wait));
    if (ready < 0) {
      if (errno == EINTR) continue;
      int poll_error = errno;
      KillGroup(pid);
      int status;
      struct rusage usage;
      RETURN_IF_ERROR(Reap(pid, status, usage));
      return absl::InternalError(absl::StrCat("cannot wait for output of '", spec.argv[0], "': ",
                                              absl::ErrnoToStatus(poll_error, "poll").message()));
    }
    for (nfds_t i = 0; i < count; ++i) {
      if (poll_fds[i].revents == 0) continue;
      if (is_exit_fd[i]) {
        on_exit();
      } else if (polled[i] != nullptr) {
        ReadAvailable(*polled[i], spec.output_limit_bytes, buffer.data(), result.output_truncated);
      }
    }
  }
  return exit_time;
}

}  // namespace

absl::StatusOr<ProcessResult> RunProcess(const ProcessSpec& spec) {
  RETURN_IF_ERROR(CheckSpec(spec));
  ASSIGN_OR_RETURN(std::unique_ptr<Launch> launch, PrepareLaunch(spec));
  ASSIGN_OR_RETURN(pid_t pid, StartChild(*launch, spec));
  // The program runs, in its own process group.
  if (spec.on_started) spec.on_started(pid);
  ProcessResult result;
  ASSIGN_OR_RETURN(result.wall_time, CaptureUntilExit(pid, *launch, spec, result));
  int status = 0;
  struct rusage usage;
  memset(&usage, 0, sizeof(usage));
  RETURN_IF_ERROR(Reap(pid, status, usage));
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  result.user_cpu_time = absl::DurationFromTimeval(usage.ru_utime);
  result.system_cpu_time = absl::DurationFromTimeval(usage.ru_stime);
  result.peak_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;
  return result;
}

std::string DescribeTermination(const ProcessResult& result) {
  if (result.cancelled) return "cancelled";
  if (result.timed_out) {
    // The kill lands a few milliseconds after the deadline; round that away.
    absl::Duration unit =
        result.wall_time >= absl::Seconds(1) ? absl::Milliseconds(100) : absl::Milliseconds(1);
    return absl::StrCat("timed out after ",
                        absl::FormatDuration(absl::Floor(result.wall_time, unit)));
  }
  if (result.term_signal != 0) {
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 32)
    // Unlike strsignal, thread-safe.
    const char* description = sigdescr_np(result.term_signal);
#else
    const char* description = strsignal(result.term_signal);
#endif
    return absl::StrCat("killed by signal ", result.term_signal, " (",
                        description != nullptr ? description : "unknown signal", ")");
  }
  if (result.exit_code >= 0) {
    return absl::StrCat("exit code ", result.exit_code);
  }
  return "did not run to completion";
}

absl::Status MountNamespacesWork(const std::string& target) {
  RETURN_IF_ERROR(MakeDirectories(target));
  ASSIGN_OR_RETURN(std::string probe, MakeTempDirectory("/tmp", "distcc-cuda-mount-probe-"));
  ProcessSpec spec;
  spec.argv = {"true"};
  spec.binds = {{probe, target}};
  spec.new_pid_namespace = true;
  spec.working_directory = target;
  spec.timeout = absl::Seconds(10);
  absl::StatusOr<ProcessResult> run = RunProcess(spec);
  RemoveAll(probe).IgnoreError();
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    return absl::InternalError(absl::StrCat("`true` in a mount namespace exited with ",
                                            run->exit_code, ": ", run->stderr_text));
  }
  return absl::OkStatus();
}

absl::Status PidNamespacesWork() {
  ProcessSpec spec;
  spec.argv = {"true"};
  spec.new_pid_namespace = true;
  spec.timeout = absl::Seconds(10);
  ASSIGN_OR_RETURN(ProcessResult run, RunProcess(spec));
  if (run.exit_code != 0) {
    return absl::InternalError(absl::StrCat("`true` in a PID namespace exited with ", run.exit_code,
                                            ": ", run.stderr_text));
  }
  return absl::OkStatus();
}

}  // namespace distcc_cuda
