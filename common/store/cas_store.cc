// SPDX-License-Identifier: Apache-2.0
#include "common/store/cas_store.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/base/contained_folder.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda {
namespace fs = std::filesystem;

namespace {

absl::Status MismatchError(const Digest& expected, const Digest& actual) {
  return absl::InvalidArgumentError(
      absl::StrCat("blob content does not match its digest: expected ", expected.ToString(),
                   ", content is ", actual.ToString()));
}

}  // namespace

BlobWriter::BlobWriter(const CasStore* store, Digest expected, std::string temp_path, int fd)
    : store_(store), expected_(std::move(expected)), temp_path_(std::move(temp_path)), fd_(fd) {}

BlobWriter::~BlobWriter() {
  if (fd_ >= 0) close(fd_);
  if (!committed_) unlink(temp_path_.c_str());
}

absl::Status BlobWriter::Append(int64_t offset, absl::string_view data) {
  if (committed_) return absl::FailedPreconditionError("blob already committed");
  if (offset != written_) {
    return absl::InvalidArgumentError(absl::StrCat("chunk at offset ", offset, " for blob ",
                                                   expected_.ToString(), " but ", written_,
                                                   " bytes were written so far"));
  }
  if (written_ + static_cast<int64_t>(data.size()) > expected_.size_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("blob ", expected_.ToString(),
                                                   " receives more than its ", expected_.size_bytes,
                                                   " declared bytes"));
  }
  RETURN_IF_ERROR(WriteAll(fd_, data, temp_path_));
  sha_.Update(data);
  written_ += data.size();
  return absl::OkStatus();
}

absl::Status BlobWriter::Seal(bool flush) {
  Digest actual{sha_.FinishHex(), written_};
  if (actual != expected_) return MismatchError(expected_, actual);
  // Blobs are read-only: a sandbox input hard-linked to one cannot change it.
  // On disk before it has a name: a crash never leaves a named blob short.
  if (fchmod(fd_, 0444) != 0 || (flush && fsync(fd_) != 0) || close(fd_) != 0) {
    fd_ = -1;
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot close ", temp_path_, ": ", strerror(errno)));
  }
  fd_ = -1;
  return absl::OkStatus();
}

absl::StatusOr<std::string> BlobWriter::Publish() {
  std::string final_path = store_->PathOf(expected_);
  std::string folder = fs::path(final_path).parent_path().string();
  RETURN_IF_ERROR(MakeDirectories(folder));
  if (rename(temp_path_.c_str(), final_path.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot move blob into ", final_path, ": ", strerror(errno)));
  }
  committed_ = true;
  store_->MarkVerified(expected_);
  return folder;
}

absl::Status BlobWriter::Commit() {
  if (committed_) return absl::OkStatus();
  RETURN_IF_ERROR(Seal());
  ASSIGN_OR_RETURN(std::string folder, Publish());
  absl::Status synced = SyncFolder(folder);
  store_->Added(expected_);
  return synced;
}

int64_t BlobDiskCost(int64_t size) {
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = std::max<int64_t>(1, (std::max<int64_t>(size, 0) + kBlock - 1) / kBlock);
  return (blocks + 1) * kBlock;
}

int64_t DefaultCasMaxBytes(const std::string& root) {
  struct statvfs disk;
  std::string probe = root;
  // The store may not exist yet: ask about the nearest folder that does.
  while (statvfs(probe.c_str(), &disk) != 0 && probe.size() > 1) {
    probe = fs::path(probe).parent_path().string();
  }
  const int64_t disk_bytes = static_cast<int64_t>(disk.f_blocks) * disk.f_frsize;
  return std::clamp<int64_t>(disk_bytes / 10, int64_t{1} << 30, int64_t{50} << 30);
}

absl::StatusOr<int64_t> CasMaxBytesFromFlag(const std::string& flag_value,
                                            const std::string& root) {
  if (flag_value.empty()) return DefaultCasMaxBytes(root);
  absl::StatusOr<int64_t> bytes = ParseByteSize(flag_value);
  if (!bytes.ok()) return Annotate(bytes.status(), "--cas-max-size");
  return bytes;
}

CasPin::~CasPin() {
  absl::MutexLock lock(&mu_);
  store_->Unpin(hashes_);
}

void CasPin::Add(const std::vector<Digest>& digests) {
  std::vector<std::string> added;
  for (const Digest& digest : digests) added.push_back(digest.hash);
  {
    absl::MutexLock lock(&store_->mu_);
    for (const std::string& hash : added) ++store_->pins_[hash];
  }
  absl::MutexLock lock(&mu_);
  hashes_.insert(hashes_.end(), added.begin(), added.end());
}

std::unique_ptr<CasPin> CasStore::Pin(const std::vector<Digest>& digests) const {
  std::unique_ptr<CasPin> pin(new CasPin(this));
  pin->Add(digests);
  return pin;
}

void CasStore::Unpin(const std::vector<std::string>& hashes) const {
  absl::MutexLock lock(&mu_);
  for (const std::string& hash : hashes) {
    auto found = pins_.find(hash);
    if (found != pins_.end() && --found->second <= 0) pins_.erase(found);
  }
  EvictLocked();
}

int64_t CasStore::size_bytes() const {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&indexed_));
  return total_bytes_;
}

int64_t CasStore::evicted_blobs() const {
  absl::MutexLock lock(&mu_);
  return evicted_;
}

CasStore::Stats CasStore::stats() const {
  Stats stats;
  {
    absl::MutexLock lock(&mu_);
    // Not waiting for the count at opening: a scrape answers at once.
    stats.bytes = total_bytes_;
    stats.blobs = index_.size();
    stats.evicted_blobs = evicted_;
    stats.evicted_bytes = evicted_bytes_;
  }
  stats.max_bytes = max_bytes_;
  stats.lookup_hits = lookup_hits_.load(std::memory_order_relaxed);
  stats.lookup_misses = lookup_misses_.load(std::memory_order_relaxed);
  return stats;
}

void CasStore::CountLookup(bool found) const {
  (found ? lookup_hits_ : lookup_misses_).fetch_add(1, std::memory_order_relaxed);
}

void CasStore::Added(const Digest& digest) const {
  absl::MutexLock lock(&mu_);
  auto [entry, inserted] = index_.try_emplace(digest.hash);
  if (inserted) {
    entry->second.size = digest.size_bytes;
    entry->second.disk_cost = BlobDiskCost(digest.size_bytes);
    total_bytes_ += entry->second.disk_cost;
  }
  entry->second.last_use = absl::Now();
  EvictLocked();
}

void CasStore::Used(const Digest& digest) const {
  absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    auto found = index_.find(digest.hash);
    if (found == index_.end()) return;
    absl::Time last = found->second.last_use;
    found->second.last_use = now;
    if (now - last < absl::Hours(1)) return;
  }
  const struct timespec times[2] = {{0, UTIME_OMIT}, absl::ToTimespec(now)};
  utimensat(AT_FDCWD, PathOf(digest).c_str(), times, 0);
}

void CasStore::EvictLocked() const {
  if (max_bytes_ <= 0 || total_bytes_ <= max_bytes_) return;
  // Over the limit with what came in since the store opened alone: what it
  // held before is counted first, and may be the older.
  mu_.Await(absl::Condition(&indexed_));
  if (total_bytes_ <= max_bytes_) return;
  std::vector<std::pair<absl::Time, std::string>> candidates;
  for (const auto& [hash, entry] : index_) {
    if (!pins_.count(hash)) candidates.emplace_back(entry.last_use, hash);
  }
  std::sort(candidates.begin(), candidates.end());
  const int64_t target = max_bytes_ / 10 * 9;
  int64_t freed = 0;
  int removed = 0;
  for (const auto& [last_use, hash] : candidates) {
    if (total_bytes_ <= target) break;
    const Entry& entry = index_.at(hash);
    std::error_code error;
    fs::remove(PathOf(Digest{hash, entry.size}), error);
    total_bytes_ -= entry.disk_cost;
    freed += entry.disk_cost;
    ++removed;
    verified_.erase(hash);
    index_.erase(hash);
  }
  evicted_ += removed;
  evicted_bytes_ += freed;
  if (removed > 0) {
    spdlog::info(
        "content store {}: evicted {} least recently used blobs ({} bytes) to stay under "
        "{} bytes",
        root_, removed, freed, max_bytes_);
    warned_full_ = false;
  }
  if (total_bytes_ > max_bytes_ && !warned_full_) {
    warned_full_ = true;
    spdlog::warn(
        "content store {} holds {} bytes, over its limit of {}: the rest is in use by "
        "running builds",
        root_, total_bytes_, max_bytes_);
  }
}

absl::StatusOr<std::unique_ptr<CasStore>> CasStore::Open(const std::string& root,
                                                         int64_t max_bytes) {
  std::string absolute = AbsolutePath(root);
  RETURN_IF_ERROR(MakeDirectories(absolute + "/tmp"));
  // Writes that a process died in the middle of (their names start with the
  // writer's pid, see TempPath) are removed; a live writer's stay.
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(absolute + "/tmp", error)) {
    const std::string name = entry.path().filename().string();
    int pid = 0;
    if (!absl::SimpleAtoi(name.substr(0, name.find('-')), &pid) || pid <= 0 ||
        (kill(pid, 0) != 0 && errno == ESRCH)) {
      fs::remove_all(entry.path(), error);
    }
  }
  // The store holds every submitter's sources: nobody else on this machine
  // may read it (blobs are 0444 for their owner's sake only).
  if (chmod(absolute.c_str(), 0700) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot make the content store ", absolute, " private: ", strerror(errno)));
  }
  std::unique_ptr<CasStore> store(new CasStore(absolute, max_bytes));
  store->indexer_ = std::thread([raw = store.get()] { raw->Index(); });
  return store;
}

CasStore::~CasStore() {
  closing_ = true;
  if (indexer_.joinable()) indexer_.join();
}

void CasStore::Index() {
  // What the store holds, each blob last used when its file last changed.
  struct Found {
    std::string hash;
    int64_t size;
    absl::Time last_use;
  };
  std::vector<Found> found;
  std::error_code error;
  for (const auto& folder : fs::directory_iterator(root_, error)) {
    if (closing_) break;
    if (folder.path().filename() == "tmp" || !folder.is_directory(error)) continue;
    for (const auto& blob : fs::directory_iterator(folder.path(), error)) {
      const std::string name = blob.path().filename().string();
      size_t underscore = name.find('_');
      int64_t size = 0;
      struct stat info;
      if (underscore == std::string::npos ||
          !absl::SimpleAtoi(name.substr(underscore + 1), &size) ||
          lstat(blob.path().c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
        continue;
      }
      found.push_back({name.substr(0, underscore), size, absl::TimeFromTimespec(info.st_mtim)});
    }
  }
  absl::MutexLock lock(&mu_);
  for (Found& blob : found) {
    if (discarded_while_indexing_.count(blob.hash)) continue;
    // A blob stored meanwhile is already counted, as used now.
    auto [entry, inserted] = index_.try_emplace(std::move(blob.hash));
    if (!inserted) continue;
    entry->second.size = blob.size;
    entry->second.disk_cost = BlobDiskCost(blob.size);
    entry->second.last_use = blob.last_use;
    total_bytes_ += entry->second.disk_cost;
  }
  discarded_while_indexing_.clear();
  indexed_ = true;
  if (!closing_) EvictLocked();  // a walk cut short by closing counts too little
}

std::string CasStore::PathOf(const Digest& digest) const {
  return absl::StrCat(root_, "/", digest.hash.substr(0, 2), "/", digest.hash, "_",
                      digest.size_bytes);
}

bool CasStore::Contains(const Digest& digest) const {
  if (!ValidateDigest(digest).ok()) return false;
  // The empty blob is always present: there is nothing to transfer.
  if (digest.size_bytes == 0 && digest == DigestOf("")) return true;
  // A blob cut short on disk is not the blob.
  struct stat info;
  return lstat(PathOf(digest).c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         info.st_size == digest.size_bytes;
}

absl::Status CasStore::Verify(const Digest& digest) const {
  RETURN_IF_ERROR(ValidateDigest(digest));
  if (!Contains(digest)) {
    return absl::NotFoundError(absl::StrCat("blob ", digest.ToString(), " is not in the store"));
  }
  if (digest.size_bytes == 0) return absl::OkStatus();
  Used(digest);
  {
    absl::MutexLock lock(&mu_);
    auto settled = [this, &digest]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return verifying_.count(digest.hash) == 0;
    };
    mu_.Await(absl::Condition(&settled));
    if (verified_.count(digest.hash)) return absl::OkStatus();
    if (!Contains(digest)) {  // the caller before found it damaged
      return absl::NotFoundError(absl::StrCat("blob ", digest.ToString(), " is not in the store"));
    }
    verifying_.insert(digest.hash);
  }
  absl::StatusOr<Digest> actual = DigestOfFile(PathOf(digest));
  const bool good = actual.ok() && *actual == digest;
  // Removed before the callers waiting on it look again.
  if (!good) {
    Discard(digest, actual.ok() ? absl::StrCat("its bytes hash to ", actual->hash.substr(0, 16))
                                : std::string(actual.status().message()));
  }
  {
    absl::MutexLock lock(&mu_);
    verifying_.erase(digest.hash);
    if (good) verified_.insert(digest.hash);
  }
  if (good) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat("blob ", digest.ToString(), " was damaged on disk and has been removed"));
}

void CasStore::MarkVerified(const Digest& digest) const {
  absl::MutexLock lock(&mu_);
  verified_.insert(digest.hash);
}

void CasStore::Discard(const Digest& digest, const std::string& how) const {
  if (!ValidateDigest(digest).ok()) return;
  {
    absl::MutexLock lock(&mu_);
    verified_.erase(digest.hash);
    if (auto found = index_.find(digest.hash); found != index_.end()) {
      total_bytes_ -= found->second.disk_cost;
      index_.erase(found);
    }
    if (!indexed_) discarded_while_indexing_.insert(digest.hash);
  }
  std::error_code error;
  fs::remove(PathOf(digest), error);
  spdlog::warn(
      "content store {}: blob {} was damaged on disk ({}); removed, so that it is "
      "uploaded or rebuilt again",
      root_, digest.ToString(), how);
}

std::string CasStore::TempPath() const {
  // From a random start: a name no earlier process of this pid used.
  static std::atomic<uint64_t> counter{std::random_device()()};
  return absl::StrCat(root_, "/tmp/", getpid(), "-", counter.fetch_add(1));
}

absl::StatusOr<std::unique_ptr<BlobWriter>> CasStore::StartWrite(const Digest& digest) {
  RETURN_IF_ERROR(ValidateDigest(digest));
  std::string temp = TempPath();
  // A name of this process's, created new: never a file someone put there.
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", temp, ": ", strerror(errno)));
  }
  return std::unique_ptr<BlobWriter>(new BlobWriter(this, digest, temp, fd));
}

absl::Status CasStore::Put(const Digest& digest, absl::string_view data) {
  if (Contains(digest)) {
    // Still verify: a client must not be told a wrong blob was accepted.
    Digest actual = DigestOf(data);
    return actual == digest ? absl::OkStatus() : MismatchError(digest, actual);
  }
  ASSIGN_OR_RETURN(auto writer, StartWrite(digest));
  RETURN_IF_ERROR(writer->Append(0, data));
  return writer->Commit();
}

std::vector<absl::Status> CasStore::PutMany(
    const std::vector<std::pair<Digest, absl::string_view>>& blobs) {
  std::vector<absl::Status> results(blobs.size());
  // Written and flushed in groups of at most this many open files.
  constexpr size_t kGroup = 256;
  // A batch larger than this is flushed by two syncs of the whole file
  // system (contents, then names) instead of one per blob and one per
  // folder: 100,000 generated sources cost two flushes, not 200,000.
  constexpr size_t kWholeFileSystem = 1024;
  const bool per_blob = blobs.size() <= kWholeFileSystem;
  std::vector<std::pair<size_t, std::unique_ptr<BlobWriter>>> sealed;
  for (size_t begin = 0; begin < blobs.size(); begin += kGroup) {
    const size_t end = std::min(blobs.size(), begin + kGroup);
    std::vector<std::pair<size_t, std::unique_ptr<BlobWriter>>> writing;
    for (size_t i = begin; i < end; ++i) {
      const auto& [digest, data] = blobs[i];
      if (Contains(digest)) {
        results[i] = Put(digest, data);
        continue;
      }
      absl::StatusOr<std::unique_ptr<BlobWriter>> writer = StartWrite(digest);
      results[i] = writer.status();
      if (!writer.ok()) continue;
      results[i] = (*writer)->Append(0, data);
      if (!results[i].ok()) continue;
      // Starts the write-out, so that the flushes below find it under way.
      if (per_blob) sync_file_range((*writer)->fd_, 0, 0, SYNC_FILE_RANGE_WRITE);
      writing.emplace_back(i, *std::move(writer));
    }
    for (auto& [i, writer] : writing) {
      results[i] = writer->Seal(/*flush=*/per_blob);
      if (results[i].ok()) sealed.emplace_back(i, std::move(writer));
    }
  }
  if (!per_blob && !sealed.empty()) {
    absl::Status flushed = SyncFileSystem(root_);
    if (!flushed.ok()) {
      for (auto& [i, writer] : sealed) results[i] = flushed;
      sealed.clear();  // the writers remove their temporary files
    }
  }
  // Named, then each folder synced once for all the blobs it received.
  std::map<std::string, std::vector<size_t>> folders;
  for (auto& [i, writer] : sealed) {
    absl::StatusOr<std::string> folder = writer->Publish();
    results[i] = folder.status();
    if (folder.ok()) folders[*folder].push_back(i);
  }
  const absl::Status names = per_blob || folders.empty() ? absl::OkStatus() : SyncFileSystem(root_);
  for (const auto& [folder, named] : folders) {
    absl::Status synced = per_blob ? SyncFolder(folder) : names;
    for (size_t i : named) {
      results[i] = synced;
      Added(blobs[i].first);
    }
  }
  return results;
}

absl::StatusOr<Digest> CasStore::PutBytes(absl::string_view data) {
  Digest digest = DigestOf(data);
  RETURN_IF_ERROR(Put(digest, data));
  return digest;
}

absl::StatusOr<Digest> CasStore::PutFile(const std::string& path) {
  ASSIGN_OR_RETURN(Digest digest, DigestOfFile(path));
  if (Contains(digest)) return digest;
  ASSIGN_OR_RETURN(auto writer, StartWrite(digest));
  std::ifstream in(path, std::ios::binary);
  std::string buffer(1 << 20, '\0');
  int64_t offset = 0;
  while (in) {
    in.read(buffer.data(), buffer.size());
    std::streamsize n = in.gcount();
    if (n <= 0) break;
    RETURN_IF_ERROR(writer->Append(offset, absl::string_view(buffer.data(), n)));
    offset += n;
  }
  RETURN_IF_ERROR(Annotate(writer->Commit(), path));
  return digest;
}

absl::StatusOr<std::string> CasStore::Get(const Digest& digest) const {
  // A malformed hash could name a path outside the store.
  RETURN_IF_ERROR(ValidateDigest(digest));
  if (digest.size_bytes == 0 && digest == DigestOf("")) return std::string();
  absl::StatusOr<std::string> content = ReadFile(PathOf(digest));
  if (!content.ok()) {
    return absl::NotFoundError(absl::StrCat("blob ", digest.ToString(), " is not in the store"));
  }
  return content;
}

absl::Status CasStore::Materialize(const Digest& digest, const std::string& destination,
                                   bool executable) const {
  RETURN_IF_ERROR(ValidateDigest(digest));
  fs::path target(destination);
  RETURN_IF_ERROR(MakeDirectories(target.parent_path().string()));
  std::error_code error;
  fs::remove(target, error);
  std::string source = PathOf(digest);
  if (digest.size_bytes == 0 && digest == DigestOf("") && !IsRegularFile(source)) {
    // The empty blob needs no upload, so it may not be on disk yet.
    RETURN_IF_ERROR(WriteFileAtomically(source, ""));
  }
  if (!IsRegularFile(source)) {
    return absl::NotFoundError(absl::StrCat("blob ", digest.ToString(), " is not in the store"));
  }
  // Always a copy, never a hard link: a compile that writes to one of its
  // inputs (as root, or through a sandbox) must not change the stored blob
  // that later units use.
  fs::copy_file(source, target, fs::copy_options::overwrite_existing, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot copy blob to ", destination, ": ", error.message()));
  }
  // The copy, not the stored file, is what the compile reads: checking it
  // leaves no window for the store to change in between.
  absl::StatusOr<Digest> copied = DigestOfFile(destination);
  if (!copied.ok() || *copied != digest) {
    fs::remove(target, error);
    Discard(digest, copied.ok() ? absl::StrCat("its bytes hash to ", copied->hash.substr(0, 16))
                                : std::string(copied.status().message()));
    return absl::DataLossError(absl::StrCat("the stored copy of blob ", digest.ToString(),
                                            " was damaged and has been removed; fetch it again"));
  }
  MarkVerified(digest);
  Used(digest);
  return FinishMaterialized(destination, executable);
}

absl::Status FinishMaterialized(const std::string& destination, bool executable) {
  std::error_code error;
  if (executable) {
    fs::permissions(destination,
                    fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                    fs::perm_options::add, error);
  }
  const struct timespec times[2] = {{kMaterializedMtime, 0}, {kMaterializedMtime, 0}};
  if (utimensat(AT_FDCWD, destination.c_str(), times, 0) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot set the time of ", destination));
  }
  return absl::OkStatus();
}

}  // namespace distcc_cuda
