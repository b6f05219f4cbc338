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
#include "common/nvcc/cuda_release.h"
#include "common/nvcc/toolkit_download.h"
#include "common/store/cas_client.h"
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

// The cache's toolkits; scratch folders of fetches that died removed.
std::vector<Cached> CachedToolkits(const std::string& cache_dir) {
  std::vector<Cached> cached;
  std::error_code error;
  fs::directory_iterator walk(cache_dir, error);
  for (; !error && walk != fs::directory_iterator(); walk.increment(error)) {
    const std::string folder = walk->path().string();
    const std::string name = walk->path().filename().string();
    if (absl::StartsWith(name, kScratchPrefix)) {
      (void)RemoveAll(folder);
      continue;
    }
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

// The toolkit in the cache at `home`, intact, marked as used now.
absl::Status UseCached(const std::string& home) {
  RETURN_IF_ERROR(VerifyManifest(home));
  std::error_code error;
  fs::last_write_time(home + "/" + kToolkitManifestName, fs::file_time_type::clock::now(), error);
  return absl::OkStatus();
}

// Fetches `toolkit` into the cache folder `home`, through a scratch folder;
// returns how long it took.
absl::StatusOr<absl::Duration> Fetch(const v1::ServedToolkit& toolkit,
                                     const ServedToolkitRequest& request, const std::string& home) {
  auto channel = OpenChannel(request.coordinator_address, request.tls);
  CasClient blobs(v1::ContentStore::NewStub(channel));
  ASSIGN_OR_RETURN(std::string scratch, MakeTempDirectory(request.cache_dir, kScratchPrefix));
  const absl::Time start = absl::Now();
  absl::Status fetched = DownloadToolkit(blobs, toolkit, scratch + "/cuda");
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

// One served toolkit, from the cache (checked) or fetched into it; its
// folder in `home`. The caller holds the cache's lock.
absl::StatusOr<ServedToolkitUse> UseOne(const v1::ServedToolkit& toolkit,
                                        const ServedToolkitRequest& request, std::string& home) {
  home = absl::StrCat(request.cache_dir, "/cuda-", toolkit.version(), "-",
                      toolkit.manifest().hash().substr(0, 12));
  std::error_code error;
  if (fs::exists(home, error)) {
    absl::Status intact = UseCached(home);
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
  ASSIGN_OR_RETURN(absl::Duration took, Fetch(toolkit, request, home));
  return ServedToolkitUse{
      home + "/bin/nvcc",
      absl::StrCat("served by the coordinator: ", DescribeServedToolkit(toolkit), ", fetched in ",
                   absl::FormatDuration(took), " (every file checked)")};
}

}  // namespace

absl::StatusOr<std::vector<ServedToolkitUse>> UseServedToolkits(
    const ServedToolkitRequest& request) {
  std::vector<CudaRelease> wanted;
  for (absl::string_view release : absl::StrSplit(request.wanted, ',')) {
    ASSIGN_OR_RETURN(CudaRelease parsed, CudaRelease::Parse(absl::StripAsciiWhitespace(release)));
    wanted.push_back(parsed);
  }
  auto channel = OpenChannel(request.coordinator_address, request.tls);
  auto stub = v1::ContentStore::NewStub(channel);
  ASSIGN_OR_RETURN(std::vector<v1::ServedToolkit> served,
                   ListServedToolkits(*stub, absl::Minutes(1)));
  std::vector<v1::ServedToolkit> chosen;
  for (const CudaRelease& release : wanted) {
    ASSIGN_OR_RETURN(v1::ServedToolkit toolkit, ChooseServedToolkit(served, release));
    chosen.push_back(std::move(toolkit));
  }
  RETURN_IF_ERROR(MakeDirectories(request.cache_dir));
  // Two workers on one machine may share a cache: one fetches at a time.
  ASSIGN_OR_RETURN(FolderLock lock, FolderLock::AcquireWaiting(request.cache_dir));
  std::vector<ServedToolkitUse> used;
  std::set<std::string> homes;
  for (const v1::ServedToolkit& toolkit : chosen) {
    std::string home;
    ASSIGN_OR_RETURN(ServedToolkitUse use, UseOne(toolkit, request, home));
    homes.insert(home);
    used.push_back(std::move(use));
  }
  // Those in use stay, even when together they are more than the cache's size.
  Evict(request.cache_dir, request.cache_max_bytes, homes);
  return used;
}

}  // namespace distcc_cuda::worker
