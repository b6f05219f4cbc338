// SPDX-License-Identifier: Apache-2.0
// The toolkits a worker compiles with: its own (WorkerOptions::nvcc_path,
// fingerprinted here at start and refreshed in worker.cc) and the further
// ones its coordinator serves (`--served-toolkit 12.8,13.2`), fingerprinted
// once at start, a fetched toolkit's programs confined as a compile's;
// each task names its build's toolchain, and this picks the toolkit.
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/toolchain.h"
#include "common/process/confined_run.h"
#include "worker/worker.h"

namespace distcc_cuda::worker {

std::string ToolkitRootOf(const std::string& nvcc_path) {
  return std::filesystem::path(AbsolutePath(nvcc_path)).parent_path().parent_path().string();
}

absl::Status Worker::FingerprintToolkits() {
  const bool fetched = options_.toolkit_fetched || !options_.more_toolkits.empty();
  if (fetched && sandbox_ == nullptr && !options_.toolkit_pinned) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", options_.name,
        " would run the programs of a toolkit its coordinator sent, unpinned, without a sandbox; "
        "pin it (--served-toolkit RELEASE@sha256:HEX) or let the worker sandbox compiles"));
  }
  if (options_.toolkit_fetched) {
    toolkit_programs_ = {ConfinedRunner(sandbox_.get(), memory_cap_.get(), toolkit_root_), true};
  }
  ASSIGN_OR_RETURN(
      v1::ToolchainFingerprint toolchain,
      options_.toolkit_fetched
          ? ComputeToolchainFingerprint(options_.nvcc_path, kHostCompiler, options_.work_dir,
                                        toolkit_programs_)
          : SharedToolchainFingerprint(options_.nvcc_path, kHostCompiler, options_.work_dir));
  RETURN_IF_ERROR(CheckRequiredRelease(toolchain, options_.required_nvcc_release));
  const std::string files = ToolchainFilesSignature(options_.nvcc_path, toolkit_programs_);
  {
    absl::MutexLock lock(&toolchain_mu_);
    toolchain_ = toolchain;
    toolchain_files_ = files;
  }
  return AddFurtherToolkits();
}

absl::Status Worker::AddFurtherToolkits() {
  for (const FurtherToolkit& more : options_.more_toolkits) {
    const std::string root = ToolkitRootOf(more.nvcc_path);
    ASSIGN_OR_RETURN(v1::ToolchainFingerprint toolchain,
                     ComputeToolchainFingerprint(
                         more.nvcc_path, kHostCompiler, options_.work_dir,
                         {ConfinedRunner(sandbox_.get(), memory_cap_.get(), root), true}));
    RETURN_IF_ERROR(CheckRequiredRelease(toolchain, options_.required_nvcc_release));
    // Two toolkits of one toolchain would be one; the first stays.
    bool known = toolchain.digest() == this->toolchain().digest();
    for (const FurtherToolkitState& had : more_toolkits_) {
      known = known || had.toolchain.digest() == toolchain.digest();
    }
    if (known) continue;
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
