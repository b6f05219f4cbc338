// SPDX-License-Identifier: Apache-2.0
// What a child process does between clone(2) and exec, for RunProcess
// (subprocess.cc): restore signals, lead its own process group, write the
// files it must (joining a cgroup), bind-mount its folders in a mount
// namespace of its own, enter its working directory, install its standard
// descriptors, drop its identity, die with its caller, close every other
// descriptor and execute the program. It shares the caller's memory
// (CLONE_VM | CLONE_VFORK), so all of it is planned beforehand as plain
// pointers and it makes only async-signal-safe calls. Internal to common/.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace distcc_cuda::process_child {

enum class ChildStage : int {
  kNone = 0,
  kRedirect = 1,
  kChdir = 2,
  kExec = 3,
  kMount = 4,
  kIdentity = 5,
  kWrite = 6,
};

// Where the child says why it could not execute the program: in the memory
// it shares with the parent, which reads it once the child has executed or
// exited.
struct ChildFailure {
  ChildStage stage = ChildStage::kNone;
  int error = 0;
  size_t index = 0;  // kWrite, kMount: which of the plan's writes or binds failed
};

// One of ProcessSpec::child_writes, as plain pointers.
struct PlannedWrite {
  const char* path;
  const char* text;
  size_t size;
  bool required;
};

// One of ProcessSpec::binds, as plain pointers.
struct PlannedBind {
  const char* source;
  const char* target;
  bool read_only;
};

// What the child does between clone and exec; prepared before, because the
// child shares the caller's memory and may not allocate.
struct ChildPlan {
  const char* program;
  char* const* argv;
  char* const* envp;
  const char* working_directory;  // nullptr: keep the parent's
  const PlannedBind* binds;
  size_t bind_count;  // 0: no mount namespace
  const PlannedWrite* writes;
  size_t write_count;
  bool drop_identity;  // become run_as_uid/gid before exec
  uid_t run_as_uid;
  gid_t run_as_gid;
  int stdin_fd;
  int stdout_fd;
  int stderr_fd;
  int max_fd;
  pid_t parent;      // the caller; the child dies with the thread that started it
  int parent_pidfd;  // the caller's pidfd, or -1
  ChildFailure* failure;
};

// The entry point of clone(2): runs the ChildPlan `plan` points to; returns
// only by executing the program or exiting with 127 after filling in the
// plan's failure report.
int ChildMain(void* plan);

}  // namespace distcc_cuda::process_child
