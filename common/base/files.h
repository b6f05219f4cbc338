// SPDX-License-Identifier: Apache-2.0
// The filesystem at the edge: std::filesystem and stream errors turned into
// absl::Status once, here, so the rest of the code never sees an exception.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distcc_cuda {

// Returns the whole content of the file. NOT_FOUND if it does not exist.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes `content` to a temporary file beside `path` and renames it into
// place, so readers never see a partial file. Creates missing parent folders.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view content);

// fsync(2) of the folder at `path`, so that a rename into it survives a
// crash of the machine. INTERNAL naming the folder otherwise.
absl::Status SyncFolder(const std::string& path);
// Flushes the whole file system that holds the folder `path` (syncfs):
// every file written to it before, however many, is on disk, with its name.
absl::Status SyncFileSystem(const std::string& path);

// An exclusive lock on a state folder (flock(2) on `folder`/lock), held
// while this object lives, with the holder's pid written in the file. The
// kernel drops it when the process dies, however it dies.
class FolderLock {
 public:
  // FAILED_PRECONDITION "... is in use by <who> (pid N)" when another
  // process holds it; other errors when the lock file cannot be made.
  static absl::StatusOr<FolderLock> Acquire(const std::string& folder, const std::string& who);
  // The same lock, waiting for whoever holds it to let go (an install that
  // another process runs into the same folder finishes first).
  static absl::StatusOr<FolderLock> AcquireWaiting(const std::string& folder);
  FolderLock(FolderLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FolderLock& operator=(FolderLock&& other) noexcept;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  ~FolderLock();

 private:
  explicit FolderLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Writes `content` to the new file `path` with permission bits `mode` (e.g.
// 0600 for a private key) from the first byte, never replacing a file:
// ALREADY_EXISTS if `path` exists. Written beside it and linked into place, so
// nobody sees a partial file. The parent folder must exist.
absl::Status WriteNewFile(const std::string& path, absl::string_view content, unsigned mode);

// Creates `path` and its parents if missing.
absl::Status MakeDirectories(const std::string& path);

// Creates a new, empty folder under `parent` named `prefix` plus a random suffix.
absl::StatusOr<std::string> MakeTempDirectory(const std::string& parent, const std::string& prefix);

// Removes `path` and everything under it; OK if it does not exist.
absl::Status RemoveAll(const std::string& path);

// True if `path` names an existing regular file (following links).
bool IsRegularFile(const std::string& path);
// True if `path` itself is a symbolic link (whatever it points at).
bool IsSymlink(const std::string& path);

// Copies the regular file at `relative` (normalised, without "..") below the
// folder `root` to `destination` (created 0600), following no symbolic link
// on the way: every folder is opened with O_NOFOLLOW from the one above, so
// a link planted anywhere on the path (by a compile, in its own tree) cannot
// make the caller read a file elsewhere. NOT_FOUND if a part is missing;
// PERMISSION_DENIED naming the part that is a link or not a regular file.
absl::Status CopyFileBeneath(const std::string& root, const std::string& relative,
                             const std::string& destination);

// True if `path` names an existing file that its owner may execute.
bool IsExecutableFile(const std::string& path);

// Returns the absolute, lexically normal form of `path` (relative paths are
// taken from `base`, or the current directory when `base` is empty).
std::string AbsolutePath(const std::string& path, const std::string& base = "");

// Returns `path` relative to `root` if it lies under it, else NOT_FOUND.
// Both must be absolute and normal.
absl::StatusOr<std::string> RelativeTo(const std::string& path, const std::string& root);

// The sizes of the regular files below `folder` (links not followed),
// summed; what cannot be read counts nothing.
int64_t FileBytesIn(const std::string& folder);

// True if the relative `path` stays inside its root: not absolute, no ".."
// component that climbs out.
bool StaysInside(const std::string& relative_path);

// True for a relative path already lexically normal and without "..":
// non-empty names separated by single '/', none of them "." or "..", no
// '/' at either end ("include/cute/tensor.hpp"). Such a path stays inside
// its root and std::filesystem's lexically_normal leaves it as it is, so
// the checks every unit's paths go through skip that (slow) step for it.
bool IsPlainRelativePath(absl::string_view path);
// True for "/" and for '/' followed by a plain relative path.
bool IsPlainAbsolutePath(absl::string_view path);
// `path` lexically normal (std::filesystem::path::lexically_normal), without
// the conversions when it is plain already.
std::string LexicallyNormal(absl::string_view path);
// std::filesystem::path(base) / path, lexically normal (an absolute `path`
// replaces `base`), without the conversions when the result is plain.
std::string NormalJoin(absl::string_view base, absl::string_view path);

}  // namespace distcc_cuda
