// SPDX-License-Identifier: Apache-2.0
// What `distcc-cuda build PLAN` is asked to do: the plan, the cluster (or
// the embedded default), where objects and the library go, the checks.
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/plan/options.h"
#include "common/base/cancellation.h"
#include "common/nvcc/gpu_targets.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::client {

// The cluster, the scan's environment, the trace and --strict-arch are the
// CommonBuildOptions' (client/plan/options.h).
struct BuildOptions : CommonBuildOptions {
  std::string plan_path;     // kernel manifest (.toml) or compile_commands.json
  std::string output_dir;    // objects in obj/, the library beside them
  std::string library_name;  // compile_commands.json only
  // compile_commands.json only: where objects go. Empty: each command's own
  // -o, as the build that wrote the file would put them.
  std::string objects_dir;
  // compile_commands.json only: the user's link (ParseLinkCommand). Empty:
  // g++ -shared with a SONAME and the shared CUDA runtime.
  std::string link_command;
  // --verify: how many units to rebuild here and compare (ParseVerifySample;
  // -1: all, 0: none).
  int verify_sample = 0;
  std::string required_nvcc_release;  // "12.8": refuse to build with another release
  // Whether a unit's -gencode targets may compile as units of their own,
  // whose objects are merged here before the link.
  v1::ArchitectureSplit architecture_split = v1::ARCHITECTURE_SPLIT_AUTO;
  // A coordinator lost during the build (a restart): how long to wait for it
  // to come back before giving up; the build is then submitted again and
  // what finished comes from its result cache. Zero: give up at once.
  absl::Duration reconnect_timeout = absl::Minutes(5);
  // The GPUs that will load the result (--target-gpus, or this machine's):
  // a unit none of whose images one of them can load is warned about before
  // anything compiles, or refused with strict_arch.
  std::vector<TargetGpu> target_gpus;
  // Not owned; may be null. Cancelling it (Ctrl-C) cancels the build: the
  // coordinator stops the units its workers run, and RunBuild returns
  // CANCELLED after saying what was cancelled.
  const CancelToken* cancel = nullptr;
};

}  // namespace distcc_cuda::client
