// SPDX-License-Identifier: Apache-2.0
// What a worker's task becomes as its result: a compile that could not
// start or was cancelled, how a compile that ran ended (its outcome, exit
// code, output within the limit, times and peak memory), and the outputs it
// wrote, collected from its task folder for upload. The stages of a task
// that touch neither the network nor the worker's state (Worker::RunTask
// runs them between fetching its inputs, running nvcc and uploading).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/process/memory_cap.h"
#include "common/process/subprocess.h"
#include "common/process/task_tree.h"
#include "common/store/cas_client.h"
#include "distcc_cuda/v1/worker.pb.h"

namespace distcc_cuda::worker {

// TASK_FAILED_TO_START with `message`: nvcc never ran (the unit is
// re-queued by the coordinator and fails after a few such losses).
v1::TaskResult FailedToStart(const std::string& message);
// TASK_CANCELLED, saying why.
v1::TaskResult Cancelled(const std::string& reason);

// `text` within `limit` bytes, with a line saying it was cut when it was
// (`truncated`: RunProcess already dropped what came past its limit).
std::string CappedOutput(std::string text, int64_t limit, bool truncated);

// Why nvcc never ran although the sandboxed process did (bwrap could not
// build the sandbox: exit 1 and its own message), or nullopt.
std::optional<std::string> SandboxNeverBuilt(const ProcessResult& run);

// What the task's limits and the worker report with a run.
struct RunLimits {
  int64_t max_output_bytes = 0;  // of stdout and of stderr each
  int64_t reserved_bytes = 0;    // the task's reservation, for messages
  int64_t cap_bytes = 0;         // the worker's memory cap, for messages
};

// How the compile `run` ended, measured by `usage`: TASK_TIMED_OUT,
// TASK_KILLED_FOR_MEMORY (naming the peak, the reservation and the cap) or
// TASK_COMPLETED with nvcc's exit code (and how it ended when that is not
// 0); its output capped; its peak the larger of the memory cap's and
// rusage's. No outputs yet: CollectOutputs adds them.
v1::TaskResult ResultOfRun(const ProcessResult& run, const TaskMemoryUsage& usage,
                           const RunLimits& limits);

// The outputs of a compile that exited 0, copied out of `tree` into a
// private folder in `task_dir` and added to `result` with their digests.
struct CollectedOutputs {
  std::vector<BlobSource> uploads;  // what to upload
  // Why an output is not a file the compile wrote ("" if all are): the
  // compile's result is then an error, not an object.
  std::string refused;
};
// Errors when the private folder cannot be made.
absl::StatusOr<CollectedOutputs> CollectOutputs(const TaskTree& tree, const v1::CompileUnit& unit,
                                                const std::string& task_dir,
                                                v1::TaskResult& result);

}  // namespace distcc_cuda::worker
