// SPDX-License-Identifier: Apache-2.0
// How a program that came from another machine runs on this one: a
// toolkit a coordinator served is hostile until its operator pinned it, so
// its programs run as a compile does, never as the worker or the client
// itself. In an empty sandbox (its user, no network, no task, the toolkit
// read-only: Sandbox::RunAlone), under a scope of the node's memory cap,
// with the caller's timeout. What a worker asks a toolkit it fetched (its
// version, its fingerprint's dry run) and what a client's check of a
// fetched nvcc runs in.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/process/memory_cap.h"
#include "common/process/sandbox.h"
#include "common/process/subprocess.h"

namespace distcc_cuda {

// Runs `spec` under a task scope of `cap`, from its first instruction.
// RESOURCE_EXHAUSTED when the cap killed it, saying so; RunProcess's errors
// otherwise.
absl::StatusOr<ProcessResult> RunCapped(NodeMemoryCap& cap, const ProcessSpec& spec);

// Runs programs of the toolkit at `toolkit_root`: in `sandbox` (RunAlone)
// when there is one, else as they are; under `cap` when there is one. The
// sandbox and the cap must outlive the runner.
ProcessRunner ConfinedRunner(const Sandbox* sandbox, NodeMemoryCap* cap, std::string toolkit_root);

}  // namespace distcc_cuda
