// SPDX-License-Identifier: Apache-2.0
// The memory cap of one node (a worker): every task of the node runs inside
// one memory group whose limit is the cap, each task in its own child group so
// that its own peak is measured, and a task that pushes the node over the cap
// is killed by the cap, never by the host's OOM killer. Three mechanisms, in
// order of preference: cgroup v2, cgroup v1, and where no memory cgroup is
// writable a watchdog that samples the RSS of each task's process tree and
// kills the offending task. A kill for memory is a result of the task, read
// with TaskMemoryScope::Finish. The cgroups are in common/process/cgroup_memory_cap.cc,
// the watchdog in common/process/rss_watchdog.cc, what they share in
// common/process/memory_cap_internal.h; this file's functions in memory_cap.cc.
//
// Use, per task:
//   ASSIGN_OR_RETURN(auto scope, node->StartTask(task_id, reserved_bytes));
//   scope->PrepareProcess(spec);
//   ASSIGN_OR_RETURN(ProcessResult result, RunProcess(spec));
//   ASSIGN_OR_RETURN(TaskMemoryUsage usage, scope->Finish());
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"

namespace distcc_cuda {

// Where the kernel's files are. Tests point these at fake trees.
struct CgroupPaths {
  std::string proc_self_cgroup = "/proc/self/cgroup";
  std::string meminfo = "/proc/meminfo";
  // Where the unified (v2) hierarchy is mounted.
  std::string cgroup_v2_root = "/sys/fs/cgroup";
  // Where the v1 memory controller's hierarchy is mounted.
  std::string cgroup_v1_root = "/sys/fs/cgroup/memory";
};

enum class MemoryCapMechanism { kCgroupV2, kCgroupV1, kRssWatchdog };

// "cgroup v2", "cgroup v1", "RSS watchdog".
std::string MechanismName(MemoryCapMechanism mechanism);

struct MemoryCapOptions {
  // The node's cap; must be positive, at most the machine's memory and at most
  // the limit of the cgroup (container) this process runs in.
  int64_t cap_bytes = 0;
  // Names the node group, e.g. the worker's name; characters other than
  // [A-Za-z0-9_.-] become '_'. The group is "distcc-cuda-<pid>-<name>".
  std::string name;
  // Use the watchdog even where a cgroup is writable (--memory-mechanism=watchdog).
  bool force_watchdog = false;
  // How often the watchdog samples every task's process tree. A compiler
  // allocating at a few GB/s overshoots the cap by about this much time's
  // worth of allocation before it is killed.
  absl::Duration watchdog_interval = absl::Milliseconds(10);
  // The watchdog finds a task's processes by following
  // /proc/PID/task/TID/children from the task's root. With this set (and
  // automatically where the kernel has no children files) it scans all of
  // /proc instead, taking the processes of the task's process group and their
  // children; slower.
  bool watchdog_scan_all_processes = false;
  CgroupPaths paths;
};

// What a finished task used.
struct TaskMemoryUsage {
  // The task's largest memory use: under cgroups its group's peak charge
  // (anonymous memory, page cache and tmpfs files it wrote), under the
  // watchdog the largest sampled sum of its processes' RSS (a spike shorter
  // than the sampling interval can be missed). 0 when the kernel
  // cannot say (cgroup v2 before Linux 5.19 has no memory.peak); callers may
  // take the larger of this and ProcessResult::peak_rss_bytes.
  int64_t peak_bytes = 0;
  // The task lost a process to an OOM kill inside the node group (cgroups) or
  // was killed by the watchdog.
  bool killed_for_memory = false;
};

// One task's share of the node group: under cgroups its own child group.
// Thread-compatible (one task uses it from one thread at a time); must be
// destroyed before the NodeMemoryCap that made it. The destructor kills any
// process still in the task's group and removes the group.
class TaskMemoryScope {
 public:
  virtual ~TaskMemoryScope() = default;

  // Makes the program of `spec` run under the cap: under cgroups the child
  // joins the task's group (and raises its OOM score, see Attach) before it
  // executes, so the group accounts for all of its memory and RunProcess
  // fails, naming the file, if it cannot join; under the watchdog the
  // program is watched from the moment it runs (spec.on_started, which this
  // replaces; a failure shows in Finish).
  virtual void PrepareProcess(ProcessSpec& spec) = 0;

  // Puts process `pid` (and so every process it starts from now on) under
  // the cap, from outside: for a process started otherwise. If it cannot,
  // it kills `pid` (a task must not run uncapped) and returns why, naming the
  // file it could not write or read (the code follows its errno). May be
  // called for several processes of one task.
  virtual absl::Status Attach(pid_t pid) = 0;

  // Once the task's processes have exited: its peak and whether it was killed
  // for memory. Kills what is left of the task. Returns Attach's error if
  // Attach failed, INTERNAL if the group's counters cannot be read.
  virtual absl::StatusOr<TaskMemoryUsage> Finish() = 0;

  // The task's cgroup directory; empty under the watchdog.
  virtual std::string cgroup_path() const = 0;
};

// The node group. Thread-safe: tasks start and finish from several threads.
class NodeMemoryCap {
 public:
  // Creates the node group (unless force_watchdog): cgroup v2 under this
  // process's own v2 group, else cgroup v1 under its own memory group, else
  // the watchdog, which always works (Describe says why the cgroups were not
  // used). Under cgroup v2, whose groups can hand the memory controller to
  // children only while they hold no processes, this process may move itself
  // into a leaf "<own group>/distcc-cuda-<pid>-worker". Removes node groups
  // that an earlier, dead process of the same name left behind. INVALID_ARGUMENT for a cap
  // that is not positive, exceeds MemTotal, or exceeds this process's cgroup
  // limit (the cap must sit below the memory that the host enforces).
  static absl::StatusOr<std::unique_ptr<NodeMemoryCap>> Create(const MemoryCapOptions& options);

  // Removes the node group. Destroy every TaskMemoryScope first.
  virtual ~NodeMemoryCap() = default;

  virtual MemoryCapMechanism mechanism() const = 0;
  // The cap in force (cgroups round it down to whole pages).
  virtual int64_t cap_bytes() const = 0;
  // For the log: "cgroup v1 at /sys/fs/cgroup/memory/…/distcc-cuda-42-w1, cap
  // 4.0 GiB", or "RSS watchdog every 10ms, cap 4.0 GiB (cgroup v2: …; cgroup
  // v1: …)" with the reasons the cgroups were not used.
  virtual std::string Describe() const = 0;
  // The node group's directory; empty under the watchdog.
  virtual std::string cgroup_path() const = 0;

  // The most memory the node's tasks held at once so far (cgroups: the node
  // group's peak charge; the watchdog: its largest sampled total).
  virtual int64_t PeakBytes() const = 0;
  // What the node's tasks hold now (cgroups: the node group's charge, page
  // cache included; the watchdog: its last sampled total, 0 when idle).
  virtual int64_t CurrentBytes() const = 0;

  // Starts accounting for one task. `reserved_bytes` is what the scheduler
  // reserved for it (0 if unknown): when the node goes over its cap, the task
  // furthest above its reservation is the one killed (the watchdog by rule;
  // under cgroups, best effort, by raising the task's oom_score_adj to
  // 1000 * (cap - reserved) / cap, which also makes tasks rather than the
  // worker the host's first victims). INTERNAL if the
  // task's group cannot be created.
  virtual absl::StatusOr<std::unique_ptr<TaskMemoryScope>> StartTask(const std::string& task_id,
                                                                     int64_t reserved_bytes) = 0;
};

// A worker's default cap and where it came from, for the log.
struct DefaultCap {
  int64_t bytes = 0;
  // "container cgroup limit 8.0 GiB (/sys/fs/cgroup/memory.max) less 410 MiB
  // headroom" or "available memory 22.1 GiB less 2.2 GiB headroom".
  std::string source;
};

// The cgroup (container) limit less a headroom of max(5%, 256 MiB) for the
// worker itself, if this process's memory cgroup or one of its ancestors has
// a limit below MemTotal; otherwise MemAvailable less max(10%, 512 MiB). The
// smaller of the two when both apply. At least 256 MiB.
DefaultCap DefaultMemoryCap(const CgroupPaths& paths = CgroupPaths());

// The lowest memory limit on this process's cgroup or its ancestors (v2
// memory.max, else v1 memory.limit_in_bytes), if one is below MemTotal.
struct CgroupLimit {
  int64_t bytes = 0;
  std::string file;  // the file that set it
};
std::optional<CgroupLimit> OwnCgroupMemoryLimit(const CgroupPaths& paths = CgroupPaths());

namespace memory_cap_internal {

// The directory of this process's own group in the hierarchy mounted at
// `root`, given its path from /proc/self/cgroup. Where that path does not
// exist under `root` (a container that sees only its own group mounted as the
// root) its leading components are dropped until it does. NOT_FOUND if the
// hierarchy is not mounted there or /proc/self/cgroup names no such group.
absl::StatusOr<std::string> OwnCgroupDirectory(MemoryCapMechanism version,
                                               const CgroupPaths& paths);

// Reads a finished task's usage from its cgroup directory: v2 memory.peak and
// memory.events (oom_kill, oom_group_kill); v1 memory.max_usage_in_bytes and
// memory.oom_control (oom_kill, which counts kills of the group's own
// processes only).
absl::StatusOr<TaskMemoryUsage> ReadTaskUsage(MemoryCapMechanism version, const std::string& dir);

}  // namespace memory_cap_internal

}  // namespace distcc_cuda
