// SPDX-License-Identifier: Apache-2.0
// The toolkits distcc-cuda installed for this user (`distcc-cuda toolkit`):
// one folder each, a CUDA_HOME named by nvcc's version (cuda-13.2.86), with
// the manifest of its content. An install works in a scratch folder and
// renames the finished toolkit into place, under a lock, so two at once
// install once and an interrupted one leaves nothing half made.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/toolkit/cuda_release.h"

namespace distcc_cuda::client {

struct InstalledToolkit {
  CudaRelease version;    // nvcc's, "13.2.86"
  std::string cuda_home;  // the folder: CUDA_HOME
  std::string nvcc() const { return cuda_home + "/bin/nvcc"; }
};

class ToolkitStore {
 public:
  explicit ToolkitStore(std::string root) : root_(std::move(root)) {}
  const std::string& root() const { return root_; }

  // The installed toolkits (those with a manifest), newest first.
  std::vector<InstalledToolkit> List() const;
  // The newest installed toolkit that `release` admits ("13.2": any 13.2.x).
  std::optional<InstalledToolkit> Find(const CudaRelease& release) const;

  // Installs `release` from PyPI with `python`'s pip, unless a toolkit it
  // admits is installed and matches its manifest (one that does not is
  // installed again). Says what it does on `progress`. FAILED_PRECONDITION
  // for a release PyPI has no compiler for, saying where to get it.
  absl::StatusOr<InstalledToolkit> Install(const CudaRelease& release, const std::string& python,
                                           std::ostream& progress);
  // Removes every installed toolkit `release` admits; NOT_FOUND if none.
  absl::StatusOr<std::vector<InstalledToolkit>> Remove(const CudaRelease& release);

  // Bytes the toolkit's files take (apparent size).
  static int64_t SizeOf(const InstalledToolkit& toolkit);

 private:
  // Scratch folders of installs that died (their lock is gone); call with
  // the lock held.
  void RemoveLeftovers() const;
  std::string root_;
};

}  // namespace distcc_cuda::client
