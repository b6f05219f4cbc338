// SPDX-License-Identifier: Apache-2.0
// Runs one program to completion on Linux: captured stdout/stderr, a timeout
// that kills the program's whole process group, and the CPU time and peak
// memory of its process tree. Used by the worker to run nvcc in a sandbox
// directory and by the client to run the local nvcc (dependency scan, link).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace distcc_cuda {

class CancelToken;

// What to run and how.
struct ProcessSpec {
  // argv[0] is the program: a path containing '/' is used as is (a relative
  // one relative to `working_directory`); a bare name is looked up in the PATH
  // of the child's environment (execvp semantics; "/bin:/usr/bin" when the
  // child has no PATH). The child sees argv unchanged.
  std::vector<std::string> argv;
  // Directory the child starts in; empty = the caller's.
  std::string working_directory;
  // The child's environment. With `inherit_environment` these entries are
  // overlaid on the caller's environ; without it they are all the child gets.
  std::map<std::string, std::string> environment;
  bool inherit_environment = true;
  // When exceeded, the child's whole process group is killed with SIGKILL and
  // the result says `timed_out`. Must be positive.
  absl::Duration timeout = absl::InfiniteDuration();
  // At most this many bytes of each of stdout and stderr are kept; the rest is
  // read and dropped (the child never blocks on a full pipe) and the result
  // says `output_truncated`.
  size_t output_limit_bytes = 16 << 20;
  // Optional: the child gets a mount namespace of its own in which each
  // `source` is bound (with what is mounted below it) at `target`, an
  // existing folder (or file, for a file), in this order, after
  // `child_writes` and before it enters `working_directory` (which may lie
  // under a target) and gives up its user: so a program run as `run_as` can
  // reach, at a target, a folder whose parents it may not search. Nothing
  // outside the child sees them; they end with it. Needs CAP_SYS_ADMIN;
  // without it the run fails with PERMISSION_DENIED (see
  // MountNamespacesWork).
  struct Bind {
    std::string source;
    std::string target;
    bool read_only = false;
  };
  std::vector<Bind> binds;
  // Optional: the child is process 1 of a PID namespace of its own, so the
  // program and its children get the same process ids on every run (nvcc
  // names internal device entities and temporary files after them). Needs
  // CAP_SYS_ADMIN, like `binds`. The whole namespace ends with the child.
  bool new_pid_namespace = false;
  // Optional: the child gives up its user for this one (no supplementary
  // groups) right before it executes the program, after `child_writes` and after
  // entering `working_directory`. Needs root (CAP_SETUID/CAP_SETGID); without
  // it the run fails with PERMISSION_DENIED.
  struct Identity {
    uid_t uid;
    gid_t gid;
  };
  std::optional<Identity> run_as;
  // Optional: files the child writes, in this order, once it is in its own
  // process group and before it executes the program (before entering
  // `working_directory` and giving up its user), each with all of `text`:
  // e.g. a cgroup's cgroup.procs with "0" (the writing process), so that the
  // group accounts for all of the program's memory. A required write that
  // fails fails the run with the errno's code and a message naming the file;
  // one that is not required is tried and its failure ignored.
  struct ChildWrite {
    std::string path;
    std::string text;
    bool required = true;
  };
  std::vector<ChildWrite> child_writes;
  // Optional. Called on the calling thread with the child's pid once the
  // program runs, in a process group of its own. Not called when the child
  // cannot be created or the program cannot be started (RunProcess then
  // returns an error). What must happen before the program's first
  // instruction goes in `child_writes`.
  std::function<void(pid_t)> on_started;
  // Optional, not owned: once cancelled, the child's whole process group is
  // killed with SIGKILL at once and the result says `cancelled`.
  const CancelToken* cancel = nullptr;
};

// How a run ended and what it printed.
struct ProcessResult {
  int exit_code = -1;      // exit status if the program exited, else -1
  int term_signal = 0;     // signal that killed it, 0 if none
  bool timed_out = false;  // killed because `ProcessSpec::timeout` passed
  bool cancelled = false;  // killed because `ProcessSpec::cancel` was cancelled
  std::string stdout_text;
  std::string stderr_text;
  bool output_truncated = false;  // either stream exceeded the output limit
  // From the start of the program to its exit.
  absl::Duration wall_time;
  // CPU time of the program and of the descendants it waited for (wait4).
  absl::Duration user_cpu_time;
  absl::Duration system_cpu_time;
  // Largest resident set of the program or of any descendant it waited for.
  int64_t peak_rss_bytes = 0;
};

// Runs `spec` to completion and returns how it ended. The child gets stdin
// from /dev/null, stdout and stderr as pipes, default signal dispositions, an
// empty signal mask and no other file descriptors; it leads its own process
// group, and any of the group still alive when the program exits is killed.
// The child is killed (SIGKILL) if the calling thread dies first
// (PR_SET_PDEATHSIG), so a worker killed outright leaves no nvcc running;
// what nvcc started itself is reached by the task's cgroup or PID namespace.
// A non-zero exit, a signal or a timeout is a result, not an error. Errors
// only when the program could not be started: INVALID_ARGUMENT (empty argv, a
// NUL inside an argument, a bad environment name, a non-positive timeout),
// NOT_FOUND (program or working directory missing; names it),
// PERMISSION_DENIED (not executable or not accessible), FAILED_PRECONDITION
// (not an executable format), RESOURCE_EXHAUSTED (no processes or memory left)
// or INTERNAL. Safe to call from several threads at once; installs no signal
// handlers and waits only for its own child. The calling process must not set
// SIGCHLD to SIG_IGN (the kernel would then reap the child behind its back).
absl::StatusOr<ProcessResult> RunProcess(const ProcessSpec& spec);

// Something that runs a ProcessSpec as RunProcess does, perhaps otherwise
// placed (under a memory cap, in a sandbox): how callers let others decide
// where a program they must run runs.
using ProcessRunner = std::function<absl::StatusOr<ProcessResult>(const ProcessSpec&)>;

// The path RunProcess hands to execve for `program`: itself when it has a
// slash, else looked up as execvp would, in `environment`'s PATH
// (/bin:/usr/bin without one), relative to `working_directory`. NOT_FOUND,
// or PERMISSION_DENIED for a match that is not executable, naming the PATH.
absl::StatusOr<std::string> ResolveProgram(const std::string& program,
                                           const std::map<std::string, std::string>& environment,
                                           const std::string& working_directory);

// OK if children can be given a mount namespace with a folder mounted at
// `target` (made if missing) and a PID namespace of their own: tries it once
// with `true`. Else why not.
absl::Status MountNamespacesWork(const std::string& target);

// OK if children can be given a PID namespace of their own (CAP_SYS_ADMIN):
// tries it once with `true`. Else why not.
absl::Status PidNamespacesWork();

// A short description of how `result` ended, for messages: "exit code 2",
// "killed by signal 9 (Killed)", "timed out after 5s".
std::string DescribeTermination(const ProcessResult& result);

}  // namespace distcc_cuda
