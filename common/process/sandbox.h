// SPDX-License-Identifier: Apache-2.0
// The sandbox every compile runs in on a worker. bubblewrap (Debian's
// bubblewrap package) gives nvcc its own user, mount, PID, IPC, network, UTS
// and cgroup namespaces and a root file system that holds only:
//   - the toolchain and the system's programs, libraries and headers
//     (/usr, /bin, /lib*, the toolkit), read-only;
//   - the unit's input tree, mounted at the client's own absolute workspace
//     root, so nvcc sees the paths a local build would;
//   - a temporary folder of the task's own, /dev and a /proc of its own.
// No network, no store, no other task, no /etc/shadow. A worker running as
// root runs the sandbox as an unprivileged user; a system path whose parents
// that user may not search (a toolkit in a private home folder) is bound,
// before bwrap runs, where it can, and appears inside at its own path.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/process/subprocess.h"

namespace distcc_cuda {

// Where a compile's temporary files go inside the sandbox (TMPDIR). Under
// /run, where no input may lie (IsHostPrivatePath).
inline constexpr char kSandboxTemp[] = "/run/distcc-cuda/tmp";

struct SandboxOptions {
  std::string bwrap = "bwrap";  // a path, or a name looked up in PATH
  // Who compiles when the worker runs as root: a user name or a uid. Empty:
  // "distcc-cuda-sandbox" if that user exists, else "nobody".
  std::string user;
  // The pinned toolkit (the folder above nvcc's bin/), read-only inside.
  std::string toolkit_root;
  // Further toolkits a task may compile with, read-only inside too.
  std::vector<std::string> more_toolkit_roots;
  // Read-only system paths; empty: DefaultSystemPaths(toolkit_root).
  std::vector<std::string> system_paths;
};

// One task's folders on the worker's disk.
struct SandboxTask {
  std::string tree;               // the input tree: inputs at their workspace paths
  std::string workspace_root;     // where `tree` appears inside; absolute, "/" allowed
  std::string temp;               // becomes kSandboxTemp inside
  std::string working_directory;  // absolute path inside where the program starts
};

// /usr, /bin, /sbin, /lib, /lib32, /lib64, /libx32, ld.so's cache and
// configuration, /etc/alternatives and `toolkit_root` (if outside /usr): those
// that exist on this machine.
std::vector<std::string> DefaultSystemPaths(const std::string& toolkit_root);

// The bwrap arguments that build the sandbox's file system: each of
// `system_paths` read-only at its own path (symlinks recreated as symlinks),
// the task's tree at its workspace root, inputs winning where both hold a
// path (folders of both are merged entry by entry), the temp folder, /dev,
// /proc, and the root remounted read-only. A system path in `staged` is bound
// from where it maps to (bwrap finds it there; what lies on this machine is
// still read at its own path). INVALID_ARGUMENT for a workspace root or path
// that is not absolute and normalised, or a staged path not among
// `system_paths`.
absl::StatusOr<std::vector<std::string>> SandboxMountArguments(
    const std::vector<std::string>& system_paths, const SandboxTask& task,
    const std::map<std::string, std::string>& staged = {});

class Sandbox {
 public:
  // Finds bwrap, picks the user, chooses the first of `task_roots` that the
  // sandbox user can reach (made if missing) as the folder for task folders,
  // stages each system path whose parents that user may not search (an empty
  // folder for it under task_root()/sandbox-system, where each compile's
  // process binds it before it becomes the sandbox user and runs bwrap), and
  // proves that the toolchain runs inside by running `nvcc --version` in a
  // sandbox built there. FAILED_PRECONDITION saying why and what to do when
  // it cannot be built (no bwrap, no user namespaces, a seccomp profile that
  // refuses them, no reachable folder, a toolkit folder the user may not
  // search, no mount namespace for a staged path).
  // The probe runs through `run` (a memory cap's, for a worker).
  static absl::StatusOr<std::unique_ptr<Sandbox>> Create(const SandboxOptions& options,
                                                         const std::string& nvcc,
                                                         const std::vector<std::string>& task_roots,
                                                         const ProcessRunner& run = RunProcess);

  // Where task folders go (one of Create's `task_roots`).
  const std::string& task_root() const { return task_root_; }

  // `compile` (argv[0] the program, run in task.working_directory) as it
  // runs inside the sandbox of `task`: through bwrap, with a minimal
  // environment (PATH, TMPDIR, HOME, LANG), as the sandbox user, with the
  // staged system paths as binds (ProcessSpec::binds), and where the worker
  // may (root), bwrap as process 1 of a PID namespace of its own, so that
  // everything inside ends with it. Keeps the timeout, output limit,
  // child_writes and on_started of `compile`. `task_toolkit_root` (the
  // task's: toolkit_root or one of more_toolkit_roots; empty: toolkit_root)
  // has its bin/ first in PATH.
  absl::StatusOr<ProcessSpec> Wrap(const ProcessSpec& compile, const SandboxTask& task,
                                   const std::string& task_toolkit_root = "") const;

  // Runs `program` in a sandbox of its own that holds nothing of any task:
  // an empty tree at /run/distcc-cuda-probe (its working directory) and an
  // empty temp folder, removed after. Wrap's rules otherwise, with
  // `toolkit_root` as the task's toolkit; the wrapped process runs through
  // `run` (a memory cap's). How a worker asks a toolkit it fetched what it
  // is, and how Create proves the sandbox works. Errors as RunProcess's, or
  // why the folders could not be made.
  absl::StatusOr<ProcessResult> RunAlone(const ProcessSpec& program,
                                         const std::string& toolkit_root,
                                         const ProcessRunner& run = RunProcess) const;

  // Makes `folder` (in a task's tree or its temp folder) writable by the
  // sandbox user and by nobody else.
  absl::Status GrantWrite(const std::string& folder) const;
  // Makes `folder` (a task folder) reachable by the sandbox user only.
  absl::Status GrantReach(const std::string& folder) const;
  // OK if the sandbox user can reach `folder` (search permission on every
  // folder above it); else FAILED_PRECONDITION naming the folder that stops it.
  absl::Status CheckReachable(const std::string& folder) const;

  // "bubblewrap 0.8.0: user, mount, pid, ipc, net, uts namespaces; compiles as nobody (65534)",
  // and when bwrap has no PID namespace of its own, that a compile starting
  // as the worker is killed outright can outlive it.
  std::string Describe() const;

 private:
  Sandbox() = default;

  // Create's steps: bubblewrap found (options_.bwrap) and its version
  // read; the user compiles run as (root drops to options_.user, else
  // distcc-cuda-sandbox or nobody; anyone else stays themselves); the
  // proof that `nvcc` --version runs in a sandbox like a task's. Each
  // FAILED_PRECONDITION saying what to install or change.
  absl::Status FindBubblewrap();
  absl::Status ChooseUser();
  absl::Status ProbeWith(const std::string& nvcc, const ProcessRunner& run);

  // The first folder from `folder` up to `top` (up to "/" when empty) that
  // the sandbox user may not search; "" if none, or when the worker is not
  // root. An error if one cannot be looked at.
  absl::StatusOr<std::string> FirstUnsearchable(const std::string& folder,
                                                const std::string& top) const;
  // Fills staged_ (see Create).
  absl::Status StageUnreachableSystemPaths();
  // OK if the sandbox user reaches the toolkit's bin/ inside the sandbox.
  absl::Status CheckToolkitReachable(const std::string& toolkit_root) const;

  SandboxOptions options_;
  std::string bwrap_path_;
  std::string version_;
  std::vector<std::string> system_paths_;
  // System path -> the empty folder under task_root_ it is bound at before
  // bwrap runs: those whose parents the sandbox user may not search.
  std::map<std::string, std::string> staged_;
  bool drop_to_user_ = false;  // the worker is root: bwrap runs as uid_/gid_
  // bwrap runs as process 1 of a PID namespace of its own (see Wrap).
  bool own_pid_namespace_ = false;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  std::string user_name_;
  std::string task_root_;
};

}  // namespace distcc_cuda
