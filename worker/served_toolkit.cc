// SPDX-License-Identifier: Apache-2.0
#include "worker/served_toolkit.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/byte_size.h"
#include "common/base/files.h"
#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/nvcc/cuda_release.h"
#include "common/nvcc/toolkit_download.h"
#include "common/store/cas_client.h"
#include "common/store/digest.h"
#include "common/store/toolkit_manifest.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::worker {
namespace fs = std::filesystem;
namespace {

constexpr char kScratchPrefix[] = ".fetching-";

// A cached toolkit: its folder, when it was last used, its size.
struct Cached {
  std::string folder;
  fs::file_time_type used;
  int64_t bytes = 0;
};

// Scratch folders of fetches that died; with the cache's lock held.
void RemoveLeftovers(const std::string& cache_dir) {
  std::error_code error;
  fs::directory_iterator walk(cache_dir, error);
  for (; !error && walk != fs::directory_iterator(); walk.increment(error)) {
    if (absl::StartsWith(walk->path().filename().string(), kScratchPrefix)) {
      (void)RemoveAll(walk->path().string());
    }
  }
}

// The cache's toolkits (not a fetch's scratch folder).
std::vector<Cached> CachedToolkits(const std::string& cache_dir) {
  std::vector<Cached> cached;
  std::error_code error;
  fs::directory_iterator walk(cache_dir, error);
  for (; !error && walk != fs::directory_iterator(); walk.increment(error)) {
    const std::string folder = walk->path().string();
    const std::string name = walk->path().filename().string();
    if (absl::StartsWith(name, kScratchPrefix)) continue;
    std::error_code time_error;
    fs::file_time_type used = fs::last_write_time(folder + "/" + kToolkitManifestName, time_error);
    if (time_error) continue;
    cached.push_back({folder, used, FileBytesIn(folder)});
  }
  return cached;
}

// Least recently used first, beyond `max_bytes`; never one of `keep`.
void Evict(const std::string& cache_dir, int64_t max_bytes, const std::set<std::string>& keep) {
  std::vector<Cached> cached = CachedToolkits(cache_dir);
  std::sort(cached.begin(), cached.end(),
            [](const Cached& a, const Cached& b) { return a.used < b.used; });
  int64_t total = 0;
  for (const Cached& toolkit : cached) total += toolkit.bytes;
  for (const Cached& toolkit : cached) {
    if (total <= max_bytes) break;
    if (keep.count(toolkit.folder) > 0) continue;
    if (RemoveAll(toolkit.folder).ok()) {
      total -= toolkit.bytes;
      spdlog::info("toolkit cache: removed {} ({}), the least recently used", toolkit.folder,
                   FormatByteSize(toolkit.bytes));
    }
  }
}

// The toolkit in the cache at `home`, intact and of the manifest listed,
// marked as used now.
absl::Status UseCached(const std::string& home, const v1::ServedToolkit& toolkit) {
  // Checked as hostile again: an older worker's checks wrote it.
  ASSIGN_OR_RETURN(std::string written, ReadFile(home + "/" + kToolkitManifestName));
  RETURN_IF_ERROR(ParseToolkitManifest(written).status());
  RETURN_IF_ERROR(VerifyManifest(home));
  ASSIGN_OR_RETURN(Digest manifest, DigestOfFile(home + "/" + kToolkitManifestName));
  if (manifest != FromProto(toolkit.manifest())) {
    return absl::FailedPreconditionError(
        absl::StrCat(home, " holds another manifest than the coordinator lists now"));
  }
  std::error_code error;
  fs::last_write_time(home + "/" + kToolkitManifestName, fs::file_time_type::clock::now(), error);
  return absl::OkStatus();
}

// Room in the cache for a toolkit of `bytes`: refused when the whole cache
// is smaller, else the least recently used others (not `keep`) leave.
absl::Status MakeRoom(int64_t bytes, const v1::ServedToolkit& toolkit,
                      const ServedToolkitRequest& request, const std::set<std::string>& keep) {
  if (bytes > request.cache_max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("refused before its first byte: its files are ", FormatByteSize(bytes),
                     ", more than the whole toolkit cache (--toolkit-cache-size ",
                     FormatByteSize(request.cache_max_bytes), "); raise it if CUDA ",
                     TerminalSafe(toolkit.version(), false, 32), " is meant to be that large"));
  }
  Evict(request.cache_dir, request.cache_max_bytes - bytes, keep);
  return absl::OkStatus();
}

// Fetches `toolkit` into the cache folder `home`, through a scratch folder;
// returns how long it took.
absl::StatusOr<absl::Duration> Fetch(const v1::ServedToolkit& toolkit,
                                     const ServedToolkitRequest& request, const std::string& home,
                                     const std::set<std::string>& keep) {
  auto channel = OpenChannel(request.coordinator_address, request.tls);
  // The fetch's own limits end it; no call of it ends sooner.
  CasClient blobs(v1::ContentStore::NewStub(channel), request.limits.deadline);
  ASSIGN_OR_RETURN(std::string scratch, MakeTempDirectory(request.cache_dir, kScratchPrefix));
  const absl::Time start = absl::Now();
  absl::Status fetched =
      DownloadToolkit(blobs, toolkit, scratch + "/cuda", request.limits,
                      [&](int64_t bytes) { return MakeRoom(bytes, toolkit, request, keep); });
  std::error_code error;
  if (fetched.ok()) {
    fs::rename(scratch + "/cuda", home, error);
    if (error) fetched = absl::InternalError(absl::StrCat("cannot move the toolkit to ", home));
  }
  (void)RemoveAll(scratch);
  if (!fetched.ok()) {
    return Annotate(fetched, absl::StrCat("fetching ", DescribeServedToolkit(toolkit),
                                          " from the coordinator"));
  }
  const absl::Duration took = absl::Trunc(absl::Now() - start, absl::Milliseconds(100));
  LogNotice(absl::StrCat("fetched ", DescribeServedToolkit(toolkit), " from the coordinator in ",
                         absl::FormatDuration(took), ", every file checked, into ", home));
  return took;
}

// The cache folder of `toolkit`: its version and digest were checked
// (ChooseServedToolkit), so they may name a folder.
std::string HomeOf(const v1::ServedToolkit& toolkit, const ServedToolkitRequest& request) {
  return absl::StrCat(request.cache_dir, "/cuda-", toolkit.version(), "-",
                      toolkit.manifest().hash().substr(0, 12));
}

// One served toolkit, from the cache (checked) or fetched into its folder
// `home`. `keep`: the folders of the toolkits this start uses, which no
// fetch evicts. The caller holds the cache's lock.
absl::StatusOr<ServedToolkitUse> UseOne(const v1::ServedToolkit& toolkit,
                                        const ServedToolkitRequest& request,
                                        const std::set<std::string>& keep,
                                        const std::string& home) {
  std::error_code error;
  if (fs::exists(home, error)) {
    absl::Status intact = UseCached(home, toolkit);
    if (intact.ok()) {
      LogNotice(absl::StrCat("compiling with ", DescribeServedToolkit(toolkit),
                             ", served by the coordinator, from the cache at ", home,
                             " (every file checked)"));
      return ServedToolkitUse{
          home + "/bin/nvcc",
          absl::StrCat("served by the coordinator: ", DescribeServedToolkit(toolkit),
                       ", from this worker's cache (every file checked)")};
    }
    spdlog::warn("toolkit cache: {}; fetching it again", std::string(intact.message()));
    RETURN_IF_ERROR(RemoveAll(home));
  }
  ASSIGN_OR_RETURN(absl::Duration took, Fetch(toolkit, request, home, keep));
  return ServedToolkitUse{
      home + "/bin/nvcc",
      absl::StrCat("served by the coordinator: ", DescribeServedToolkit(toolkit), ", fetched in ",
                   absl::FormatDuration(took), " (every file checked)")};
}

}  // namespace

absl::StatusOr<std::vector<ServedToolkitUse>> UseServedToolkits(
    const ServedToolkitRequest& request) {
  ASSIGN_OR_RETURN(std::vector<WantedToolkit> wanted, ParseWantedToolkits(request.wanted));
  auto channel = OpenChannel(request.coordinator_address, request.tls);
  auto stub = v1::ContentStore::NewStub(channel);
  ASSIGN_OR_RETURN(std::vector<v1::ServedToolkit> served,
                   ListServedToolkits(*stub, absl::Minutes(1)));
  std::vector<v1::ServedToolkit> chosen;
  for (const WantedToolkit& one : wanted) {
    ASSIGN_OR_RETURN(v1::ServedToolkit toolkit, ChooseServedToolkit(served, one));
    chosen.push_back(std::move(toolkit));
  }
  RETURN_IF_ERROR(MakeDirectories(request.cache_dir));
  // Two workers on one machine may share a cache: one fetches at a time.
  ASSIGN_OR_RETURN(FolderLock lock, FolderLock::AcquireWaiting(request.cache_dir));
  RemoveLeftovers(request.cache_dir);
  std::vector<ServedToolkitUse> used;
  std::set<std::string> homes;
  for (const v1::ServedToolkit& toolkit : chosen) homes.insert(HomeOf(toolkit, request));
  for (size_t i = 0; i < chosen.size(); ++i) {
    ASSIGN_OR_RETURN(ServedToolkitUse use,
                     UseOne(chosen[i], request, homes, HomeOf(chosen[i], request)));
    use.pinned = !wanted[i].pinned_hash.empty();
    if (!use.pinned) spdlog::warn("{}", UnpinnedNotice(wanted[i], chosen[i], "--served-toolkit"));
    used.push_back(std::move(use));
  }
  // Those in use stay, even when together they are more than the cache's size.
  Evict(request.cache_dir, request.cache_max_bytes, homes);
  return used;
}

}  // namespace distcc_cuda::worker
