// SPDX-License-Identifier: Apache-2.0
// `distcc-cuda build -- COMMAND...`: runs an existing build (pip, setup.py,
// cmake --build, ninja, make) with the launcher in its environment, and
// serves the launcher calls it makes as one build session: each compile is
// a unit on the cluster (the embedded default without --coordinator), local
// include scans are throttled to this machine's cores, and one summary ends
// the build. The command's own exit status is the result.
#pragma once

#include <future>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/cancellation.h"
#include "common/nvcc/gpu_targets.h"
#include "common/transport/tls_credentials.h"

namespace distcc_cuda::client {

struct CommandBuildOptions {
  std::vector<std::string> command;  // argv of the build tool
  std::string coordinator_address;   // empty: start the embedded default
  std::optional<TlsMaterial> tls;    // for coordinator_address
  std::string nvcc_path;             // the pinned nvcc: PYTORCH_NVCC's, and the embedded worker's
  std::string state_dir;             // embedded default's store
  int embedded_slots = 0;            // 0: the usable cores
  bool embedded_sandbox = true;
  absl::Duration connect_timeout = absl::Seconds(5);
  // --trace: where to write the session's timeline (BuildTrace); empty: none.
  std::string trace_path;
  // The GPUs that will load what the command builds (BuildOptions'), as
  // they become known: the local GPUs' detection (nvidia-smi) runs beside
  // the session's start, and the first compile waits for it.
  std::shared_future<std::vector<TargetGpu>> target_gpus;
  bool strict_arch = false;
  // DISTCC_CUDA_FALLBACK=local: a compile the cluster fails runs here
  // instead of failing (CompileOrRunHere).
  bool fallback_local = false;
  // Not owned; may be null. Cancelling it (Ctrl-C, SIGTERM) stops the
  // command (SIGTERM) and every compile it has on the cluster.
  const CancelToken* cancel = nullptr;
};

// The environment the command gets, for a session at `session_address`
// (unix:PATH) whose launcher is `self` and whose nvcc is `nvcc`: the
// launcher for PyTorch (PYTORCH_NVCC) and CMake (CMAKE_CUDA_COMPILER_LAUNCHER),
// the session, a build id, and MAX_JOBS = `max_jobs`.
std::vector<std::pair<std::string, std::string>> SessionEnvironment(
    const std::string& self, const std::string& nvcc, const std::string& session_address,
    const std::string& build_id, int max_jobs);

// How many jobs the build tool may start so that the cluster's memory
// admission, not the job count, decides what compiles: four per slot of
// the cluster, at least 16, at most 512.
int MaxJobsFor(int cluster_slots);

// Runs the command as a build session; prints the session's progress and
// summary to `out`. Returns the command's wait status (waitpid's). An error
// only when the session could not start (no coordinator, no socket, the
// command cannot be run).
absl::StatusOr<int> RunCommandBuild(const CommandBuildOptions& options, std::ostream& out);

}  // namespace distcc_cuda::client
