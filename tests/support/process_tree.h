// SPDX-License-Identifier: Apache-2.0
// What a test sees of the machine's processes in /proc: a process's
// descendants, and whether one of them still runs (a pid with its start
// time, so that a reused pid is not mistaken for the process).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace distcc_cuda::testing {

struct ProcessId {
  pid_t pid = 0;
  uint64_t start_ticks = 0;  // field 22 of /proc/PID/stat
  std::string command;       // field 2, without the parentheses
};

// Every process below `ancestor` (children, their children, ...).
std::vector<ProcessId> DescendantsOf(pid_t ancestor);

// The parent of `pid`, its parent, ... up to process 1 (for messages).
std::vector<ProcessId> AncestorsOf(pid_t pid);

// The processes of `processes` that still run (zombies do not count).
std::vector<ProcessId> StillRunning(const std::vector<ProcessId>& processes);

// How many processes other than this one have a command line holding
// `text` anywhere.
int ProcessesMentioning(const std::string& text);

// Those processes, one a line: "pid PID, parent PPID, state S: ARGV", for
// the message of a test that found one too many.
std::string DescribeProcessesMentioning(const std::string& text);

// "cicc (1234), ptxas (1240)", for failure messages.
std::string Describe(const std::vector<ProcessId>& processes);

}  // namespace distcc_cuda::testing
