// SPDX-License-Identifier: Apache-2.0
// What starting one program costs a caller as large as a client planning
// tens of thousands of units or an embedded coordinator and worker: RunProcess
// (clone with CLONE_VM | CLONE_VFORK) against fork + exec, side by side in one
// run, from a process holding --heap-mb of touched memory while --threads
// other threads write to it (as gRPC's do). Run by ./bench/spawn.sh.
//
// Last line: heap_mb=… runs=… fork_exec_ms=… run_process_ms=… ratio=…
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/process/subprocess.h"

ABSL_FLAG(int, heap_mb, 1000, "memory the caller holds (touched), in MiB");
ABSL_FLAG(int, runs, 200, "programs started by each method");
ABSL_FLAG(int, threads, 4, "other threads writing to the heap meanwhile");
ABSL_FLAG(std::string, program, "/bin/true", "the program started");

namespace {

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// The plain way: fork, exec in the child, wait.
bool ForkExec(const std::string& program) {
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    execl(program.c_str(), program.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const size_t heap_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_heap_mb)) << 20;
  const int runs = absl::GetFlag(FLAGS_runs);
  const std::string program = absl::GetFlag(FLAGS_program);
  std::vector<char> heap(heap_bytes);
  memset(heap.data(), 1, heap.size());

  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int i = 0; i < absl::GetFlag(FLAGS_threads); ++i) {
    writers.emplace_back([&heap, &stop, i] {
      size_t at = static_cast<size_t>(i) * 4096;
      while (!stop.load(std::memory_order_relaxed)) {
        if (!heap.empty()) heap[at % heap.size()]++;
        at += 1 << 20;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
  }

  distcc_cuda::ProcessSpec spec;
  spec.argv = {program};
  spec.timeout = absl::Seconds(30);
  double fork_ms = 0;
  double run_ms = 0;
  int failures = 0;
  // Interleaved, so that both see the same machine.
  for (int i = 0; i < runs; ++i) {
    auto start = std::chrono::steady_clock::now();
    if (!ForkExec(program)) ++failures;
    fork_ms += MillisecondsSince(start);
    start = std::chrono::steady_clock::now();
    absl::StatusOr<distcc_cuda::ProcessResult> result = distcc_cuda::RunProcess(spec);
    if (!result.ok() || result->exit_code != 0) ++failures;
    run_ms += MillisecondsSince(start);
  }
  stop = true;
  for (std::thread& writer : writers) writer.join();
  if (failures > 0) {
    std::fprintf(stderr, "spawn_bench: %d of %d starts of %s failed\n", failures, 2 * runs,
                 program.c_str());
    return 1;
  }
  std::printf("heap_mb=%d runs=%d fork_exec_ms=%.2f run_process_ms=%.2f ratio=%.1f\n",
              absl::GetFlag(FLAGS_heap_mb), runs, fork_ms / runs, run_ms / runs, fork_ms / run_ms);
  return 0;
}
