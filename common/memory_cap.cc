// SPDX-License-Identifier: Apache-2.0
#include "common/memory_cap.h"

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
#include "common/byte_size.h"
#include "common/status.h"

namespace distcc_cuda {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
// Every node group's name starts with this, then "<pid>-<name>".
constexpr absl::string_view kGroupPrefix = "distcc-cuda-";
// A removed group's last processes may take a moment to leave it.
constexpr absl::Duration kRemoveRetryFor = absl::Seconds(1);
constexpr absl::Duration kRemoveRetryStep = absl::Milliseconds(5);

// ---------------------------------------------------------------------------
// Small files, read and written with plain syscalls: cgroup files must be
// written with one write(), and errno says why a write was refused.

absl::StatusOr<std::string> ReadText(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::string text;
  char buffer[4096];
  for (;;) {
    ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      int error = errno;
      close(fd);
      return absl::ErrnoToStatus(error, absl::StrCat("cannot read ", path));
    }
    if (got == 0) break;
    text.append(buffer, static_cast<size_t>(got));
  }
  close(fd);
  return text;
}

// Writes `text` to `path` in one write(); 0 or the errno.
int WriteRaw(const std::string& path, absl::string_view text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t written;
  do {
    written = write(fd, text.data(), text.size());
  } while (written < 0 && errno == EINTR);
  int error = written < 0 ? errno : static_cast<size_t>(written) == text.size() ? 0 : EIO;
  close(fd);
  return error;
}

absl::Status WriteText(const std::string& path, absl::string_view text) {
  if (int error = WriteRaw(path, text); error != 0) {
    return absl::ErrnoToStatus(error, absl::StrCat("cannot write '", text, "' to ", path));
  }
  return absl::OkStatus();
}

// Whether whitespace-separated `text` holds `word` ("cpu memory pids").
bool HasWord(absl::string_view text, absl::string_view word) {
  for (absl::string_view item : absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    if (item == word) return true;
  }
  return false;
}

bool Exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::string Parent(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Names of the subdirectories of `dir` (empty if it cannot be listed).
std::vector<std::string> SubdirectoryNames(const std::string& dir) {
  std::vector<std::string> names;
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) return names;
  while (struct dirent* entry = readdir(listing)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (entry->d_type == DT_DIR ||
        (entry->d_type == DT_UNKNOWN && IsDirectory(absl::StrCat(dir, "/", name)))) {
      names.push_back(std::move(name));
    }
  }
  closedir(listing);
  return names;
}

// A whole-file integer such as "268435456\n"; nullopt for "max" or garbage.
std::optional<int64_t> ParseCount(absl::string_view text) {
  int64_t value;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) return std::nullopt;
  return value;
}

// The value of `key` in "key value" lines (memory.events, memory.oom_control).
std::optional<int64_t> KeyedCount(absl::string_view text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t value;
    if (fields.size() == 2 && fields[0] == key && absl::SimpleAtoi(fields[1], &value)) {
      return value;
    }
  }
  return std::nullopt;
}

// A field of /proc/meminfo in bytes ("MemTotal:"), 0 if unknown.
int64_t MeminfoBytes(const std::string& meminfo_path, absl::string_view key) {
  absl::StatusOr<std::string> text = ReadText(meminfo_path);
  if (!text.ok()) return 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t kib;
    if (fields.size() >= 2 && fields[0] == key && absl::SimpleAtoi(fields[1], &kib)) {
      return kib * 1024;
    }
  }
  return 0;
}

// Characters of a cgroup name, at most `max_length` of them.
std::string SanitizeName(absl::string_view name, size_t max_length) {
  std::string clean;
  for (char c : name.substr(0, max_length)) {
    bool keep =
        absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    clean.push_back(keep ? c : '_');
  }
  if (clean.empty() || clean == "." || clean == "..") clean = "node";
  return clean;
}

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
// groups, and worker leaves ("distcc-cuda-<pid>-worker"). The kernel refuses
// to remove a group that still has processes, and a live process's groups are
// skipped, so nothing in use is touched.
void RemoveStaleGroups(const std::string& parent, const std::string& name) {
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
      rmdir(absl::StrCat(dir, "/", child).c_str());
    }
    rmdir(dir.c_str());
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
  RemoveStaleGroups(own, name);
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

// ---------------------------------------------------------------------------
// The watchdog: samples the RSS of every task's process tree and kills the
// task furthest above its reservation when the node's sum exceeds the cap.

// Set in a process's flags from fork until it executes a program.
constexpr uint64_t kForkedNoExec = 0x40;  // PF_FORKNOEXEC

struct ProcStat {
  char state = '?';
  uint64_t flags = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  uint64_t start_time = 0;  // clock ticks after boot; tells a reused pid apart
  int64_t rss_pages = 0;
};

std::optional<ProcStat> ReadProcStat(pid_t pid) {
  absl::StatusOr<std::string> text = ReadText(absl::StrCat("/proc/", pid, "/stat"));
  if (!text.ok()) return std::nullopt;
  // The command name may hold spaces and parentheses; the fields after the
  // last ')' are plain: field 3 (state) is fields[0].
  size_t paren = text->rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(*text).substr(paren + 1), ' ', absl::SkipEmpty());
  ProcStat stat;
  if (fields.size() < 22 || fields[0].empty() || !absl::SimpleAtoi(fields[1], &stat.ppid) ||
      !absl::SimpleAtoi(fields[2], &stat.pgrp) || !absl::SimpleAtoi(fields[6], &stat.flags) ||
      !absl::SimpleAtoi(fields[19], &stat.start_time) ||
      !absl::SimpleAtoi(fields[21], &stat.rss_pages)) {
    return std::nullopt;
  }
  stat.state = fields[0][0];
  return stat;
}

// The children of every thread of `pid`; false if the kernel has no
// children files (CONFIG_PROC_CHILDREN unset).
bool ReadChildren(pid_t pid, std::vector<pid_t>& children) {
  std::string task_dir = absl::StrCat("/proc/", pid, "/task");
  DIR* listing = opendir(task_dir.c_str());
  if (listing == nullptr) return true;  // exited meanwhile
  bool supported = true;
  while (struct dirent* entry = readdir(listing)) {
    if (entry->d_name[0] == '.') continue;
    std::string path = absl::StrCat(task_dir, "/", entry->d_name, "/children");
    absl::StatusOr<std::string> text = ReadText(path);
    if (!text.ok()) {
      // A thread that just exited has no directory either; tell the two apart.
      if (absl::IsNotFound(text.status()) && Exists(absl::StrCat(task_dir, "/", entry->d_name))) {
        supported = false;
      }
      continue;
    }
    for (absl::string_view word : absl::StrSplit(*text, ' ', absl::SkipEmpty())) {
      pid_t child;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(word), &child)) children.push_back(child);
    }
  }
  closedir(listing);
  return supported;
}

// One watched task.
struct WatchedTask {
  std::vector<std::pair<pid_t, uint64_t>> roots;  // attached pids, start times
  std::map<pid_t, uint64_t> known;                // every process seen, start time
  int64_t reserved_bytes = 0;
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  bool killed = false;
};

class Watchdog {
 public:
  Watchdog(int64_t cap_bytes, absl::Duration interval, bool scan_all)
      : cap_bytes_(cap_bytes),
        interval_(interval),
        page_bytes_(sysconf(_SC_PAGESIZE)),
        scan_all_(scan_all) {
    thread_ = std::thread([this] { Run(); });
  }

  ~Watchdog() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

  // The largest total of the tasks' memory sampled so far.
  int64_t peak_total() const {
    absl::MutexLock lock(&mu_);
    return peak_total_;
  }
  int64_t current_total() const {
    absl::MutexLock lock(&mu_);
    return tasks_.empty() ? 0 : current_total_;
  }

  absl::Status Attach(const std::shared_ptr<WatchedTask>& task, pid_t pid) {
    std::optional<ProcStat> stat = ReadProcStat(pid);
    if (!stat.has_value()) {
      kill(pid, SIGKILL);
      return absl::InternalError(
          absl::StrCat("cannot read /proc/", pid, "/stat to watch process ", pid, "; killed it"));
    }
    absl::MutexLock lock(&mu_);
    task->roots.emplace_back(pid, stat->start_time);
    task->known[pid] = stat->start_time;
    tasks_.insert(task);
    return absl::OkStatus();
  }

  // Stops watching `task`, kills what is left of it, returns its usage.
  TaskMemoryUsage Finish(const std::shared_ptr<WatchedTask>& task) {
    absl::MutexLock lock(&mu_);
    tasks_.erase(task);
    KillTask(*task, /*whole_groups=*/false);
    return TaskMemoryUsage{task->peak_bytes, task->killed};
  }

 private:
  void Run() {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      if (tasks_.empty()) {
        auto busy_or_stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || !tasks_.empty();
        };
        mu_.Await(absl::Condition(&busy_or_stopping));
        continue;
      }
      SampleLocked();
      mu_.AwaitWithTimeout(absl::Condition(&stop_), interval_);
    }
  }

  void SampleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t total = 0;
    for (const std::shared_ptr<WatchedTask>& task : tasks_) {
      task->current_bytes = Measure(*task);
      task->peak_bytes = std::max(task->peak_bytes, task->current_bytes);
      if (!task->killed) total += task->current_bytes;
    }
    peak_total_ = std::max(peak_total_, total);
    current_total_ = total;
    if (total <= cap_bytes_) return;
    WatchedTask* victim = nullptr;
    for (const std::shared_ptr<WatchedTask>& task : tasks_) {
      if (task->killed || task->current_bytes == 0) continue;
      if (victim == nullptr || task->current_bytes - task->reserved_bytes >
                                   victim->current_bytes - victim->reserved_bytes) {
        victim = task.get();
      }
    }
    if (victim == nullptr) return;
    victim->killed = true;
    KillTask(*victim, /*whole_groups=*/true);
  }

  // The summed RSS of the task's processes now; refreshes `task.known`.
  int64_t Measure(WatchedTask& task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::map<pid_t, uint64_t> seen;
    std::vector<pid_t> pending;
    for (const auto& [pid, start] : task.known) pending.push_back(pid);
    int64_t pages = 0;
    auto visit = [&](pid_t pid, const ProcStat& stat) {
      seen[pid] = stat.start_time;
      if (stat.state == 'Z') return;
      // A root that has not yet executed its program is a fork of this
      // (possibly large) process whose pages it shares: not the task's.
      bool root = std::any_of(task.roots.begin(), task.roots.end(),
                              [pid](const auto& r) { return r.first == pid; });
      if (root && (stat.flags & kForkedNoExec) != 0) return;
      pages += stat.rss_pages;
    };
    while (!pending.empty()) {
      pid_t pid = pending.back();
      pending.pop_back();
      if (seen.count(pid) != 0) continue;
      std::optional<ProcStat> stat = ReadProcStat(pid);
      if (!stat.has_value()) continue;
      auto known = task.known.find(pid);
      if (known != task.known.end() && known->second != stat->start_time) continue;  // reused
      visit(pid, *stat);
      if (!scan_all_ && !ReadChildren(pid, pending)) scan_all_ = true;
    }
    if (scan_all_) {
      // Processes of the task's groups, and their children, in one pass
      // over /proc (children mostly have larger pids than their parents;
      // one that does not is found by the next sample).
      std::vector<pid_t> groups;
      for (const auto& [pid, start] : task.roots) groups.push_back(pid);
      DIR* proc = opendir("/proc");
      while (struct dirent* entry = proc == nullptr ? nullptr : readdir(proc)) {
        pid_t pid;
        if (!absl::SimpleAtoi(entry->d_name, &pid) || seen.count(pid) != 0) continue;
        std::optional<ProcStat> stat = ReadProcStat(pid);
        if (!stat.has_value()) continue;
        if (std::find(groups.begin(), groups.end(), stat->pgrp) != groups.end() ||
            seen.count(stat->ppid) != 0) {
          visit(pid, *stat);
        }
      }
      if (proc != nullptr) closedir(proc);
    }
    task.known = std::move(seen);
    return pages * page_bytes_;
  }

  // SIGKILLs the task's processes that are still the ones seen (pid and start
  // time), and with `whole_groups` the process groups its roots lead, while
  // the roots are unreaped (so their pids cannot have been reused).
  void KillTask(const WatchedTask& task, bool whole_groups) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (whole_groups) {
      for (const auto& [pid, start] : task.roots) {
        std::optional<ProcStat> stat = ReadProcStat(pid);
        if (stat.has_value() && stat->start_time == start && stat->pgrp == pid) kill(-pid, SIGKILL);
      }
    }
    for (const auto& [pid, start] : task.known) {
      std::optional<ProcStat> stat = ReadProcStat(pid);
      if (stat.has_value() && stat->start_time == start) kill(pid, SIGKILL);
    }
  }

  const int64_t cap_bytes_;
  int64_t peak_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t current_total_ ABSL_GUARDED_BY(mu_) = 0;  // at the last sample
  const absl::Duration interval_;
  const int64_t page_bytes_;
  mutable absl::Mutex mu_;
  bool scan_all_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::shared_ptr<WatchedTask>> tasks_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

class WatchdogTaskScope : public TaskMemoryScope {
 public:
  WatchdogTaskScope(std::shared_ptr<Watchdog> watchdog, int64_t reserved_bytes)
      : watchdog_(std::move(watchdog)), task_(std::make_shared<WatchedTask>()) {
    task_->reserved_bytes = reserved_bytes;
  }

  ~WatchdogTaskScope() override {
    if (!finished_) watchdog_->Finish(task_);
  }

  void PrepareProcess(ProcessSpec& spec) override {
    // Watched from the moment it runs; the caller's own callback still runs.
    spec.on_started = [this, then = std::move(spec.on_started)](pid_t pid) {
      Attach(pid).IgnoreError();
      if (then) then(pid);
    };
  }

  absl::Status Attach(pid_t pid) override {
    absl::Status attached = watchdog_->Attach(task_, pid);
    if (!attached.ok()) attach_error_ = attached;
    return attached;
  }

  absl::StatusOr<TaskMemoryUsage> Finish() override {
    TaskMemoryUsage usage = watchdog_->Finish(task_);
    finished_ = true;
    if (!attach_error_.ok()) return attach_error_;
    return usage;
  }

  std::string cgroup_path() const override { return ""; }

 private:
  std::shared_ptr<Watchdog> watchdog_;
  std::shared_ptr<WatchedTask> task_;
  absl::Status attach_error_;
  bool finished_ = false;
};

class WatchdogNodeCap : public NodeMemoryCap {
 public:
  WatchdogNodeCap(const MemoryCapOptions& options, std::string why)
      : cap_bytes_(options.cap_bytes),
        interval_(options.watchdog_interval),
        why_(std::move(why)),
        watchdog_(std::make_shared<Watchdog>(options.cap_bytes, options.watchdog_interval,
                                             options.watchdog_scan_all_processes)) {}

  MemoryCapMechanism mechanism() const override { return MemoryCapMechanism::kRssWatchdog; }
  int64_t cap_bytes() const override { return cap_bytes_; }
  std::string cgroup_path() const override { return ""; }
  int64_t PeakBytes() const override { return watchdog_->peak_total(); }
  int64_t CurrentBytes() const override { return watchdog_->current_total(); }
  std::string Describe() const override {
    return absl::StrCat("RSS watchdog every ", absl::FormatDuration(interval_), ", cap ",
                        FormatByteSize(cap_bytes_), " (", why_, ")");
  }

  absl::StatusOr<std::unique_ptr<TaskMemoryScope>> StartTask(const std::string& /*task_id*/,
                                                             int64_t reserved_bytes) override {
    return std::make_unique<WatchdogTaskScope>(watchdog_, reserved_bytes);
  }

 private:
  const int64_t cap_bytes_;
  const absl::Duration interval_;
  const std::string why_;
  std::shared_ptr<Watchdog> watchdog_;
};

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

std::string MechanismName(MemoryCapMechanism mechanism) {
  switch (mechanism) {
    case MemoryCapMechanism::kCgroupV2:
      return "cgroup v2";
    case MemoryCapMechanism::kCgroupV1:
      return "cgroup v1";
    case MemoryCapMechanism::kRssWatchdog:
      return "RSS watchdog";
  }
  return "unknown";
}

namespace memory_cap_internal {

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

}  // namespace memory_cap_internal

std::optional<CgroupLimit> OwnCgroupMemoryLimit(const CgroupPaths& paths) {
  std::optional<CgroupLimit> lowest;
  for (MemoryCapMechanism version :
       {MemoryCapMechanism::kCgroupV2, MemoryCapMechanism::kCgroupV1}) {
    absl::StatusOr<std::string> own = memory_cap_internal::OwnCgroupDirectory(version, paths);
    if (!own.ok()) continue;
    LowestLimitUpTo(RootOf(version, paths), *own, FilesOf(version).limit, lowest);
  }
  // v1 writes "no limit" as a huge number (2^63 rounded down to a page).
  int64_t total = MeminfoBytes(paths.meminfo, "MemTotal:");
  int64_t unlimited = total > 0 ? total : int64_t{1} << 62;
  if (lowest.has_value() && lowest->bytes >= unlimited) return std::nullopt;
  return lowest;
}

DefaultCap DefaultMemoryCap(const CgroupPaths& paths) {
  constexpr int64_t kFloor = 256 * kMiB;
  std::optional<DefaultCap> from_limit;
  if (std::optional<CgroupLimit> limit = OwnCgroupMemoryLimit(paths)) {
    int64_t headroom = std::min(std::max(limit->bytes / 20, 256 * kMiB), limit->bytes / 2);
    from_limit =
        DefaultCap{limit->bytes - headroom,
                   absl::StrCat("container cgroup limit ", FormatByteSize(limit->bytes), " (",
                                limit->file, ") less ", FormatByteSize(headroom), " headroom")};
  }
  std::optional<DefaultCap> from_available;
  if (int64_t available = MeminfoBytes(paths.meminfo, "MemAvailable:"); available > 0) {
    int64_t headroom = std::max(available / 10, 512 * kMiB);
    from_available = DefaultCap{
        available - headroom, absl::StrCat("available memory ", FormatByteSize(available), " less ",
                                           FormatByteSize(headroom), " headroom")};
  }
  DefaultCap cap;
  if (from_limit.has_value() &&
      (!from_available.has_value() || from_limit->bytes <= from_available->bytes)) {
    cap = *from_limit;
  } else if (from_available.has_value()) {
    cap = *from_available;
  } else {
    cap = DefaultCap{kFloor, "a fixed minimum (no cgroup limit, MemAvailable unknown)"};
  }
  cap.bytes = std::max(cap.bytes, kFloor);
  return cap;
}

absl::StatusOr<std::unique_ptr<NodeMemoryCap>> NodeMemoryCap::Create(
    const MemoryCapOptions& options) {
  if (options.cap_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory cap must be positive, not ", options.cap_bytes, " bytes"));
  }
  if (options.watchdog_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("watchdog interval must be positive, not ",
                     absl::FormatDuration(options.watchdog_interval)));
  }
  int64_t total = MeminfoBytes(options.paths.meminfo, "MemTotal:");
  if (total > 0 && options.cap_bytes > total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory cap ", FormatByteSize(options.cap_bytes), " exceeds this machine's memory (",
        FormatByteSize(total), "); the host's OOM killer would act before the cap; use at most ",
        FormatByteSize(DefaultMemoryCap(options.paths).bytes)));
  }
  if (std::optional<CgroupLimit> limit = OwnCgroupMemoryLimit(options.paths);
      limit.has_value() && options.cap_bytes > limit->bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory cap ", FormatByteSize(options.cap_bytes),
        " exceeds the limit of this process's cgroup (", FormatByteSize(limit->bytes), " in ",
        limit->file, "); use at most ", FormatByteSize(DefaultMemoryCap(options.paths).bytes)));
  }
  if (options.force_watchdog) {
    return std::make_unique<WatchdogNodeCap>(options, "requested");
  }
  std::vector<std::string> reasons;
  for (MemoryCapMechanism version :
       {MemoryCapMechanism::kCgroupV2, MemoryCapMechanism::kCgroupV1}) {
    absl::StatusOr<std::unique_ptr<NodeMemoryCap>> node = CreateCgroupNode(version, options);
    if (node.ok()) return node;
    reasons.push_back(absl::StrCat(MechanismName(version), ": ", node.status().message()));
  }
  return std::make_unique<WatchdogNodeCap>(options, absl::StrJoin(reasons, "; "));
}

}  // namespace distcc_cuda
