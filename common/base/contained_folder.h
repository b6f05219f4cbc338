// SPDX-License-Identifier: Apache-2.0
// A folder that writes cannot leave, whatever names they are given. What is
// made in it (folders, files, symbolic links) is named relative to an open
// handle on it, and every folder on the way is opened without following a
// link: with openat2's RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS where the
// kernel has it (Linux 5.6), else one name at a time with O_NOFOLLOW. Files
// are created exclusively (O_CREAT | O_EXCL, which never follows a link
// either). So a name another machine chose, or a link planted in the folder
// by anyone, cannot make the writer create, truncate or change the mode of
// a file elsewhere. How a toolkit fetched from a coordinator is written
// (common/nvcc/toolkit_download.h), and blobs downloaded into files.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distcc_cuda {

// A file descriptor closed when this goes.
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(OwnedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept;
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd();
  int get() const { return fd_; }
  // Closes it now; the error of close(2), which for a file just written
  // may be the first word of a full disk.
  absl::Status Close();

 private:
  int fd_ = -1;
};

// Writes all of `data` to `fd`, EINTR and short writes handled.
// RESOURCE_EXHAUSTED for a full disk (ENOSPC, EDQUOT), INTERNAL otherwise,
// each naming `what`.
absl::Status WriteAll(int fd, absl::string_view data, absl::string_view what);

class ContainedFolder {
 public:
  // How folders on the way are opened: openat2 beneath the root where the
  // kernel has it, else (and always with kNameByName, which tests use to
  // try the path of kernels before 5.6) one name at a time, O_NOFOLLOW.
  enum class Walk { kBeneath, kNameByName };

  // The existing folder at `path` (itself not a link), as the root of what
  // is made in it. NOT_FOUND if it is missing; PERMISSION_DENIED if it is a
  // link or not a folder.
  static absl::StatusOr<ContainedFolder> Open(const std::string& path, Walk walk = Walk::kBeneath);

  const std::string& path() const { return path_; }
  int fd() const { return root_.get(); }

  // Makes the folder `relative` (a plain relative path: IsPlainRelativePath)
  // and those above it that are missing, each with permission bits `mode`.
  // PERMISSION_DENIED naming the part that is a link or a file;
  // INVALID_ARGUMENT for a path that is not plain.
  absl::Status MakeFolders(absl::string_view relative, mode_t mode = 0755) const;

  // Creates the new file `relative` in its folder, which must exist, open
  // for writing, with permission bits 0600 until its writer sets others on
  // the open file (fchmod). ALREADY_EXISTS when anything is at that name, a
  // link included (never followed); PERMISSION_DENIED when a folder on the
  // way is a link; INVALID_ARGUMENT for a path that is not plain.
  absl::StatusOr<OwnedFd> CreateFile(absl::string_view relative) const;

  // Opens the existing regular file `relative` for reading, following no
  // link on the way or at its end. NOT_FOUND if a part is missing;
  // PERMISSION_DENIED naming a part that is a link, or a file that is not
  // a regular one.
  absl::StatusOr<OwnedFd> OpenFile(absl::string_view relative) const;

  // Makes the symbolic link `relative` with the text `target` (not checked
  // here: its caller decides where a link may lead). Errors as CreateFile.
  absl::Status MakeLink(absl::string_view relative, absl::string_view target) const;

  // Removes the file or link `relative`, never what a link leads to; OK if
  // it is missing.
  absl::Status Remove(absl::string_view relative) const;

 private:
  ContainedFolder(std::string path, OwnedFd root, Walk walk)
      : path_(std::move(path)), root_(std::move(root)), walk_(walk) {}
  // The folder `relative` (empty: the root itself), opened beneath the root
  // without following a link.
  absl::StatusOr<OwnedFd> OpenFolder(absl::string_view relative) const;
  // The open folder that holds `relative`'s last name, and that name.
  absl::StatusOr<std::pair<OwnedFd, std::string>> ParentOf(absl::string_view relative) const;
  // `relative` below the root, for messages.
  std::string Named(absl::string_view relative) const;

  std::string path_;
  OwnedFd root_;
  Walk walk_;
};

}  // namespace distcc_cuda
