// SPDX-License-Identifier: Apache-2.0
#include "common/process/process_child.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

namespace distcc_cuda::process_child {
namespace {

[[noreturn]] void ReportAndExit(const ChildPlan& plan, ChildStage stage, int error,
                                size_t index = 0) {
  plan.failure->stage = stage;
  plan.failure->error = error;
  plan.failure->index = index;
  _exit(127);
}

// Writes all of `size` bytes of `text` to the file at `path`; 0 or an errno.
// Async-signal-safe.
int WriteWholeFile(const char* path, const char* text, size_t size) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  while (size > 0) {
    ssize_t written = write(fd, text, size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      int error = written < 0 ? errno : EIO;
      close(fd);
      return error;
    }
    text += written;
    size -= static_cast<size_t>(written);
  }
  return close(fd) == 0 ? 0 : errno;
}

// Closes descriptors [low, high], with close_range where the kernel has it.
// Async-signal-safe.
void CloseRange(unsigned low, unsigned high, int max_fd) {
  if (low > high) return;
  if (syscall(SYS_close_range, low, high, 0U) == 0) return;
  for (unsigned fd = low; fd <= high && fd < static_cast<unsigned>(max_fd); ++fd) close(fd);
}

// The parent process of the calling process as /proc/self/stat gives it
// (in the PID namespace of the /proc mount, the host's); -1 if it cannot be
// read. Async-signal-safe: a fixed buffer, no allocation.
pid_t ParentFromProc() {
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[512];
  size_t size = 0;
  for (;;) {
    ssize_t got = read(fd, text + size, sizeof(text) - 1 - size);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    size += static_cast<size_t>(got);
    if (size == sizeof(text) - 1) break;
  }
  close(fd);
  text[size] = '\0';
  // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so
  // the fields go on after the last ')'.
  const char* end = nullptr;
  for (const char* at = text; *at != '\0'; ++at) {
    if (*at == ')') end = at;
  }
  if (end == nullptr || end[1] != ' ' || end[2] == '\0' || end[3] != ' ') return -1;
  pid_t parent = 0;
  const char* digit = end + 4;
  if (*digit < '0' || *digit > '9') return -1;
  for (; *digit >= '0' && *digit <= '9'; ++digit) parent = parent * 10 + (*digit - '0');
  return parent;
}

// Runs in the child, which shares the caller's memory (CLONE_VM) while the
// calling thread waits for it to execute or exit (CLONE_VFORK), as
// posix_spawn's child does. Other threads of the caller may hold locks
// (malloc's, stdio's), and the memory is theirs too, so only
// async-signal-safe calls are made here and nothing is written but the
// failure report.
[[noreturn]] void RunChild(const ChildPlan& plan) {
  // Handlers vanish at exec but ignored signals stay ignored (a caller that
  // ignores SIGPIPE would pass that on to nvcc's pipelines), and the mask is
  // inherited as it was during clone: everything blocked.
  struct sigaction default_action;
  memset(&default_action, 0, sizeof(default_action));
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    sigaction(sig, &default_action, nullptr);  // fails harmlessly for some
  }
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);

  // Its own process group, so that a timeout or a cancel can kill everything
  // the program starts. Done here, before exec: the caller cannot once the
  // program runs.
  setpgid(0, 0);

  // E.g. joining a cgroup: the program is in it from its first instruction.
  for (size_t i = 0; i < plan.write_count; ++i) {
    const PlannedWrite& file = plan.writes[i];
    int error = WriteWholeFile(file.path, file.text, file.size);
    if (error != 0 && file.required) ReportAndExit(plan, ChildStage::kWrite, error, i);
  }
  if (plan.bind_count > 0) {
    // A mount namespace of its own, where nothing it mounts propagates back.
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      ReportAndExit(plan, ChildStage::kMount, errno);
    }
    for (size_t i = 0; i < plan.bind_count; ++i) {
      const PlannedBind& bind = plan.binds[i];
      // A read-only bind is read-only at its top only; what is mounted below
      // keeps its own flags.
      if (mount(bind.source, bind.target, nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
          (bind.read_only &&
           mount(nullptr, bind.target, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0)) {
        ReportAndExit(plan, ChildStage::kMount, errno, i);
      }
    }
  }
  if (plan.working_directory != nullptr && chdir(plan.working_directory) != 0) {
    ReportAndExit(plan, ChildStage::kChdir, errno);
  }
  // Every descriptor still needed is moved above 2 first, so installing 0, 1
  // and 2 cannot overwrite one (possible only if the caller had closed its
  // own standard descriptors).
  int sources[3] = {plan.stdin_fd, plan.stdout_fd, plan.stderr_fd};
  for (int& fd : sources) {
    if (fd < 3) {
      fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
      if (fd < 0) ReportAndExit(plan, ChildStage::kRedirect, errno);
    }
  }
  for (int target = 0; target < 3; ++target) {
    // dup2 clears close-on-exec on the target.
    while (dup2(sources[target], target) < 0) {
      if (errno != EINTR) {
        ReportAndExit(plan, ChildStage::kRedirect, errno);
      }
    }
  }
  if (plan.drop_identity) {
    // Raw system calls: this thread is the process's only one, and glibc's
    // wrappers would try to reach the parent's other threads.
    if (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setgid, plan.run_as_gid) != 0 ||
        syscall(SYS_setuid, plan.run_as_uid) != 0) {
      ReportAndExit(plan, ChildStage::kIdentity, errno);
    }
  }

  // A caller killed outright (SIGKILL) takes the program with it. Armed
  // last, as a change of user clears it, and before the checks, so that a
  // caller that died meanwhile is seen. A child whose calling thread died
  // is moved to another of the caller's threads (and signalled when that
  // one exits) or, once none is left, to init: its parent is then not the
  // caller. The parent is read from /proc/self/stat, which names it as the
  // host sees it even in a PID namespace of the child's own (where getppid()
  // is always 0). The caller's pidfd, readable once all of it has exited,
  // covers a /proc that cannot be read.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  pid_t parent = ParentFromProc();
  if (parent < 0) parent = getppid();
  if (parent > 0 && parent != plan.parent) _exit(127);
  if (plan.parent_pidfd >= 0) {
    struct pollfd caller = {plan.parent_pidfd, POLLIN, 0};
    if (poll(&caller, 1, 0) != 0) _exit(127);
  }
  // Descriptors the caller opened without O_CLOEXEC (sockets, files of other
  // libraries) must not reach the program. The child has its own table
  // (no CLONE_FILES): closing them here leaves the caller's open.
  CloseRange(3, ~0U, plan.max_fd);
  execve(plan.program, plan.argv, plan.envp);
  ReportAndExit(plan, ChildStage::kExec, errno);
}

}  // namespace

int ChildMain(void* plan) { RunChild(*static_cast<const ChildPlan*>(plan)); }

}  // namespace distcc_cuda::process_child
