// SPDX-License-Identifier: Apache-2.0
#include "common/base/files.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status.h"

namespace distcc_cuda {
namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  // POSIX reads, not an ifstream: libstdc++ throws from the middle of a read
  // that fails (a /proc file whose process just exited, an EIO), and a failed
  // read must be a status like any other.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot be read (", strerror(errno), ")"));
  }
  std::string content;
  char buffer[64 * 1024];
  for (;;) {
    ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      int error = errno;
      close(fd);
      return absl::DataLossError(absl::StrCat("error reading ", path, ": ", strerror(error)));
    }
    content.append(buffer, static_cast<size_t>(got));
  }
  close(fd);
  return content;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view content) {
  fs::path target(path);
  if (target.has_parent_path()) {
    absl::Status made = MakeDirectories(target.parent_path().string());
    if (!made.ok()) return made;
  }
  std::random_device random;
  std::string temp = absl::StrCat(path, ".tmp.", getpid(), ".", random());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create ", temp));
    }
    out.write(content.data(), content.size());
    out.flush();
    if (!out) {
      std::error_code ignored;
      fs::remove(temp, ignored);
      return absl::ResourceExhaustedError(absl::StrCat("cannot write ", temp, " (disk full?)"));
    }
  }
  // Durable before it is visible: the bytes, then the rename, then the
  // folder's entry.
  int fd = open(temp.c_str(), O_RDONLY | O_CLOEXEC);
  bool synced = fd >= 0 && fsync(fd) == 0;
  if (fd >= 0) close(fd);
  if (!synced) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    return absl::ResourceExhaustedError(absl::StrCat("cannot sync ", temp, " to disk"));
  }
  std::error_code error;
  fs::rename(temp, path, error);
  if (error) {
    fs::remove(temp, error);
    return absl::InternalError(absl::StrCat("cannot rename ", temp, " to ", path));
  }
  return SyncFolder(target.has_parent_path() ? target.parent_path().string() : ".");
}

namespace {

// Opens the folder `path` and runs `sync` (fsync or syncfs) on it.
absl::Status SyncThrough(const std::string& path, int (*sync)(int), const char* what) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open folder ", path));
  int synced = sync(fd);
  int error = errno;
  close(fd);
  if (synced != 0) return absl::ErrnoToStatus(error, absl::StrCat("cannot sync ", what, path));
  return absl::OkStatus();
}

}  // namespace

absl::Status SyncFolder(const std::string& path) { return SyncThrough(path, fsync, "folder "); }

absl::Status SyncFileSystem(const std::string& path) {
  return SyncThrough(path, syncfs, "the file system of ");
}

absl::StatusOr<FolderLock> FolderLock::Acquire(const std::string& folder, const std::string& who) {
  RETURN_IF_ERROR(MakeDirectories(folder));
  const std::string path = folder + "/lock";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    ssize_t got = pread(fd, pid, sizeof(pid) - 1, 0);
    close(fd);
    std::string holder = got > 0 ? std::string(pid, static_cast<size_t>(got)) : "";
    holder.erase(holder.find_last_not_of(" \n") + 1);
    return absl::FailedPreconditionError(absl::StrCat(
        folder, " is in use by ", who, holder.empty() ? "" : absl::StrCat(" (pid ", holder, ")"),
        "; two of them on one folder would corrupt it: stop that one, or give this one a folder "
        "of its own"));
  }
  std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    close(fd);
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  }
  return FolderLock(fd);
}

absl::StatusOr<FolderLock> FolderLock::AcquireWaiting(const std::string& folder) {
  RETURN_IF_ERROR(MakeDirectories(folder));
  const std::string path = folder + "/lock";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  while (flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int error = errno;
    close(fd);
    return absl::ErrnoToStatus(error, absl::StrCat("cannot lock ", path));
  }
  return FolderLock(fd);
}

FolderLock& FolderLock::operator=(FolderLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) close(fd_);
}

absl::Status WriteNewFile(const std::string& path, absl::string_view content, unsigned mode) {
  if (fs::exists(path)) {
    return absl::AlreadyExistsError(absl::StrCat(path, " already exists"));
  }
  std::random_device random;
  std::string temp = absl::StrCat(path, ".tmp.", getpid(), ".", random());
  // O_EXCL with the final mode: the content is never readable by others, not
  // even for a moment.
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", temp, ": ", std::strerror(errno)));
  }
  size_t written = 0;
  while (written < content.size()) {
    ssize_t n = write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += n;
  }
  bool ok = written == content.size() && fsync(fd) == 0;
  close(fd);
  // link() rather than rename(): it fails when `path` appeared meanwhile
  // instead of replacing it.
  int linked = ok ? link(temp.c_str(), path.c_str()) : -1;
  int link_errno = errno;
  unlink(temp.c_str());
  if (!ok) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot write ", temp, " (disk full?)"));
  }
  if (linked != 0) {
    if (link_errno == EEXIST) {
      return absl::AlreadyExistsError(absl::StrCat(path, " already exists"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(link_errno)));
  }
  return absl::OkStatus();
}

absl::Status MakeDirectories(const std::string& path) {
  std::error_code error;
  fs::create_directories(path, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create directory ", path, ": ", error.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MakeTempDirectory(const std::string& parent,
                                              const std::string& prefix) {
  absl::Status made = MakeDirectories(parent);
  if (!made.ok()) return made;
  std::string pattern = (fs::path(parent) / (prefix + "XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create a temporary directory in ", parent));
  }
  return pattern;
}

absl::Status RemoveAll(const std::string& path) {
  std::error_code error;
  fs::remove_all(path, error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot remove ", path, ": ", error.message()));
  }
  return absl::OkStatus();
}

absl::Status CopyFileBeneath(const std::string& root, const std::string& relative,
                             const std::string& destination) {
  auto fail = [&](const std::string& part, int error) {
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat(relative, ": no ", part));
    if (error == ELOOP || error == ENOTDIR) {
      return absl::PermissionDeniedError(
          absl::StrCat(relative, ": ", part, " is a symbolic link or not a folder; not followed"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open ", part, " of ", relative, ": ", std::strerror(error)));
  };
  int fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return fail(root, errno);
  std::vector<std::string> parts = absl::StrSplit(relative, '/', absl::SkipEmpty());
  if (parts.empty()) {
    close(fd);
    return absl::InvalidArgumentError("no file named");
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == "..") {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat(relative, " climbs out with '..'"));
    }
    bool last = i + 1 == parts.size();
    int next = openat(fd, parts[i].c_str(),
                      (last ? O_RDONLY : O_RDONLY | O_DIRECTORY) | O_NOFOLLOW | O_CLOEXEC);
    int error = errno;
    close(fd);
    if (next < 0) return fail(parts[i], error);
    fd = next;
  }
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    return absl::PermissionDeniedError(absl::StrCat(relative, " is not a regular file"));
  }
  int out = open(destination.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) {
    int error = errno;
    close(fd);
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", destination, ": ", std::strerror(error)));
  }
  char buffer[1 << 16];
  absl::Status status;
  for (;;) {
    ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      status =
          absl::InternalError(absl::StrCat("cannot read ", relative, ": ", std::strerror(errno)));
      break;
    }
    if (got == 0) break;
    for (ssize_t done = 0; done < got;) {
      ssize_t wrote = write(out, buffer + done, got - done);
      if (wrote < 0 && errno == EINTR) continue;
      if (wrote <= 0) {
        status = absl::InternalError(
            absl::StrCat("cannot write ", destination, ": ", std::strerror(errno)));
        break;
      }
      done += wrote;
    }
    if (!status.ok()) break;
  }
  close(fd);
  if (close(out) != 0 && status.ok()) {
    status = absl::InternalError(absl::StrCat("cannot write ", destination));
  }
  if (!status.ok()) unlink(destination.c_str());
  return status;
}

bool IsSymlink(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

bool IsRegularFile(const std::string& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & S_IXUSR);
}

std::string AbsolutePath(const std::string& path, const std::string& base) {
  fs::path p(path);
  if (p.is_relative()) {
    std::error_code error;
    fs::path from = base.empty() ? fs::current_path(error) : fs::path(base);
    p = from / p;
  }
  std::string normal = p.lexically_normal().string();
  if (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return normal;
}

absl::StatusOr<std::string> RelativeTo(const std::string& path, const std::string& root) {
  if (path == root) return std::string(".");
  std::string prefix = root == "/" ? root : root + "/";
  if (path.compare(0, prefix.size(), prefix) != 0) {
    return absl::NotFoundError(absl::StrCat(path, " is not under ", root));
  }
  return path.substr(prefix.size());
}

bool IsPlainRelativePath(absl::string_view path) {
  if (path.empty() || path.front() == '/' || path.back() == '/') return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == absl::string_view::npos) end = path.size();
    absl::string_view name = path.substr(start, end - start);
    if (name.empty() || name == "." || name == "..") return false;
    start = end + 1;
  }
  return true;
}

bool IsPlainAbsolutePath(absl::string_view path) {
  return path == "/" ||
         (!path.empty() && path.front() == '/' && IsPlainRelativePath(path.substr(1)));
}

std::string LexicallyNormal(absl::string_view path) {
  if (IsPlainRelativePath(path) || IsPlainAbsolutePath(path)) return std::string(path);
  return fs::path(std::string(path)).lexically_normal().string();
}

std::string NormalJoin(absl::string_view base, absl::string_view path) {
  if (base.empty() || (!path.empty() && path.front() == '/')) return LexicallyNormal(path);
  return LexicallyNormal(absl::StrCat(base, base.back() == '/' ? "" : "/", path));
}

bool StaysInside(const std::string& relative_path) {
  if (IsPlainRelativePath(relative_path)) return true;
  fs::path p(relative_path);
  if (p.is_absolute()) return false;
  int depth = 0;
  for (const auto& part : p.lexically_normal()) {
    if (part == "..") {
      if (--depth < 0) return false;
    } else if (part != "." && !part.empty()) {
      ++depth;
    }
  }
  return true;
}

int64_t FileBytesIn(const std::string& folder) {
  int64_t bytes = 0;
  std::error_code error;
  fs::recursive_directory_iterator walk(folder, error);
  for (; !error && walk != fs::recursive_directory_iterator(); walk.increment(error)) {
    std::error_code stat_error;
    if (walk->is_regular_file(stat_error) && !walk->is_symlink(stat_error)) {
      const uintmax_t size = walk->file_size(stat_error);
      if (!stat_error) bytes += static_cast<int64_t>(size);
    }
  }
  return bytes;
}

}  // namespace distcc_cuda
