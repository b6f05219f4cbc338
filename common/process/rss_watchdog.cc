// SPDX-License-Identifier: Apache-2.0
// The memory cap where no cgroup can be had: a watchdog that samples the RSS
// of every task's process tree and kills the task furthest above its
// reservation when the node's sum exceeds the cap.
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

}  // namespace

std::unique_ptr<NodeMemoryCap> CreateWatchdogNode(const MemoryCapOptions& options,
                                                  std::string why) {
  return std::make_unique<WatchdogNodeCap>(options, std::move(why));
}

}  // namespace distcc_cuda::memory_cap_internal
