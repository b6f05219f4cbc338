// SPDX-License-Identifier: Apache-2.0
#include "client/toolkit/toolkit_store.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/toolkit/pypi_toolkit.h"
#include "client/toolkit/served_toolkit_check.h"
#include "common/base/byte_size.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/nvcc/toolchain.h"
#include "common/nvcc/toolkit_download.h"
#include "common/store/cas_client.h"
#include "common/store/digest.h"
#include "common/store/toolkit_manifest.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

constexpr char kFolderPrefix[] = "cuda-";
constexpr char kScratchPrefix[] = ".installing-";

// The toolkit in `folder`, if its name is cuda-VERSION and it has a manifest.
std::optional<InstalledToolkit> ToolkitIn(const fs::path& folder) {
  // A name, then a manifest: a folder being removed may vanish meanwhile.
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

// The entries of `folder` (none when it cannot be read), without throwing.
std::vector<std::string> Entries(const std::string& folder) {
  std::vector<std::string> entries;
  std::error_code error;
  fs::directory_iterator walk(folder, error);
  for (; !error && walk != fs::directory_iterator(); walk.increment(error)) {
    entries.push_back(walk->path().string());
  }
  return entries;
}

// nvcc's own version, and that it is the release asked for.
absl::StatusOr<CudaRelease> CheckedVersion(const NvccRelease& said, const CudaRelease& wanted) {
  absl::StatusOr<CudaRelease> version = CudaRelease::Parse(said.version);
  if (!version.ok() || !version->has_patch() || !wanted.Admits(*version)) {
    return absl::InternalError(absl::StrCat("the nvcc fetched for ", wanted.ToString(),
                                            " says it is ", TerminalSafe(said.version, false, 32),
                                            " (", TerminalSafe(said.release, false, 32),
                                            "): not the release asked for"));
  }
  return *version;
}

// OK if an installed toolkit may be taken for a served one: its manifest
// passes the checks of a coordinator's (an older install's may not), the
// folder holds what it lists, and it is the one whose SHA-256 is
// `pinned_hash` when that is not empty.
absl::Status ServedIntact(const InstalledToolkit& toolkit, const std::string& pinned_hash) {
  const std::string path = toolkit.cuda_home + "/" + kToolkitManifestName;
  ASSIGN_OR_RETURN(std::string manifest, ReadFile(path));
  RETURN_IF_ERROR(ParseToolkitManifest(manifest).status());
  RETURN_IF_ERROR(VerifyManifest(toolkit.cuda_home));
  const std::string hash = DigestOf(manifest).hash;
  if (pinned_hash.empty() || hash == pinned_hash) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("CUDA ", toolkit.version.ToString(), " at ", toolkit.cuda_home,
                   " is not the pinned toolkit (its manifest is sha256:", hash, ")"));
}

// How an nvcc from PyPI is asked: as it is, like pip's own code.
absl::StatusOr<NvccRelease> AskAsItIs(const std::string& cuda_home) {
  return AskNvccRelease(cuda_home + "/bin/nvcc");
}

}  // namespace

std::vector<InstalledToolkit> ToolkitStore::List() const {
  std::vector<InstalledToolkit> found;
  for (const std::string& folder : Entries(root_)) {
    if (std::optional<InstalledToolkit> toolkit = ToolkitIn(folder)) found.push_back(*toolkit);
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
  for (const std::string& entry : Entries(root_)) {
    if (absl::StartsWith(fs::path(entry).filename().string(), kScratchPrefix)) {
      (void)RemoveAll(entry);
    }
  }
}

absl::Status ToolkitStore::Discard(const std::string& folder) const {
  // Out of sight first (a rename), so that no build finds it half removed.
  ASSIGN_OR_RETURN(std::string doomed, MakeTempDirectory(root_, kScratchPrefix));
  std::error_code error;
  fs::rename(folder, doomed, error);  // onto the empty folder just made
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot move ", folder, " out of the way: ", error.message()));
  }
  return RemoveAll(doomed);
}

absl::StatusOr<FolderLock> ToolkitStore::Lock(std::ostream& progress) const {
  absl::StatusOr<FolderLock> lock = FolderLock::Acquire(root_, "another toolkit install");
  if (lock.ok() || !absl::IsFailedPrecondition(lock.status())) return lock;
  progress << "distcc-cuda: waiting for another install or removal in " << root_ << " to finish\n"
           << std::flush;
  return FolderLock::AcquireWaiting(root_);
}

absl::StatusOr<InstalledToolkit> ToolkitStore::Install(const CudaRelease& release,
                                                       const std::string& python,
                                                       std::ostream& progress) {
  if (!PyPiHasCompiler(release)) return absl::FailedPreconditionError(WhereToGet(release));
  return InstallWith(
      release,
      absl::StrCat("CUDA ", release.ToString(),
                   "'s compiler from PyPI (cuda-toolkit[nvcc,cccl], about 300 MB unpacked)"),
      [&](const std::string& scratch) { return FetchFromPyPi(release, scratch, python); },
      AskAsItIs,
      [](const InstalledToolkit& installed) { return VerifyManifest(installed.cuda_home); },
      progress);
}

absl::StatusOr<InstalledToolkit> ToolkitStore::InstallServed(const WantedToolkit& wanted,
                                                             const std::string& coordinator,
                                                             const std::optional<TlsMaterial>& tls,
                                                             const ToolkitFetchLimits& limits,
                                                             std::ostream& progress) {
  auto channel = OpenChannel(coordinator, tls);
  auto stub = v1::ContentStore::NewStub(channel);
  ASSIGN_OR_RETURN(std::vector<v1::ServedToolkit> served,
                   ListServedToolkits(*stub, absl::Seconds(30)));
  ASSIGN_OR_RETURN(v1::ServedToolkit toolkit, ChooseServedToolkit(served, wanted));
  // The fetch's own limits end it; no call of it ends sooner.
  CasClient blobs(std::move(stub), limits.deadline);
  const bool pinned = !wanted.pinned_hash.empty();
  const std::string pin_hint = absl::StrCat(wanted.release.ToString(), "@", ManifestPin(toolkit),
                                            " --coordinator ", coordinator);
  absl::StatusOr<InstalledToolkit> installed = InstallWith(
      *CudaRelease::Parse(toolkit.version()),
      absl::StrCat(DescribeServedToolkit(toolkit), " from the coordinator at ", coordinator),
      [&](const std::string& scratch) {
        // Only "serves none" is NOT_FOUND (install then asks PyPI): a
        // file that cannot be had fails the install.
        absl::Status fetched = DownloadToolkit(blobs, toolkit, scratch + "/cuda", limits);
        return fetched.ok()
                   ? fetched
                   : absl::FailedPreconditionError(absl::StrCat(
                         "the coordinator's toolkit could not be fetched: ", fetched.message()));
      },
      [&](const std::string& cuda_home) -> absl::StatusOr<NvccRelease> {
        // Not NOT_FOUND (a toolkit without its nvcc): install would ask PyPI.
        absl::StatusOr<NvccRelease> said = AskServedNvcc(cuda_home, pinned, pin_hint, progress);
        if (absl::IsNotFound(said.status())) {
          return absl::FailedPreconditionError(said.status().message());
        }
        return said;
      },
      [&](const InstalledToolkit& installed) {
        return ServedIntact(installed, wanted.pinned_hash);
      },
      progress);
  if (installed.ok() && !pinned) {
    progress << "distcc-cuda: " << UnpinnedNotice(wanted, toolkit, "distcc-cuda toolkit install")
             << "\n";
  }
  return installed;
}

absl::StatusOr<InstalledToolkit> ToolkitStore::InstallWith(const CudaRelease& release,
                                                           const std::string& what,
                                                           const Fetch& fetch, const Ask& ask,
                                                           const Accept& accept,
                                                           std::ostream& progress) {
  // Another install into this folder finishes first; then its toolkit is found.
  ASSIGN_OR_RETURN(FolderLock lock, Lock(progress));
  RemoveLeftovers();
  if (std::optional<InstalledToolkit> installed = Find(release)) {
    absl::Status intact = accept(*installed);
    if (intact.ok()) {
      progress << "distcc-cuda: CUDA " << installed->version.ToString()
               << " is installed already (its files match its manifest)\n";
      return *installed;
    }
    progress << "distcc-cuda: " << intact.message() << "; installing it again\n";
    RETURN_IF_ERROR(Discard(installed->cuda_home));
  }
  ASSIGN_OR_RETURN(std::string scratch, MakeTempDirectory(root_, kScratchPrefix));
  progress << "distcc-cuda: fetching " << what << "\n" << std::flush;
  const absl::Time start = absl::Now();
  absl::Status fetched = fetch(scratch);
  absl::StatusOr<InstalledToolkit> toolkit = fetched.ok() ? Finish(release, scratch, ask) : fetched;
  (void)RemoveAll(scratch);
  if (toolkit.ok()) {
    progress << "distcc-cuda: installed CUDA " << toolkit->version.ToString() << " ("
             << FormatByteSize(SizeOf(*toolkit)) << ", every file checked) in "
             << absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(100)))
             << "\n";
  }
  return toolkit;
}

absl::StatusOr<InstalledToolkit> ToolkitStore::Finish(const CudaRelease& release,
                                                      const std::string& scratch,
                                                      const Ask& ask) const {
  const std::string cuda_home = scratch + "/cuda";
  ASSIGN_OR_RETURN(NvccRelease said, ask(cuda_home));
  ASSIGN_OR_RETURN(CudaRelease version, CheckedVersion(said, release));
  ASSIGN_OR_RETURN(std::string manifest, ManifestOf(cuda_home));
  RETURN_IF_ERROR(WriteFileAtomically(cuda_home + "/" + kToolkitManifestName, manifest));
  const std::string final_home = absl::StrCat(root_, "/", kFolderPrefix, version.ToString());
  std::error_code error;
  // A folder there without a manifest is an old install's wreck.
  if (fs::exists(final_home, error)) RETURN_IF_ERROR(Discard(final_home));
  fs::rename(cuda_home, final_home, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot move ", cuda_home, " to ", final_home, ": ", error.message()));
  }
  // Installed either way; a folder not yet synced only risks a crash of
  // the machine, after which the toolkit is installed again.
  (void)SyncFolder(root_);
  return InstalledToolkit{version, final_home};
}

absl::StatusOr<std::vector<InstalledToolkit>> ToolkitStore::Remove(const CudaRelease& release,
                                                                   std::ostream& progress) {
  ASSIGN_OR_RETURN(FolderLock lock, Lock(progress));
  RemoveLeftovers();
  std::vector<InstalledToolkit> removed;
  for (const InstalledToolkit& toolkit : List()) {
    if (!release.Admits(toolkit.version)) continue;
    RETURN_IF_ERROR(Discard(toolkit.cuda_home));
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
  return FileBytesIn(toolkit.cuda_home);
}

}  // namespace distcc_cuda::client
