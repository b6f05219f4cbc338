// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/toolkit_download.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <optional>
#include <set>
#include <system_error>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/base/byte_size.h"
#include "common/base/cancellation.h"
#include "common/base/contained_folder.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/store/digest.h"
#include "common/store/toolkit_manifest.h"

namespace distcc_cuda {
namespace fs = std::filesystem;
namespace {

constexpr char kPinPrefix[] = "@sha256:";
// The most toolkits a coordinator's list is read for.
constexpr int kMaxListedToolkits = 64;
// Room left on the disk beside a toolkit, for everything else.
constexpr int64_t kDiskHeadroom = int64_t{64} << 20;
constexpr int64_t kInodeHeadroom = 1000;

// A coordinator's word, cut and made safe for a terminal and a log.
std::string Safe(absl::string_view text, size_t max_bytes = 64) {
  return TerminalSafe(text, false, max_bytes);
}

// Ends a fetch that stalls or runs past its deadline: cancels its
// transfers (those made in a BlobClient::TaskScope of token()) and says why.
class FetchWatch {
 public:
  FetchWatch(BlobClient& blobs, const ToolkitFetchLimits& limits)
      : blobs_(blobs), limits_(limits), start_(absl::Now()), last_(start_) {
    thread_ = std::thread([this] { Watch(); });
  }
  ~FetchWatch() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    thread_.join();
  }
  FetchWatch(const FetchWatch&) = delete;
  FetchWatch& operator=(const FetchWatch&) = delete;

  const CancelToken* token() const { return &token_; }
  // `bytes` arrived now.
  void Progress(int64_t bytes) {
    absl::MutexLock lock(&mu_);
    last_ = absl::Now();
    received_ += bytes;
  }
  // A transfer of `what` begins: the stall limit counts from now, until
  // Fetched (local work, making folders or room, is not a stall).
  void Fetching(std::string what) {
    absl::MutexLock lock(&mu_);
    fetching_ = std::move(what);
    last_ = absl::Now();
    in_transfer_ = true;
  }
  void Fetched() {
    absl::MutexLock lock(&mu_);
    in_transfer_ = false;
  }
  // Why the watch ended the fetch; empty if it did not.
  std::string ended() const {
    absl::MutexLock lock(&mu_);
    return ended_;
  }

 private:
  void Watch() {
    {
      absl::MutexLock lock(&mu_);
      while (!done_) {
        const absl::Time now = absl::Now();
        if (in_transfer_ && now - last_ >= limits_.stall) {
          ended_ = absl::StrCat("the coordinator sent no byte of ", fetching_, " for ",
                                absl::FormatDuration(limits_.stall),
                                " (--toolkit-stall-timeout); check its load and the network "
                                "between, or raise the limit");
          break;
        }
        if (now - start_ >= limits_.deadline) {
          ended_ =
              absl::StrCat("the fetch took longer than --toolkit-fetch-timeout ",
                           absl::FormatDuration(limits_.deadline), " (", FormatByteSize(received_),
                           " received, at ", fetching_, "); raise it for a slow link");
          break;
        }
        // Woken by the end, or at the next moment a limit may be reached
        // (a transfer that begins meanwhile is seen within a stall).
        mu_.AwaitWithDeadline(
            absl::Condition(&done_),
            std::min(std::max(last_, now) + limits_.stall, start_ + limits_.deadline));
      }
      if (ended_.empty()) return;
    }
    // Acted on after the decision, outside the lock.
    token_.Cancel(ended());
    blobs_.CancelTask(&token_);
  }

  BlobClient& blobs_;
  const ToolkitFetchLimits limits_;
  CancelToken token_;
  mutable absl::Mutex mu_;
  const absl::Time start_;
  absl::Time last_ ABSL_GUARDED_BY(mu_);
  int64_t received_ ABSL_GUARDED_BY(mu_) = 0;
  std::string fetching_ ABSL_GUARDED_BY(mu_);
  bool in_transfer_ ABSL_GUARDED_BY(mu_) = false;
  std::string ended_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// A transfer's failure, or the watch's reason when it ended it.
absl::Status Ended(const absl::Status& status, const FetchWatch& watch) {
  const std::string why = watch.ended();
  if (!why.empty()) return absl::DeadlineExceededError(why);
  return absl::Status(status.code(), TerminalSafe(status.message(), false, 1024));
}

// The manifest's bytes, checked against its digest.
absl::StatusOr<std::string> FetchManifest(BlobClient& blobs, const Digest& digest,
                                          FetchWatch& watch) {
  std::string manifest;
  Sha256 sha;
  watch.Fetching("the manifest");
  absl::Status read = blobs.ReadWithin(digest, [&](absl::string_view data) {
    watch.Progress(static_cast<int64_t>(data.size()));
    manifest.append(data.data(), data.size());
    sha.Update(data);
    return absl::OkStatus();
  });
  if (!read.ok()) return Ended(read, watch);
  watch.Fetched();
  if (Digest{sha.FinishHex(), static_cast<int64_t>(manifest.size())} != digest) {
    return absl::DataLossError("the toolkit's manifest does not match its digest");
  }
  return manifest;
}

// Room for `bytes` of `toolkit`: within the limit, made by `make_room`,
// and on the disk of `parent`.
absl::Status CheckRoom(const std::vector<ToolkitEntry>& entries, const v1::ServedToolkit& toolkit,
                       const ToolkitFetchLimits& limits, const std::string& parent,
                       const std::function<absl::Status(int64_t bytes)>& make_room) {
  const int64_t bytes = ToolkitBytes(entries);
  if (bytes > limits.max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("refused before its first byte: its files are ", FormatByteSize(bytes),
                     ", more than --toolkit-max-size ", FormatByteSize(limits.max_bytes),
                     " (a compile part is about 300 MiB); raise it if CUDA ",
                     Safe(toolkit.version()), " is meant to be that large"));
  }
  if (make_room) RETURN_IF_ERROR(make_room(bytes));
  // What it takes on the disk, folders and empty files included.
  const ToolkitDiskCost cost = DiskCostOf(entries);
  struct statvfs disk {};
  if (statvfs(parent.c_str(), &disk) != 0) return absl::OkStatus();
  const int64_t free = static_cast<int64_t>(disk.f_bavail) * static_cast<int64_t>(disk.f_frsize);
  if (cost.bytes + kDiskHeadroom > free) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "refused before its first byte: it takes ", FormatByteSize(cost.bytes), " on disk and ",
        parent, " has ", FormatByteSize(free), " free; make room there"));
  }
  // A file system that counts inodes (f_files): room for each file, link and folder.
  if (disk.f_files > 0 && cost.inodes + kInodeHeadroom > static_cast<int64_t>(disk.f_favail)) {
    return absl::ResourceExhaustedError(absl::StrCat("refused before its first byte: it needs ",
                                                     cost.inodes, " inodes and ", parent, " has ",
                                                     disk.f_favail, " free; make room there"));
  }
  return absl::OkStatus();
}

// One file of the toolkit, created in `folder`, streamed, checked, its mode
// set on the open file; removed if anything fails.
absl::Status WriteToolkitFile(BlobClient& blobs, const ContainedFolder& folder,
                              const ToolkitEntry& entry, FetchWatch& watch) {
  watch.Fetching(entry.path);
  ASSIGN_OR_RETURN(OwnedFd file, folder.CreateFile(entry.path));
  Sha256 sha;
  int64_t size = 0;
  absl::Status written = blobs.ReadWithin(entry.digest, [&](absl::string_view data) {
    watch.Progress(static_cast<int64_t>(data.size()));
    sha.Update(data);
    size += static_cast<int64_t>(data.size());
    return WriteAll(file.get(), data, entry.path);
  });
  written = written.ok() ? written : Ended(written, watch);
  watch.Fetched();
  if (written.ok() && Digest{sha.FinishHex(), size} != entry.digest) {
    written = absl::DataLossError(absl::StrCat("its content does not match the manifest's digest (",
                                               FormatByteSize(size), " received of ",
                                               FormatByteSize(entry.digest.size_bytes), ")"));
  }
  if (written.ok() && fchmod(file.get(), entry.executable ? 0755 : 0644) != 0) {
    written = absl::InternalError(absl::StrCat("cannot set its mode: ", strerror(errno)));
  }
  if (written.ok()) written = file.Close();
  if (!written.ok()) {
    (void)file.Close();
    (void)folder.Remove(entry.path);
  }
  return written;
}

// Everything the manifest lists, made in the new folder `folder`: folders,
// then files, then links (none of them followed), then the manifest.
absl::Status WriteToolkit(BlobClient& blobs, const ContainedFolder& folder,
                          const std::vector<ToolkitEntry>& entries, const std::string& manifest,
                          FetchWatch& watch) {
  std::set<std::string> folders;
  for (const ToolkitEntry& entry : entries) {
    const size_t slash = entry.path.rfind('/');
    if (slash != std::string::npos) folders.insert(entry.path.substr(0, slash));
  }
  for (const std::string& made : folders) RETURN_IF_ERROR(folder.MakeFolders(made));
  for (const ToolkitEntry& entry : entries) {
    if (entry.link) continue;
    absl::Status written = WriteToolkitFile(blobs, folder, entry, watch);
    if (!written.ok()) return Annotate(written, absl::StrCat("toolkit file ", entry.path));
  }
  for (const ToolkitEntry& entry : entries) {
    if (entry.link) RETURN_IF_ERROR(folder.MakeLink(entry.path, entry.target));
  }
  ASSIGN_OR_RETURN(OwnedFd file, folder.CreateFile(kToolkitManifestName));
  RETURN_IF_ERROR(WriteAll(file.get(), manifest, kToolkitManifestName));
  if (fchmod(file.get(), 0644) != 0) {
    return absl::InternalError(absl::StrCat("cannot set the mode of ", kToolkitManifestName));
  }
  return file.Close();
}

}  // namespace

std::string WantedToolkit::ToString() const {
  return pinned_hash.empty() ? release.ToString()
                             : absl::StrCat(release.ToString(), kPinPrefix, pinned_hash);
}

absl::StatusOr<WantedToolkit> ParseWantedToolkit(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  const size_t at = text.find('@');
  absl::StatusOr<CudaRelease> release = CudaRelease::Parse(text.substr(0, at));
  const absl::string_view pin =
      at == absl::string_view::npos ? absl::string_view() : text.substr(at);
  const std::string hash(pin.substr(std::min(pin.size(), sizeof(kPinPrefix) - 1)));
  if (!release.ok() || (!pin.empty() && (!absl::StartsWith(pin, kPinPrefix) ||
                                         !ValidateDigest(Digest{hash, 0}).ok()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", Safe(text, 200),
        "' is not a toolkit to fetch: give a release (13.2, or 13.2.86), pinned or not to its "
        "manifest's digest as `distcc-cuda-coordinator toolkit list` prints it "
        "(13.2@sha256:<64 hex digits>)"));
  }
  return WantedToolkit{*release, hash};
}

absl::StatusOr<std::vector<WantedToolkit>> ParseWantedToolkits(absl::string_view text) {
  std::vector<WantedToolkit> wanted;
  for (absl::string_view one : absl::StrSplit(text, ',')) {
    ASSIGN_OR_RETURN(WantedToolkit parsed, ParseWantedToolkit(one));
    wanted.push_back(std::move(parsed));
  }
  return wanted;
}

absl::StatusOr<std::vector<v1::ServedToolkit>> ListServedToolkits(
    v1::ContentStore::StubInterface& stub, absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  // A coordinator that is starting: wait for it, up to the deadline.
  context.set_wait_for_ready(true);
  v1::ListToolkitsResponse response;
  grpc::Status status = stub.ListToolkits(&context, v1::ListToolkitsRequest(), &response);
  if (!status.ok()) {
    // NOT_FOUND means "serves none of the release" to callers (a client
    // then asks PyPI): never a coordinator's own word.
    const absl::StatusCode code = status.error_code() == grpc::StatusCode::NOT_FOUND
                                      ? absl::StatusCode::kFailedPrecondition
                                      : static_cast<absl::StatusCode>(status.error_code());
    return absl::Status(code, absl::StrCat("cannot list the coordinator's toolkits: ",
                                           Safe(status.error_message(), 1024)));
  }
  const int listed = std::min(response.toolkits_size(), kMaxListedToolkits);
  return std::vector<v1::ServedToolkit>(response.toolkits().begin(),
                                        response.toolkits().begin() + listed);
}

absl::StatusOr<v1::ServedToolkit> ChooseServedToolkit(const std::vector<v1::ServedToolkit>& served,
                                                      const WantedToolkit& wanted) {
  const v1::ServedToolkit* best = nullptr;
  const v1::ServedToolkit* other_pin = nullptr;
  std::optional<CudaRelease> best_version;
  std::vector<std::string> names;
  for (const v1::ServedToolkit& toolkit : served) {
    names.push_back(Safe(toolkit.version(), 32));
    absl::StatusOr<CudaRelease> version = CudaRelease::Parse(toolkit.version());
    // Its name (manifest digest) becomes a folder's: checked before use.
    if (!version.ok() || !version->has_patch() || !wanted.release.Admits(*version) ||
        !ValidateDigest(FromProto(toolkit.manifest())).ok() ||
        toolkit.manifest().size_bytes() > kMaxToolkitManifestBytes) {
      continue;
    }
    if (!wanted.pinned_hash.empty() && toolkit.manifest().hash() != wanted.pinned_hash) {
      other_pin = &toolkit;
      continue;
    }
    if (best == nullptr || *best_version < *version) {
      best = &toolkit;
      best_version = *version;
    }
  }
  if (best != nullptr) return *best;
  if (other_pin != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the coordinator serves CUDA ", Safe(other_pin->version(), 32), " as ",
        ManifestPin(*other_pin), ", not the pinned ", wanted.ToString(),
        ": a toolkit whose content changed is not taken; ask its operator whether it was "
        "replaced, and pin the new digest if so"));
  }
  return absl::NotFoundError(absl::StrCat(
      "the coordinator serves no CUDA ", wanted.release.ToString(), " (",
      names.empty() ? "it serves no toolkit"
                    : absl::StrCat("it serves ", absl::StrJoin(names, ", ")),
      "); its operator adds one with `distcc-cuda-coordinator toolkit add --state-dir DIR "
      "CUDA_FOLDER`"));
}

absl::StatusOr<ToolkitFetchLimits> ParseToolkitFetchLimits(absl::string_view max_size,
                                                           absl::string_view stall,
                                                           absl::string_view deadline) {
  ToolkitFetchLimits limits;
  absl::StatusOr<int64_t> bytes = ParseByteSize(max_size);
  if (!bytes.ok() || *bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--toolkit-max-size: '", Safe(max_size), "' is not a size such as 8GiB"));
  }
  limits.max_bytes = *bytes;
  for (auto [text, flag, into] :
       {std::make_tuple(stall, "--toolkit-stall-timeout", &limits.stall),
        std::make_tuple(deadline, "--toolkit-fetch-timeout", &limits.deadline)}) {
    if (!absl::ParseDuration(text, into) || *into <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": '", Safe(text), "' is not a positive duration such as 60s or 30m"));
    }
  }
  return limits;
}

absl::Status DownloadToolkit(BlobClient& blobs, const v1::ServedToolkit& toolkit,
                             const std::string& destination, const ToolkitFetchLimits& limits,
                             const std::function<absl::Status(int64_t bytes)>& make_room) {
  const Digest manifest_digest = FromProto(toolkit.manifest());
  RETURN_IF_ERROR(ValidateDigest(manifest_digest));
  if (manifest_digest.size_bytes > kMaxToolkitManifestBytes) {
    return absl::InvalidArgumentError("the coordinator's toolkit manifest is larger than 16 MiB");
  }
  FetchWatch watch(blobs, limits);
  // Every transfer of this thread is the fetch's: the watch can end it.
  BlobClient::TaskScope transfers(watch.token());
  ASSIGN_OR_RETURN(std::string manifest, FetchManifest(blobs, manifest_digest, watch));
  ASSIGN_OR_RETURN(std::vector<ToolkitEntry> entries, ParseToolkitManifest(manifest));
  const std::string parent = fs::path(destination).parent_path().string();
  RETURN_IF_ERROR(CheckRoom(entries, toolkit, limits, parent, make_room));
  if (mkdir(destination.c_str(), 0755) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot make the toolkit's folder ", destination, ": ", strerror(errno)));
  }
  absl::StatusOr<ContainedFolder> folder = ContainedFolder::Open(destination);
  absl::Status made =
      folder.ok() ? WriteToolkit(blobs, *folder, entries, manifest, watch) : folder.status();
  // The whole folder as the manifest says, before anyone renames it into place.
  if (made.ok()) made = VerifyManifest(destination);
  if (!made.ok()) (void)RemoveAll(destination);
  return made;
}

std::string ManifestPin(const v1::ServedToolkit& toolkit) {
  return absl::StrCat("sha256:", Safe(toolkit.manifest().hash(), 64));
}

std::string DescribeServedToolkit(const v1::ServedToolkit& toolkit) {
  // A coordinator's words, made safe for a terminal and a log.
  return absl::StrCat("CUDA ", Safe(toolkit.version(), 32), " (", FormatByteSize(toolkit.bytes()),
                      ", ", toolkit.files(), " files, added from ",
                      Safe(toolkit.added_from(), 4096), ")");
}

std::string UnpinnedNotice(const WantedToolkit& wanted, const v1::ServedToolkit& toolkit,
                           absl::string_view how_to_pin) {
  if (!wanted.pinned_hash.empty()) return "";
  return absl::StrCat("CUDA ", Safe(toolkit.version(), 32),
                      " was taken unpinned: its files are whatever the coordinator sent with "
                      "manifest ",
                      ManifestPin(toolkit), "; to accept only this toolkit, pin it: ", how_to_pin,
                      " ", wanted.release.ToString(), "@", ManifestPin(toolkit));
}

}  // namespace distcc_cuda
