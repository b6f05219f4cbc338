// SPDX-License-Identifier: Apache-2.0
#include "tests/support/process_tree.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"

namespace distcc_cuda::testing {
namespace {

struct Stat {
  ProcessId id;
  pid_t parent = 0;
  char state = '?';
};

std::optional<Stat> ReadStat(pid_t pid) {
  absl::StatusOr<std::string> text = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!text.ok()) return std::nullopt;
  // "PID (COMMAND) STATE PPID ...": the command may hold spaces and ')'.
  size_t open = text->find('(');
  size_t close = text->rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  std::vector<std::string> fields = absl::StrSplit(text->substr(close + 2), ' ');
  // After the command: state is field 3, ppid 4, start time 22.
  if (fields.size() < 20) return std::nullopt;
  Stat stat;
  stat.id.pid = pid;
  stat.id.command = text->substr(open + 1, close - open - 1);
  stat.state = fields[0].empty() ? '?' : fields[0][0];
  if (!absl::SimpleAtoi(fields[1], &stat.parent) ||
      !absl::SimpleAtoi(fields[19], &stat.id.start_ticks)) {
    return std::nullopt;
  }
  return stat;
}

std::vector<Stat> AllProcesses() {
  std::vector<Stat> all;
  std::error_code error;
  for (std::filesystem::directory_iterator it("/proc", error), end; !error && it != end;
       it.increment(error)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(it->path().filename().string(), &pid)) continue;
    if (std::optional<Stat> stat = ReadStat(pid)) all.push_back(*stat);
  }
  return all;
}

// The command lines (NUL-separated arguments) of the processes other than
// this one that hold `text`, by pid.
std::map<pid_t, std::string> CommandLinesMentioning(const std::string& text) {
  std::map<pid_t, std::string> found;
  const pid_t self = getpid();
  std::error_code error;
  for (std::filesystem::directory_iterator it("/proc", error), end; !error && it != end;
       it.increment(error)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(it->path().filename().string(), &pid) || pid == self) continue;
    absl::StatusOr<std::string> cmdline = ReadFile(it->path().string() + "/cmdline");
    if (cmdline.ok() && absl::StrContains(*cmdline, text)) found[pid] = *cmdline;
  }
  return found;
}

}  // namespace

std::vector<ProcessId> DescendantsOf(pid_t ancestor) {
  std::map<pid_t, std::vector<const Stat*>> children;
  std::vector<Stat> all = AllProcesses();
  for (const Stat& stat : all) children[stat.parent].push_back(&stat);
  std::vector<ProcessId> found;
  std::vector<pid_t> frontier = {ancestor};
  while (!frontier.empty()) {
    pid_t parent = frontier.back();
    frontier.pop_back();
    for (const Stat* child : children[parent]) {
      found.push_back(child->id);
      frontier.push_back(child->id.pid);
    }
  }
  return found;
}

std::vector<ProcessId> AncestorsOf(pid_t pid) {
  std::vector<ProcessId> chain;
  std::optional<Stat> stat = ReadStat(pid);
  while (stat && stat->parent > 1 && chain.size() < 64) {
    stat = ReadStat(stat->parent);
    if (stat) chain.push_back(stat->id);
  }
  return chain;
}

std::vector<ProcessId> StillRunning(const std::vector<ProcessId>& processes) {
  std::vector<ProcessId> running;
  for (const ProcessId& process : processes) {
    std::optional<Stat> now = ReadStat(process.pid);
    if (now && now->id.start_ticks == process.start_ticks && now->state != 'Z' &&
        now->state != 'X') {
      running.push_back(process);
    }
  }
  return running;
}

int ProcessesMentioning(const std::string& text) {
  return static_cast<int>(CommandLinesMentioning(text).size());
}

std::string DescribeProcessesMentioning(const std::string& text) {
  std::string described;
  for (const auto& [pid, argv] : CommandLinesMentioning(text)) {
    std::optional<Stat> stat = ReadStat(pid);
    absl::StrAppend(&described, "pid ", pid, ", parent ", stat ? stat->parent : -1, ", state ",
                    std::string(1, stat ? stat->state : '?'), ": ",
                    absl::StrJoin(absl::StrSplit(argv, '\0', absl::SkipEmpty()), " "), "\n");
  }
  return described;
}

std::string Describe(const std::vector<ProcessId>& processes) {
  return absl::StrJoin(processes, ", ", [](std::string* out, const ProcessId& process) {
    absl::StrAppend(out, process.command, " (", process.pid, ")");
  });
}

}  // namespace distcc_cuda::testing
