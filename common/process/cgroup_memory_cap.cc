// SPDX-License-Identifier: Apache-2.0
// The memory cap by cgroup v1 or v2: one node group under this process's
// own, one child group per task; where a cgroup limit above this process
// is found; a finished task's usage as its group recorded it.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/base/byte_size.h"
#include "common/base/status.h"
#include "common/process/memory_cap_internal.h"

namespace distcc_cuda::memory_cap_internal {
namespace {

// Every node group's name starts with this, then "<pid>-<name>".
constexpr absl::string_view kGroupPrefix = "distcc-cuda-";
// A removed group's last processes may take a moment to leave it.
constexpr absl::Duration kRemoveRetryFor = absl::Seconds(1);
constexpr absl::Duration kRemoveRetryStep = absl::Milliseconds(5);

// The process-wide unique part of a group name: "distcc-cuda-<pid>-".
std::string OwnGroupPrefix() { return absl::StrCat(kGroupPrefix, getpid(), "-"); }

// ---------------------------------------------------------------------------
// Which files a cgroup version uses.

struct CgroupFiles {
  const char* limit;       // the node's cap
  const char* peak;        // a task's peak charge
  const char* oom_counts;  // where oom_kill is counted
  const char* swap_limit;  // written with the cap (v1) or 0 (v2); optional
  const char* current;     // the group's charge now
};

const CgroupFiles& FilesOf(MemoryCapMechanism version) {
  static const CgroupFiles kV2 = {"memory.max", "memory.peak", "memory.events", "memory.swap.max",
                                  "memory.current"};
  static const CgroupFiles kV1 = {"memory.limit_in_bytes", "memory.max_usage_in_bytes",
                                  "memory.oom_control", "memory.memsw.limit_in_bytes",
                                  "memory.usage_in_bytes"};
  return version == MemoryCapMechanism::kCgroupV2 ? kV2 : kV1;
}

std::string RootOf(MemoryCapMechanism version, const CgroupPaths& paths) {
  return version == MemoryCapMechanism::kCgroupV2 ? paths.cgroup_v2_root : paths.cgroup_v1_root;
}

// Kills every process in the cgroup at `dir`: its members cannot be reused
// pids while they are listed there.
void KillGroupMembers(MemoryCapMechanism version, const std::string& dir) {
  if (version == MemoryCapMechanism::kCgroupV2 &&
      WriteText(absl::StrCat(dir, "/cgroup.kill"), "1").ok()) {
    return;
  }
  absl::StatusOr<std::string> procs = ReadText(absl::StrCat(dir, "/cgroup.procs"));
  if (!procs.ok()) return;
  for (absl::string_view line : absl::StrSplit(*procs, '\n', absl::SkipEmpty())) {
    pid_t pid;
    if (absl::SimpleAtoi(line, &pid) && pid > 0) kill(pid, SIGKILL);
  }
}

// Removes the (empty of child groups) cgroup at `dir`, killing what is left
// in it and retrying while its last processes leave. True if it is gone.
bool RemoveGroup(MemoryCapMechanism version, const std::string& dir) {
  const absl::Time give_up = absl::Now() + kRemoveRetryFor;
  for (;;) {
    if (rmdir(dir.c_str()) == 0 || errno == ENOENT) return true;
    if (errno != EBUSY || absl::Now() >= give_up) return false;
    KillGroupMembers(version, dir);
    absl::SleepFor(kRemoveRetryStep);
  }
}

// Removes the groups that dead earlier processes named `name` left in
// `parent`: node groups ("distcc-cuda-<pid>-<name>[-<n>]") with their task
// groups, and worker leaves ("distcc-cuda-<pid>-worker"). What still runs in
// them is killed first: compiles whose worker died, that nobody will collect.
// A live process's groups are skipped, so nothing in use is touched.
void RemoveStaleGroups(MemoryCapMechanism version, const std::string& parent,
                       const std::string& name) {
  for (const std::string& entry : SubdirectoryNames(parent)) {
    absl::string_view rest = entry;
    if (!absl::ConsumePrefix(&rest, kGroupPrefix)) continue;
    size_t dash = rest.find('-');
    pid_t pid;
    if (dash == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, dash), &pid) ||
        pid <= 0 || pid == getpid()) {
      continue;
    }
    absl::string_view owner = rest.substr(dash + 1);
    bool ours = owner == "worker" || owner == name;
    if (!ours && absl::ConsumePrefix(&owner, name) && absl::ConsumePrefix(&owner, "-")) {
      int ignored;
      ours = absl::SimpleAtoi(owner, &ignored);
    }
    if (!ours || kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::string dir = absl::StrCat(parent, "/", entry);
    for (const std::string& child : SubdirectoryNames(dir)) {
      RemoveGroup(version, absl::StrCat(dir, "/", child));
    }
    RemoveGroup(version, dir);
  }
}

// Makes the OOM killer's choice among a node's tasks the task furthest above
// its reservation. Within a memory cgroup a process's badness is its usage
// plus oom_score_adj * limit / 1000, so adj = 1000 * (cap - reserved) / cap
// ranks tasks by usage less reservation (plus the same cap for all). Raised,
// never lowered below 0: lowering needs CAP_SYS_RESOURCE, which containers
// usually lack. Best effort.
std::string OomScoreAdjustment(int64_t reserved_bytes, int64_t cap_bytes) {
  int64_t unreserved = cap_bytes - std::clamp<int64_t>(reserved_bytes, 0, cap_bytes);
  int64_t adj = cap_bytes > 0 ? unreserved / std::max<int64_t>(1, cap_bytes / 1000) : 0;
  return absl::StrCat(std::min<int64_t>(adj, 1000));
}

void BiasOomScore(pid_t pid, int64_t reserved_bytes, int64_t cap_bytes) {
  WriteText(absl::StrCat("/proc/", pid, "/oom_score_adj"),
            OomScoreAdjustment(reserved_bytes, cap_bytes))
      .IgnoreError();
}

// ---------------------------------------------------------------------------
// cgroup v1 and v2: one node group, one child group per task.

class CgroupTaskScope : public TaskMemoryScope {
 public:
  CgroupTaskScope(MemoryCapMechanism version, std::string dir, int64_t reserved_bytes,
                  int64_t cap_bytes)
      : version_(version),
        dir_(std::move(dir)),
        reserved_bytes_(reserved_bytes),
        cap_bytes_(cap_bytes) {}

  ~CgroupTaskScope() override {
    KillGroupMembers(version_, dir_);
    RemoveGroup(version_, dir_);
  }

  void PrepareProcess(ProcessSpec& spec) override {
    // "0" is the writing process: the child, before it executes.
    spec.child_writes.push_back({"/proc/self/oom_score_adj",
                                 OomScoreAdjustment(reserved_bytes_, cap_bytes_),
                                 /*required=*/false});
    spec.child_writes.push_back({absl::StrCat(dir_, "/cgroup.procs"), "0"});
  }

  absl::Status Attach(pid_t pid) override {
    BiasOomScore(pid, reserved_bytes_, cap_bytes_);
    absl::Status moved = WriteText(absl::StrCat(dir_, "/cgroup.procs"), absl::StrCat(pid));
    if (!moved.ok()) {
      kill(pid, SIGKILL);
      attach_error_ = Annotate(
          moved, absl::StrCat("cannot put process ", pid, " under the memory cap; it was killed"));
      return attach_error_;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<TaskMemoryUsage> Finish() override {
    if (!attach_error_.ok()) return attach_error_;
    KillGroupMembers(version_, dir_);
    return memory_cap_internal::ReadTaskUsage(version_, dir_);
  }

  std::string cgroup_path() const override { return dir_; }

 private:
  const MemoryCapMechanism version_;
  const std::string dir_;
  const int64_t reserved_bytes_;
  const int64_t cap_bytes_;
  absl::Status attach_error_;
};

class CgroupNodeCap : public NodeMemoryCap {
 public:
  CgroupNodeCap(MemoryCapMechanism version, std::string dir, int64_t cap_bytes)
      : version_(version), dir_(std::move(dir)), cap_bytes_(cap_bytes) {}

  ~CgroupNodeCap() override {
    // Task groups whose scopes could not remove them (still busy then).
    for (const std::string& child : SubdirectoryNames(dir_)) {
      std::string child_dir = absl::StrCat(dir_, "/", child);
      KillGroupMembers(version_, child_dir);
      RemoveGroup(version_, child_dir);
    }
    RemoveGroup(version_, dir_);
  }

  MemoryCapMechanism mechanism() const override { return version_; }
  int64_t cap_bytes() const override { return cap_bytes_; }
  std::string cgroup_path() const override { return dir_; }
  int64_t PeakBytes() const override { return ReadBytes(FilesOf(version_).peak); }
  int64_t CurrentBytes() const override { return ReadBytes(FilesOf(version_).current); }
  std::string Describe() const override {
    return absl::StrCat(MechanismName(version_), " at ", dir_, ", cap ",
                        FormatByteSize(cap_bytes_));
  }

  absl::StatusOr<std::unique_ptr<TaskMemoryScope>> StartTask(const std::string& task_id,
                                                             int64_t reserved_bytes) override {
    std::string dir =
        absl::StrCat(dir_, "/task-", next_task_.fetch_add(1), "-", SanitizeName(task_id, 48));
    if (mkdir(dir.c_str(), 0755) != 0) {
      return absl::InternalError(
          absl::ErrnoToStatus(
              errno, absl::StrCat("cannot create the memory group ", dir, " for task ", task_id))
              .message());
    }
    if (version_ == MemoryCapMechanism::kCgroupV2) {
      // An OOM kill takes the whole task (nvcc and its cicc, ptxas), not
      // one process that nvcc would then report as a crash. Linux >= 4.19.
      std::string oom_group = absl::StrCat(dir, "/memory.oom.group");
      if (Exists(oom_group)) WriteText(oom_group, "1").IgnoreError();
    }
    return std::make_unique<CgroupTaskScope>(version_, std::move(dir), reserved_bytes, cap_bytes_);
  }

 private:
  int64_t ReadBytes(const char* file) const {
    absl::StatusOr<std::string> text = ReadText(absl::StrCat(dir_, "/", file));
    int64_t bytes = 0;
    if (text.ok()) absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &bytes);
    return bytes;
  }

  const MemoryCapMechanism version_;
  const std::string dir_;
  const int64_t cap_bytes_;
  std::atomic<uint64_t> next_task_{1};
};

// Makes the memory controller available to the children of `own`, the group
// this process is in. cgroup v2 lets a group hand controllers to its children
// only while it has no processes of its own (the root excepted), so on EBUSY
// this process moves into a leaf of its own, `own`/distcc-cuda-<pid>-worker,
// and tries again.
absl::Status EnableMemoryForChildren(const std::string& own) {
  std::string control = absl::StrCat(own, "/cgroup.subtree_control");
  ASSIGN_OR_RETURN(std::string enabled, ReadText(control));
  if (HasWord(enabled, "memory")) return absl::OkStatus();
  int error = WriteRaw(control, "+memory");
  if (error == 0) return absl::OkStatus();
  if (error != EBUSY) {
    return absl::ErrnoToStatus(error, absl::StrCat("cannot write '+memory' to ", control));
  }
  std::string leaf = absl::StrCat(own, "/", OwnGroupPrefix(), "worker");
  if (mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", leaf, " to move this worker"));
  }
  RETURN_IF_ERROR(WriteText(absl::StrCat(leaf, "/cgroup.procs"), absl::StrCat(getpid())));
  absl::Status status = WriteText(control, "+memory");
  if (!status.ok()) {
    return Annotate(status, absl::StrCat(own,
                                         " still holds other processes besides this worker; run "
                                         "the worker alone in its cgroup (e.g. as the "
                                         "container's PID 1) or in a delegated subtree"));
  }
  return absl::OkStatus();
}

}  // namespace

// Creates the node group of `version` with limit `cap_bytes`.

absl::StatusOr<std::unique_ptr<NodeMemoryCap>> CreateCgroupNode(MemoryCapMechanism version,
                                                                const MemoryCapOptions& options) {
  const CgroupFiles& files = FilesOf(version);
  const bool v2 = version == MemoryCapMechanism::kCgroupV2;
  ASSIGN_OR_RETURN(std::string own,
                   memory_cap_internal::OwnCgroupDirectory(version, options.paths));
  // An earlier node of this process may have moved it into its worker leaf.
  if (v2 && BaseName(own) == absl::StrCat(OwnGroupPrefix(), "worker")) own = Parent(own);
  if (v2) {
    ASSIGN_OR_RETURN(std::string controllers, ReadText(absl::StrCat(own, "/cgroup.controllers")));
    if (!HasWord(controllers, "memory")) {
      return absl::FailedPreconditionError(
          absl::StrCat("the memory controller is not available to ", own, " (cgroup.controllers: '",
                       absl::StripAsciiWhitespace(controllers), "')"));
    }
  } else if (!Exists(absl::StrCat(own, "/", files.limit))) {
    return absl::FailedPreconditionError(absl::StrCat(own, " has no ", files.limit));
  }

  const std::string name = SanitizeName(options.name, 64);
  RemoveStaleGroups(version, own, name);
  if (v2) RETURN_IF_ERROR(EnableMemoryForChildren(own));

  std::string dir = absl::StrCat(own, "/", OwnGroupPrefix(), name);
  for (int suffix = 2; mkdir(dir.c_str(), 0755) != 0; ++suffix) {
    if (errno != EEXIST || suffix > 99) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot create the node group ", dir));
    }
    dir = absl::StrCat(own, "/", OwnGroupPrefix(), name, "-", suffix);
  }
  auto configure = [&]() -> absl::StatusOr<int64_t> {
    std::string limit_file = absl::StrCat(dir, "/", files.limit);
    std::string swap_file = absl::StrCat(dir, "/", files.swap_limit);
    if (v2) {
      RETURN_IF_ERROR(WriteText(limit_file, absl::StrCat(options.cap_bytes)));
      // Swapped-out memory is outside memory.max and memory.peak: none, so
      // that the cap is what a task really gets.
      if (Exists(swap_file)) WriteText(swap_file, "0").IgnoreError();
      RETURN_IF_ERROR(WriteText(absl::StrCat(dir, "/cgroup.subtree_control"), "+memory"));
    } else {
      // Always 1 since Linux 5.x; older kernels need it before any child.
      std::string hierarchy = absl::StrCat(dir, "/memory.use_hierarchy");
      absl::StatusOr<std::string> current = ReadText(hierarchy);
      if (current.ok() && ParseCount(*current) == 0) {
        RETURN_IF_ERROR(WriteText(hierarchy, "1"));
      }
      RETURN_IF_ERROR(WriteText(limit_file, absl::StrCat(options.cap_bytes)));
      // With swap accounting, memory plus swap under the same cap (written
      // after the memory limit, which must not exceed it).
      if (Exists(swap_file)) {
        WriteText(swap_file, absl::StrCat(options.cap_bytes)).IgnoreError();
      }
      std::string swappiness = absl::StrCat(dir, "/memory.swappiness");
      if (Exists(swappiness)) WriteText(swappiness, "0").IgnoreError();
    }
    ASSIGN_OR_RETURN(std::string limit, ReadText(limit_file));
    std::optional<int64_t> in_force = ParseCount(limit);
    if (!in_force.has_value() || *in_force > options.cap_bytes ||
        *in_force < options.cap_bytes - 2 * kMiB) {
      return absl::InternalError(absl::StrCat(limit_file, " reads '",
                                              absl::StripAsciiWhitespace(limit), "' after writing ",
                                              options.cap_bytes));
    }
    return *in_force;
  };
  absl::StatusOr<int64_t> cap = configure();
  if (!cap.ok()) {
    rmdir(dir.c_str());
    return cap.status();
  }
  return std::make_unique<CgroupNodeCap>(version, std::move(dir), *cap);
}

namespace {

// The lowest numeric `file` in `dir` and its ancestors up to `root`.
void LowestLimitUpTo(const std::string& root, std::string dir, const char* file,
                     std::optional<CgroupLimit>& lowest) {
  for (;;) {
    std::string path = absl::StrCat(dir, "/", file);
    absl::StatusOr<std::string> text = ReadText(path);
    std::optional<int64_t> bytes = text.ok() ? ParseCount(*text) : std::nullopt;
    if (bytes.has_value() && *bytes > 0 && (!lowest.has_value() || *bytes < lowest->bytes)) {
      lowest = CgroupLimit{*bytes, path};
    }
    if (dir.size() <= root.size() || dir == "/") break;
    dir = Parent(dir);
  }
}

}  // namespace

absl::StatusOr<std::string> OwnCgroupDirectory(MemoryCapMechanism version,
                                               const CgroupPaths& paths) {
  const bool v2 = version == MemoryCapMechanism::kCgroupV2;
  const std::string root = RootOf(version, paths);
  const std::string marker = absl::StrCat(root, v2 ? "/cgroup.controllers" : "/cgroup.procs");
  if (!Exists(marker)) {
    return absl::NotFoundError(absl::StrCat("no memory hierarchy mounted at ", root));
  }
  ASSIGN_OR_RETURN(std::string lines, ReadText(paths.proc_self_cgroup));
  std::optional<std::string> own;
  // "hierarchy-id:controller,list:path"; v2's line is "0::path".
  for (absl::string_view line : absl::StrSplit(lines, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    bool match = false;
    if (v2) {
      match = fields[0] == "0" && fields[1].empty();
    } else {
      for (absl::string_view controller : absl::StrSplit(fields[1], ',')) {
        match = match || controller == "memory";
      }
    }
    if (match) own = std::string(fields[2]);
  }
  if (!own.has_value()) {
    return absl::NotFoundError(absl::StrCat(paths.proc_self_cgroup, " names no ",
                                            v2 ? "cgroup v2 group" : "memory cgroup"));
  }
  // Drop leading components until the path exists below the mount: a
  // container sees its own group mounted as the root.
  absl::string_view path = absl::StripSuffix(*own, "/");
  for (;;) {
    std::string dir = absl::StrCat(root, path);
    if (IsDirectory(dir)) return dir;
    if (path.empty()) break;
    size_t next = path.find('/', 1);
    path = next == absl::string_view::npos ? absl::string_view() : path.substr(next);
  }
  return absl::NotFoundError(absl::StrCat("no directory for ", *own, " under ", root));
}

absl::StatusOr<TaskMemoryUsage> ReadTaskUsage(MemoryCapMechanism version, const std::string& dir) {
  const CgroupFiles& files = FilesOf(version);
  TaskMemoryUsage usage;
  std::string peak_file = absl::StrCat(dir, "/", files.peak);
  if (version == MemoryCapMechanism::kCgroupV2 && !Exists(peak_file)) {
    usage.peak_bytes = 0;  // Linux < 5.19
  } else {
    ASSIGN_OR_RETURN(std::string peak, ReadText(peak_file));
    std::optional<int64_t> bytes = ParseCount(peak);
    if (!bytes.has_value()) {
      return absl::InternalError(absl::StrCat(
          peak_file, " holds '", absl::StripAsciiWhitespace(peak), "', not a byte count"));
    }
    usage.peak_bytes = *bytes;
  }
  ASSIGN_OR_RETURN(std::string events, ReadText(absl::StrCat(dir, "/", files.oom_counts)));
  // v2 counts a kill in the group of the killed process and its ancestors
  // (with memory.oom.group also oom_group_kill); v1 only in the group of the
  // killed process (memory.oom_control's oom_kill, Linux >= 4.13). v1's
  // memory.failcnt is no sign of a kill: it stays 0 on recent kernels even
  // when the limit is hit, and reclaim alone may raise it on older ones.
  usage.killed_for_memory = KeyedCount(events, "oom_kill").value_or(0) > 0 ||
                            KeyedCount(events, "oom_group_kill").value_or(0) > 0;
  return usage;
}

}  // namespace distcc_cuda::memory_cap_internal

namespace distcc_cuda {

std::optional<CgroupLimit> OwnCgroupMemoryLimit(const CgroupPaths& paths) {
  std::optional<CgroupLimit> lowest;
  for (MemoryCapMechanism version :
       {MemoryCapMechanism::kCgroupV2, MemoryCapMechanism::kCgroupV1}) {
    absl::StatusOr<std::string> own = memory_cap_internal::OwnCgroupDirectory(version, paths);
    if (!own.ok()) continue;
    memory_cap_internal::LowestLimitUpTo(memory_cap_internal::RootOf(version, paths), *own,
                                         memory_cap_internal::FilesOf(version).limit, lowest);
  }
  // v1 writes "no limit" as a huge number (2^63 rounded down to a page).
  int64_t total = memory_cap_internal::MeminfoBytes(paths.meminfo, "MemTotal:");
  int64_t unlimited = total > 0 ? total : int64_t{1} << 62;
  if (lowest.has_value() && lowest->bytes >= unlimited) return std::nullopt;
  return lowest;
}

}  // namespace distcc_cuda
