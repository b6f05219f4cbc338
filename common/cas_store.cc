// SPDX-License-Identifier: Apache-2.0
#include "common/cas_store.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/status.h"

namespace distcc_cuda {
namespace fs = std::filesystem;

namespace {

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot write ", path, ": ", strerror(errno)));
    }
    data.remove_prefix(n);
  }
  return absl::OkStatus();
}

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

absl::Status BlobWriter::Commit() {
  if (committed_) return absl::OkStatus();
  Digest actual{sha_.FinishHex(), written_};
  if (actual != expected_) return MismatchError(expected_, actual);
  // Blobs are read-only: a sandbox input hard-linked to one cannot change it.
  // On disk before it has a name: a crash never leaves a named blob short.
  if (fchmod(fd_, 0444) != 0 || fsync(fd_) != 0 || close(fd_) != 0) {
    fd_ = -1;
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot close ", temp_path_, ": ", strerror(errno)));
  }
  fd_ = -1;
  std::string final_path = store_->PathOf(expected_);
  RETURN_IF_ERROR(MakeDirectories(fs::path(final_path).parent_path().string()));
  if (rename(temp_path_.c_str(), final_path.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot move blob into ", final_path, ": ", strerror(errno)));
  }
  committed_ = true;
  return SyncFolder(fs::path(final_path).parent_path().string());
}

absl::StatusOr<std::unique_ptr<CasStore>> CasStore::Open(const std::string& root) {
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
  return std::unique_ptr<CasStore>(new CasStore(absolute));
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

std::string CasStore::TempPath() const {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(root_, "/tmp/", getpid(), "-", counter.fetch_add(1));
}

absl::StatusOr<std::unique_ptr<BlobWriter>> CasStore::StartWrite(const Digest& digest) {
  RETURN_IF_ERROR(ValidateDigest(digest));
  std::string temp = TempPath();
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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
  if (executable) {
    fs::permissions(target, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                    fs::perm_options::add, error);
  }
  const struct timespec times[2] = {{kMaterializedMtime, 0}, {kMaterializedMtime, 0}};
  if (utimensat(AT_FDCWD, destination.c_str(), times, 0) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot set the time of ", destination));
  }
  return absl::OkStatus();
}

}  // namespace distcc_cuda
