// SPDX-License-Identifier: Apache-2.0
#include "common/base/contained_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"

// openat2(2) and its resolve flags, from the kernel's headers where they
// have them (Linux 5.6); an older sysroot gets them here, and an older
// kernel answers ENOSYS, which turns to the walk below.
#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#else
struct open_how {
  uint64_t flags;
  uint64_t mode;
  uint64_t resolve;
};
#define RESOLVE_NO_MAGICLINKS 0x02
#define RESOLVE_NO_SYMLINKS 0x04
#define RESOLVE_BENEATH 0x08
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif

namespace distcc_cuda {
namespace {

constexpr int kFolderFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

// Whether openat2 is worth trying: a kernel before 5.6, or a seccomp
// profile that refuses it (ENOSYS, sometimes EPERM), turns it off for the
// rest of the process.
std::atomic<bool> openat2_works{true};

// openat2(dirfd, path, flags) resolved beneath dirfd, through no link.
int OpenBeneath(int dirfd, const std::string& path, int flags) {
  struct open_how how {};
  how.flags = static_cast<uint64_t>(flags);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(syscall(SYS_openat2, dirfd, path.c_str(), &how, sizeof(how)));
}

// What an errno met on the way to `named` means, as a status.
absl::Status OpenError(int error, const std::string& named) {
  if (error == ENOENT) return absl::NotFoundError(absl::StrCat(named, ": no such file or folder"));
  if (error == ELOOP || error == ENOTDIR || error == EXDEV) {
    return absl::PermissionDeniedError(absl::StrCat(
        named, ": a part of it is a symbolic link or not a folder; links are not followed here"));
  }
  if (error == EEXIST) return absl::AlreadyExistsError(absl::StrCat(named, " exists already"));
  if (error == ENOSPC || error == EDQUOT) {
    return absl::ResourceExhaustedError(absl::StrCat("no space left for ", named));
  }
  return absl::PermissionDeniedError(absl::StrCat("cannot open ", named, ": ", strerror(error)));
}

absl::Status CheckPlain(absl::string_view relative) {
  if (!IsPlainRelativePath(relative)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", relative.substr(0, 200), "' is not a plain relative path"));
  }
  for (absl::string_view name : absl::StrSplit(relative, '/')) {
    if (name.size() > NAME_MAX || name.find('\0') != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("a name in '", relative.substr(0, 200), "' is not one a file may have"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

OwnedFd& OwnedFd::operator=(OwnedFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

OwnedFd::~OwnedFd() {
  if (fd_ >= 0) close(fd_);
}

absl::Status OwnedFd::Close() {
  if (fd_ < 0) return absl::OkStatus();
  const int result = close(std::exchange(fd_, -1));
  if (result != 0 && errno != EINTR) {
    return errno == ENOSPC || errno == EDQUOT
               ? absl::ResourceExhaustedError(absl::StrCat("no space left: ", strerror(errno)))
               : absl::InternalError(absl::StrCat("close failed: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, absl::string_view data, absl::string_view what) {
  while (!data.empty()) {
    const ssize_t wrote = write(fd, data.data(), data.size());
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      const int error = wrote < 0 ? errno : ENOSPC;
      if (error == ENOSPC || error == EDQUOT) {
        return absl::ResourceExhaustedError(absl::StrCat("no space left to write ", what));
      }
      return absl::InternalError(absl::StrCat("cannot write ", what, ": ", strerror(error)));
    }
    data.remove_prefix(static_cast<size_t>(wrote));
  }
  return absl::OkStatus();
}

absl::StatusOr<ContainedFolder> ContainedFolder::Open(const std::string& path, Walk walk) {
  const int fd = open(path.c_str(), kFolderFlags);
  if (fd < 0) return OpenError(errno, path);
  return ContainedFolder(path, OwnedFd(fd), walk);
}

std::string ContainedFolder::Named(absl::string_view relative) const {
  return absl::StrCat(path_, "/", relative);
}

absl::StatusOr<OwnedFd> ContainedFolder::OpenFolder(absl::string_view relative) const {
  if (relative.empty()) {
    const int fd = fcntl(root_.get(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return OpenError(errno, path_);
    return OwnedFd(fd);
  }
  if (walk_ == Walk::kBeneath && openat2_works.load(std::memory_order_relaxed)) {
    const int fd = OpenBeneath(root_.get(), std::string(relative), kFolderFlags);
    if (fd >= 0) return OwnedFd(fd);
    if (errno != ENOSYS && errno != EPERM && errno != E2BIG) {
      return OpenError(errno, Named(relative));
    }
    openat2_works.store(false, std::memory_order_relaxed);
  }
  // One name at a time, none of them followed if it is a link.
  OwnedFd folder;
  int at = root_.get();
  for (absl::string_view name : absl::StrSplit(relative, '/')) {
    const int next = openat(at, std::string(name).c_str(), kFolderFlags);
    if (next < 0) return OpenError(errno, Named(relative));
    folder = OwnedFd(next);
    at = folder.get();
  }
  return folder;
}

absl::StatusOr<std::pair<OwnedFd, std::string>> ContainedFolder::ParentOf(
    absl::string_view relative) const {
  if (absl::Status plain = CheckPlain(relative); !plain.ok()) return plain;
  const size_t slash = relative.rfind('/');
  const absl::string_view above =
      slash == absl::string_view::npos ? absl::string_view() : relative.substr(0, slash);
  absl::StatusOr<OwnedFd> folder = OpenFolder(above);
  if (!folder.ok()) return folder.status();
  return std::make_pair(*std::move(folder),
                        std::string(relative.substr(above.empty() ? 0 : slash + 1)));
}

absl::Status ContainedFolder::MakeFolders(absl::string_view relative, mode_t mode) const {
  if (absl::Status plain = CheckPlain(relative); !plain.ok()) return plain;
  OwnedFd folder;
  int at = root_.get();
  for (absl::string_view name : absl::StrSplit(relative, '/')) {
    const std::string part(name);
    const bool made = mkdirat(at, part.c_str(), 0700) == 0;
    if (!made && errno != EEXIST) return OpenError(errno, Named(relative));
    const int next = openat(at, part.c_str(), kFolderFlags);
    if (next < 0) return OpenError(errno, Named(relative));
    folder = OwnedFd(next);
    at = folder.get();
    // The mode on the open folder, whatever the umask: never through a link.
    if (made && fchmod(at, mode) != 0) return OpenError(errno, Named(relative));
  }
  return absl::OkStatus();
}

absl::StatusOr<OwnedFd> ContainedFolder::CreateFile(absl::string_view relative) const {
  auto parent = ParentOf(relative);
  if (!parent.ok()) return parent.status();
  const int fd = openat(parent->first.get(), parent->second.c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return OpenError(errno, Named(relative));
  return OwnedFd(fd);
}

absl::StatusOr<OwnedFd> ContainedFolder::OpenFile(absl::string_view relative) const {
  auto parent = ParentOf(relative);
  if (!parent.ok()) return parent.status();
  const int fd = openat(parent->first.get(), parent->second.c_str(),
                        O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return OpenError(errno, Named(relative));
  OwnedFd file(fd);
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(Named(relative), " is not a regular file"));
  }
  return file;
}

absl::Status ContainedFolder::MakeLink(absl::string_view relative, absl::string_view target) const {
  auto parent = ParentOf(relative);
  if (!parent.ok()) return parent.status();
  if (symlinkat(std::string(target).c_str(), parent->first.get(), parent->second.c_str()) != 0) {
    return OpenError(errno, Named(relative));
  }
  return absl::OkStatus();
}

absl::Status ContainedFolder::Remove(absl::string_view relative) const {
  auto parent = ParentOf(relative);
  if (!parent.ok()) {
    return absl::IsNotFound(parent.status()) ? absl::OkStatus() : parent.status();
  }
  if (unlinkat(parent->first.get(), parent->second.c_str(), 0) != 0 && errno != ENOENT) {
    return OpenError(errno, Named(relative));
  }
  return absl::OkStatus();
}

}  // namespace distcc_cuda
