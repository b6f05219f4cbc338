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
#include "client/plan/options.h"
#include "common/base/cancellation.h"
#include "common/nvcc/gpu_targets.h"

namespace distcc_cuda::client {

// The cluster, the scan's environment, the trace and --strict-arch are the
// CommonBuildOptions' (client/plan/options.h); the embedded worker runs in the
// background here.
struct CommandBuildOptions : CommonBuildOptions {
  std::vector<std::string> command;  // argv of the build tool
  // The GPUs that will load what the command builds (BuildOptions'), as
  // they become known: the local GPUs' detection (nvidia-smi) runs beside
  // the session's start, and the first compile waits for it.
  std::shared_future<std::vector<TargetGpu>> target_gpus;
  // DISTCC_CUDA_FALLBACK=local: a compile the cluster fails runs here
  // instead of failing (CompileOrRunHere).
  bool fallback_local = false;
  // The host C++ compiler the caller's $CXX (or c++) names, resolved: the
  // launcher takes its place as CXX. "": CXX is left as it is (it holds a
  // launcher already, "ccache g++", or names no compiler found).
  std::string real_cxx;
  // Whether `out` is a terminal that redraws a status line below the
  // command's output (IsLiveTerminal).
  bool live_terminal = false;
  // Not owned; may be null. Cancelling it (Ctrl-C, SIGTERM) stops the
  // command (SIGTERM) and every compile it has on the cluster.
  const CancelToken* cancel = nullptr;
};

// The environment the command gets, for a session at `session_address`
// (unix:PATH) whose launcher is `self` and whose nvcc is `nvcc`: the
// launcher for PyTorch (PYTORCH_NVCC) and CMake (CMAKE_CUDA_COMPILER_LAUNCHER,
// CMAKE_CXX_COMPILER_LAUNCHER); with a `cxx_launcher` (a link to the
// launcher named as the host compiler: PyTorch runs $CXX as one program, to
// ask its version too), CXX is that link and DISTCC_CUDA_CXX `real_cxx`, the
// compiler behind it; the session, a build id, and MAX_JOBS = `max_jobs`.
std::vector<std::pair<std::string, std::string>> SessionEnvironment(
    const std::string& self, const std::string& nvcc, const std::string& cxx_launcher,
    const std::string& real_cxx, const std::string& session_address, const std::string& build_id,
    int max_jobs);

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
