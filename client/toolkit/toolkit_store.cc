// SPDX-License-Identifier: Apache-2.0
#include "client/toolkit/toolkit_store.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/toolkit/pypi_toolkit.h"
#include "client/toolkit/toolkit_manifest.h"
#include "common/base/byte_size.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/toolchain.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

constexpr char kFolderPrefix[] = "cuda-";
constexpr char kScratchPrefix[] = ".installing-";

// The toolkit in `folder`, if its name is cuda-VERSION and it has a manifest.
std::optional<InstalledToolkit> ToolkitIn(const fs::path& folder) {
  const std::string name = folder.filename().string();
  if (!absl::StartsWith(name, kFolderPrefix)) return std::nullopt;
  absl::StatusOr<CudaRelease> version = CudaRelease::Parse(name.substr(sizeof(kFolderPrefix) - 1));
  std::error_code error;
  if (!version.ok() || !version->has_patch() ||
      !fs::is_regular_file(folder / kToolkitManifestName, error)) {
    return std::nullopt;
  }
  return InstalledToolkit{*version, folder.string()};
}

// nvcc's own version, and that it is the release asked for.
absl::StatusOr<CudaRelease> CheckedVersion(const std::string& nvcc, const CudaRelease& wanted) {
  ASSIGN_OR_RETURN(NvccRelease said, AskNvccRelease(nvcc));
  absl::StatusOr<CudaRelease> version = CudaRelease::Parse(said.version);
  if (!version.ok() || !version->has_patch() || !wanted.Admits(*version)) {
    return absl::InternalError(absl::StrCat("the nvcc PyPI gave for ", wanted.ToString(),
                                            " says it is ", said.version, " (", said.release,
                                            "): not the release asked for"));
  }
  return *version;
}

}  // namespace

std::vector<InstalledToolkit> ToolkitStore::List() const {
  std::vector<InstalledToolkit> found;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(root_, error)) {
    if (std::optional<InstalledToolkit> toolkit = ToolkitIn(entry.path())) {
      found.push_back(*toolkit);
    }
  }
  std::sort(found.begin(), found.end(), [](const InstalledToolkit& a, const InstalledToolkit& b) {
    return b.version < a.version;
  });
  return found;
}

std::optional<InstalledToolkit> ToolkitStore::Find(const CudaRelease& release) const {
  for (InstalledToolkit& toolkit : List()) {
    if (release.Admits(toolkit.version)) return toolkit;
  }
  return std::nullopt;
}

void ToolkitStore::RemoveLeftovers() const {
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(root_, error)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, kScratchPrefix)) (void)RemoveAll(entry.path().string());
  }
}

absl::StatusOr<InstalledToolkit> ToolkitStore::Install(const CudaRelease& release,
                                                       const std::string& python,
                                                       std::ostream& progress) {
  if (!PyPiHasCompiler(release)) return absl::FailedPreconditionError(WhereToGet(release));
  // Another install into this folder finishes first; then its toolkit is found.
  ASSIGN_OR_RETURN(FolderLock lock, FolderLock::AcquireWaiting(root_));
  RemoveLeftovers();
  if (std::optional<InstalledToolkit> installed = Find(release)) {
    absl::Status intact = VerifyManifest(installed->cuda_home);
    if (intact.ok()) {
      progress << "distcc-cuda: CUDA " << installed->version.ToString()
               << " is installed already (its files match its manifest)\n";
      return *installed;
    }
    progress << "distcc-cuda: " << intact.message() << "; installing it again\n";
    RETURN_IF_ERROR(RemoveAll(installed->cuda_home));
  }
  ASSIGN_OR_RETURN(std::string scratch, MakeTempDirectory(root_, kScratchPrefix));
  progress << "distcc-cuda: fetching CUDA " << release.ToString()
           << "'s compiler from PyPI (cuda-toolkit[nvcc,cccl], about 300 MB unpacked)\n"
           << std::flush;
  absl::Status fetched = FetchFromPyPi(release, scratch, python);
  const std::string cuda_home = scratch + "/cuda";
  absl::StatusOr<CudaRelease> version =
      fetched.ok() ? CheckedVersion(cuda_home + "/bin/nvcc", release) : fetched;
  absl::StatusOr<std::string> manifest = version.ok() ? ManifestOf(cuda_home) : version.status();
  absl::Status written =
      manifest.ok() ? WriteFileAtomically(cuda_home + "/" + kToolkitManifestName, *manifest)
                    : manifest.status();
  const std::string final_home =
      absl::StrCat(root_, "/", kFolderPrefix, version.ok() ? version->ToString() : "");
  std::error_code error;
  if (written.ok()) {
    // A folder there without a manifest is an old install's wreck.
    if (fs::exists(final_home, error)) (void)RemoveAll(final_home);
    fs::rename(cuda_home, final_home, error);
    if (error) {
      written = absl::InternalError(
          absl::StrCat("cannot move ", cuda_home, " to ", final_home, ": ", error.message()));
    }
  }
  (void)RemoveAll(scratch);
  RETURN_IF_ERROR(written);
  RETURN_IF_ERROR(SyncFolder(root_));
  InstalledToolkit toolkit{*version, final_home};
  progress << "distcc-cuda: installed CUDA " << version->ToString() << " ("
           << FormatByteSize(SizeOf(toolkit)) << ")\n";
  return toolkit;
}

absl::StatusOr<std::vector<InstalledToolkit>> ToolkitStore::Remove(const CudaRelease& release) {
  ASSIGN_OR_RETURN(FolderLock lock, FolderLock::AcquireWaiting(root_));
  std::vector<InstalledToolkit> removed;
  for (const InstalledToolkit& toolkit : List()) {
    if (!release.Admits(toolkit.version)) continue;
    // Out of sight first, so nobody finds it half removed.
    const std::string doomed =
        absl::StrCat(root_, "/", kScratchPrefix, "removing-", toolkit.version.ToString());
    std::error_code error;
    fs::rename(toolkit.cuda_home, doomed, error);
    if (error) {
      return absl::InternalError(
          absl::StrCat("cannot remove ", toolkit.cuda_home, ": ", error.message()));
    }
    RETURN_IF_ERROR(RemoveAll(doomed));
    removed.push_back(toolkit);
  }
  if (removed.empty()) {
    return absl::NotFoundError(absl::StrCat("no toolkit of CUDA ", release.ToString(),
                                            " is installed in ", root_,
                                            " (`distcc-cuda toolkit list` shows those that are)"));
  }
  return removed;
}

int64_t ToolkitStore::SizeOf(const InstalledToolkit& toolkit) {
  int64_t bytes = 0;
  std::error_code error;
  for (const fs::directory_entry& entry :
       fs::recursive_directory_iterator(toolkit.cuda_home, error)) {
    if (entry.is_regular_file(error) && !entry.is_symlink(error)) {
      bytes += static_cast<int64_t>(entry.file_size(error));
    }
  }
  return bytes;
}

}  // namespace distcc_cuda::client
