// SPDX-License-Identifier: Apache-2.0
// The toolkits a worker compiles with: its own (WorkerOptions::nvcc_path,
// fingerprinted and refreshed in worker.cc) and the further ones its
// coordinator serves (`--served-toolkit 12.8,13.2`), fingerprinted once at
// start; each task names its build's toolchain, and this picks the toolkit.
#include <filesystem>

#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/toolchain.h"
#include "worker/worker.h"

namespace distcc_cuda::worker {

absl::Status Worker::AddFurtherToolkits() {
  for (const FurtherToolkit& more : options_.more_toolkits) {
    ASSIGN_OR_RETURN(v1::ToolchainFingerprint toolchain,
                     SharedToolchainFingerprint(more.nvcc_path, kHostCompiler, options_.work_dir));
    RETURN_IF_ERROR(CheckRequiredRelease(toolchain, options_.required_nvcc_release));
    // Two toolkits of one toolchain would be one; the first stays.
    bool known = toolchain.digest() == this->toolchain().digest();
    for (const FurtherToolkitState& had : more_toolkits_) {
      known = known || had.toolchain.digest() == toolchain.digest();
    }
    if (known) continue;
    const std::string root =
        std::filesystem::path(AbsolutePath(more.nvcc_path)).parent_path().parent_path().string();
    more_toolkits_.push_back({more.nvcc_path, root, std::move(toolchain)});
  }
  return absl::OkStatus();
}

Worker::TaskToolkit Worker::ToolkitOf(const v1::Task& task) const {
  for (const FurtherToolkitState& more : more_toolkits_) {
    if (!task.toolchain_digest().empty() && more.toolchain.digest() == task.toolchain_digest()) {
      return TaskToolkit{more.nvcc_path, more.root, more.toolchain.digest()};
    }
  }
  // Its own, also for a digest it does not have (its own toolkit changed
  // under it since the lease): the result then names the toolchain that
  // compiled it, and the coordinator compiles the unit again elsewhere.
  return TaskToolkit{options_.nvcc_path, toolkit_root_, toolchain().digest()};
}

}  // namespace distcc_cuda::worker
