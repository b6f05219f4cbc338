// SPDX-License-Identifier: Apache-2.0
#include "common/process/confined_run.h"

#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/base/status.h"

namespace distcc_cuda {

absl::StatusOr<ProcessResult> RunCapped(NodeMemoryCap& cap, const ProcessSpec& spec) {
  static std::atomic<int> runs{0};
  ASSIGN_OR_RETURN(std::unique_ptr<TaskMemoryScope> scope,
                   cap.StartTask(absl::StrCat("toolkit-program-", ++runs), 0));
  ProcessSpec capped = spec;
  scope->PrepareProcess(capped);
  absl::StatusOr<ProcessResult> ran = RunProcess(capped);
  absl::StatusOr<TaskMemoryUsage> usage = scope->Finish();
  if (!ran.ok()) return ran;
  if (!usage.ok()) return usage.status();
  if (usage->killed_for_memory) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a program of the toolkit was killed by the memory cap of ",
                     FormatByteSize(cap.cap_bytes()), " (peak ", FormatByteSize(usage->peak_bytes),
                     "); a real nvcc asked its version takes a few MiB"));
  }
  return ran;
}

ProcessRunner ConfinedRunner(const Sandbox* sandbox, NodeMemoryCap* cap, std::string toolkit_root) {
  ProcessRunner placed = [cap](const ProcessSpec& spec) -> absl::StatusOr<ProcessResult> {
    return cap != nullptr ? RunCapped(*cap, spec) : RunProcess(spec);
  };
  if (sandbox == nullptr) return placed;
  return [sandbox, placed, root = std::move(toolkit_root)](const ProcessSpec& spec) {
    return sandbox->RunAlone(spec, root, placed);
  };
}

}  // namespace distcc_cuda
