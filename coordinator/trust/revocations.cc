// SPDX-License-Identifier: Apache-2.0
#include "coordinator/trust/revocations.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/base/terminal_text.h"
#include "common/transport/certificates.h"

namespace distcc_cuda::coordinator {
namespace {

constexpr size_t kMaxReason = 300;

// `reason` as one terminal-safe line of at most kMaxReason bytes.
std::string OneLine(absl::string_view reason) {
  std::string line;
  for (char c : reason.substr(0, kMaxReason)) {
    unsigned char byte = static_cast<unsigned char>(c);
    line.push_back(byte < 0x20 || byte == 0x7f ? ' ' : c);
  }
  // Bytes above 0x7f may still form bidirectional overrides: keep the line
  // plain ASCII unless all of it is safe to print.
  if (!IsTerminalSafe(line)) {
    for (char& c : line) {
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    }
  }
  return line;
}

// Size, modification time and inode of `path`; "" when it does not exist.
std::string StampOf(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) return "";
  return absl::StrCat(info.st_size, ":", info.st_mtim.tv_sec, ".", info.st_mtim.tv_nsec, ":",
                      info.st_ino);
}

// An exclusive flock on `path`, released when it goes out of scope.
class WriterLock {
 public:
  static absl::StatusOr<WriterLock> Take(const std::string& path) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
    }
    while (flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      int error = errno;
      close(fd);
      return absl::InternalError(absl::StrCat("cannot lock ", path, ": ", std::strerror(error)));
    }
    return WriterLock(fd);
  }
  WriterLock(WriterLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;
  WriterLock& operator=(WriterLock&&) = delete;
  ~WriterLock() {
    if (fd_ >= 0) close(fd_);
  }

 private:
  explicit WriterLock(int fd) : fd_(fd) {}
  int fd_;
};

// The entries of the file at `path`; none when it does not exist.
absl::StatusOr<RevocationMap> ReadRevocations(const std::string& path) {
  if (!IsRegularFile(path)) return RevocationMap();
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseRevocations(*text, path);
}

}  // namespace

std::string RevocationsPathIn(const std::string& state_dir) {
  return AbsolutePath(state_dir) + "/revoked-workers";
}

std::string FormatRevocations(const RevocationMap& entries) {
  std::string text =
      "# Worker certificates this coordinator refuses, and whose cached results it dropped.\n"
      "# NAME<TAB>SINCE (Unix seconds)<TAB>REASON. Edit with distcc-cuda-coordinator revoke.\n";
  for (const auto& [name, entry] : entries) {
    absl::StrAppend(&text, name, "\t", entry.since_unix_seconds, "\t", entry.reason, "\n");
  }
  return text;
}

absl::StatusOr<RevocationMap> ParseRevocations(absl::string_view text, absl::string_view path) {
  RevocationMap entries;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    if (line.empty() || line.front() == '#') continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits('\t', 2));
    Revocation entry;
    bool ok = fields.size() == 3 && ValidateCertificateName(fields[0]).ok() &&
              absl::SimpleAtoi(fields[1], &entry.since_unix_seconds);
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", number,
          ": not NAME<TAB>SECONDS<TAB>REASON; fix or remove the line (distcc-cuda-coordinator "
          "revoke --list shows what is read)"));
    }
    entry.name = std::string(fields[0]);
    entry.reason = OneLine(fields[2]);
    entries[entry.name] = std::move(entry);
  }
  return entries;
}

absl::StatusOr<std::unique_ptr<WorkerRevocations>> WorkerRevocations::Open(std::string path) {
  std::unique_ptr<WorkerRevocations> revocations(new WorkerRevocations(std::move(path)));
  absl::StatusOr<std::vector<std::string>> read = revocations->Reload();
  if (!read.ok()) return read.status();
  return revocations;
}

bool WorkerRevocations::IsRevoked(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  return entries_.find(name) != entries_.end();
}

std::optional<Revocation> WorkerRevocations::Find(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

std::vector<Revocation> WorkerRevocations::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<Revocation> list;
  for (const auto& [name, entry] : entries_) list.push_back(entry);
  return list;
}

template <typename Change>
absl::Status WorkerRevocations::Rewrite(Change change) {
  absl::StatusOr<WriterLock> writer = WriterLock::Take(path_ + ".lock");
  if (!writer.ok()) return writer.status();
  absl::StatusOr<RevocationMap> read = ReadRevocations(path_);
  if (!read.ok()) return read.status();
  RevocationMap entries = *std::move(read);
  absl::Status changed = change(entries);
  if (!changed.ok()) return changed;
  absl::Status written = WriteFileAtomically(path_, FormatRevocations(entries));
  if (!written.ok()) return written;
  std::string stamp = StampOf(path_);
  absl::MutexLock lock(&mu_);
  entries_ = std::move(entries);
  stamp_ = std::move(stamp);
  return absl::OkStatus();
}

absl::StatusOr<bool> WorkerRevocations::Revoke(const std::string& name, const std::string& reason,
                                               absl::Time now) {
  if (absl::Status valid = ValidateCertificateName(name, "worker name"); !valid.ok()) return valid;
  bool added = false;
  absl::Status status = Rewrite([&](RevocationMap& entries) {
    if (entries.count(name)) return absl::OkStatus();
    entries[name] = Revocation{name, OneLine(reason), absl::ToUnixSeconds(now)};
    added = true;
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return added;
}

absl::Status WorkerRevocations::Lift(const std::string& name) {
  return Rewrite([&](RevocationMap& entries) {
    if (entries.erase(name) == 0) {
      return absl::NotFoundError(absl::StrCat("worker '", OneLine(name), "' is not revoked"));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<std::string>> WorkerRevocations::Reload() {
  std::string stamp = StampOf(path_);
  {
    absl::MutexLock lock(&mu_);
    if (stamp == stamp_ && !stamp.empty()) return std::vector<std::string>();
  }
  absl::StatusOr<RevocationMap> read = ReadRevocations(path_);
  if (!read.ok()) return read.status();
  RevocationMap entries = *std::move(read);
  std::vector<std::string> added;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, entry] : entries) {
    if (!entries_.count(name)) added.push_back(name);
  }
  entries_ = std::move(entries);
  stamp_ = std::move(stamp);
  return added;
}

}  // namespace distcc_cuda::coordinator
