// SPDX-License-Identifier: Apache-2.0
// The toolkits distcc-cuda installed for this user (`distcc-cuda toolkit`):
// one folder each, a CUDA_HOME named by nvcc's version (cuda-13.2.86), with
// the manifest of its content. An install works in a scratch folder and
// renames the finished toolkit into place, under a lock, so two at once
// install once and an interrupted one leaves nothing half made.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/files.h"
#include "common/nvcc/cuda_release.h"
#include "common/nvcc/toolchain.h"
#include "common/nvcc/toolkit_download.h"
#include "common/transport/tls_credentials.h"

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
  // Nothing of a failed install stays behind.
  absl::StatusOr<InstalledToolkit> Install(const CudaRelease& release, const std::string& python,
                                           std::ostream& progress);
  // Installs the newest toolkit of `wanted` that the coordinator at
  // `coordinator` serves (distcc-cuda-coordinator toolkit add), the same
  // way: so a release PyPI lacks (12.x) comes from the cluster that has it.
  // The coordinator is hostile until checked: the fetch is bounded by
  // `limits` and writes nothing outside the toolkit's folder
  // (DownloadToolkit), a pinned toolkit is taken only with its manifest,
  // an unpinned one is said to be, and its nvcc is asked what it is in a
  // sandbox (AskServedNvcc). NOT_FOUND naming what it serves; for a pin it
  // serves another manifest of, FAILED_PRECONDITION naming both.
  absl::StatusOr<InstalledToolkit> InstallServed(const WantedToolkit& wanted,
                                                 const std::string& coordinator,
                                                 const std::optional<TlsMaterial>& tls,
                                                 const ToolkitFetchLimits& limits,
                                                 std::ostream& progress);
  // Removes every installed toolkit `release` admits; NOT_FOUND if none.
  absl::StatusOr<std::vector<InstalledToolkit>> Remove(const CudaRelease& release,
                                                       std::ostream& progress);

  // Bytes the toolkit's files take (apparent size).
  static int64_t SizeOf(const InstalledToolkit& toolkit);

 private:
  // The store's lock; says so on `progress` when it waits for another.
  absl::StatusOr<FolderLock> Lock(std::ostream& progress) const;
  // Scratch folders of installs and removals that died; with the lock held.
  void RemoveLeftovers() const;
  // Moves `folder` to a scratch name, then deletes it; with the lock held.
  absl::Status Discard(const std::string& folder) const;
  // Leaves a toolkit in SCRATCH/cuda.
  using Fetch = std::function<absl::Status(const std::string& scratch)>;
  // What the nvcc of the toolkit at CUDA_HOME says it is.
  using Ask = std::function<absl::StatusOr<NvccRelease>(const std::string& cuda_home)>;
  // OK if an installed toolkit of the release may be taken as it is.
  using Accept = std::function<absl::Status(const InstalledToolkit& installed)>;
  // An install: under the lock, unless one that `accept` takes is there;
  // `what` says what `fetch` fetches, `ask` how its nvcc is asked.
  absl::StatusOr<InstalledToolkit> InstallWith(const CudaRelease& release, const std::string& what,
                                               const Fetch& fetch, const Ask& ask,
                                               const Accept& accept, std::ostream& progress);
  // What fetch left in `scratch`, checked (its nvcc, asked with `ask`, is
  // `release`), manifested and renamed into place.
  absl::StatusOr<InstalledToolkit> Finish(const CudaRelease& release, const std::string& scratch,
                                          const Ask& ask) const;
  std::string root_;
};

}  // namespace distcc_cuda::client
