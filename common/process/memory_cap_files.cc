// SPDX-License-Identifier: Apache-2.0
// Small files, read and written with plain syscalls, for the memory cap's
// mechanisms (common/process/memory_cap_internal.h).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/process/memory_cap_internal.h"

namespace distcc_cuda::memory_cap_internal {

absl::StatusOr<std::string> ReadText(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::string text;
  char buffer[4096];
  for (;;) {
    ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      int error = errno;
      close(fd);
      return absl::ErrnoToStatus(error, absl::StrCat("cannot read ", path));
    }
    if (got == 0) break;
    text.append(buffer, static_cast<size_t>(got));
  }
  close(fd);
  return text;
}

// Writes `text` to `path` in one write(); 0 or the errno.
int WriteRaw(const std::string& path, absl::string_view text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t written;
  do {
    written = write(fd, text.data(), text.size());
  } while (written < 0 && errno == EINTR);
  int error = written < 0 ? errno : static_cast<size_t>(written) == text.size() ? 0 : EIO;
  close(fd);
  return error;
}

absl::Status WriteText(const std::string& path, absl::string_view text) {
  if (int error = WriteRaw(path, text); error != 0) {
    return absl::ErrnoToStatus(error, absl::StrCat("cannot write '", text, "' to ", path));
  }
  return absl::OkStatus();
}

// Whether whitespace-separated `text` holds `word` ("cpu memory pids").
bool HasWord(absl::string_view text, absl::string_view word) {
  for (absl::string_view item : absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    if (item == word) return true;
  }
  return false;
}

bool Exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::string Parent(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Names of the subdirectories of `dir` (empty if it cannot be listed).
std::vector<std::string> SubdirectoryNames(const std::string& dir) {
  std::vector<std::string> names;
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) return names;
  while (struct dirent* entry = readdir(listing)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (entry->d_type == DT_DIR ||
        (entry->d_type == DT_UNKNOWN && IsDirectory(absl::StrCat(dir, "/", name)))) {
      names.push_back(std::move(name));
    }
  }
  closedir(listing);
  return names;
}

// A whole-file integer such as "268435456\n"; nullopt for "max" or garbage.
std::optional<int64_t> ParseCount(absl::string_view text) {
  int64_t value;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) return std::nullopt;
  return value;
}

// The value of `key` in "key value" lines (memory.events, memory.oom_control).
std::optional<int64_t> KeyedCount(absl::string_view text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t value;
    if (fields.size() == 2 && fields[0] == key && absl::SimpleAtoi(fields[1], &value)) {
      return value;
    }
  }
  return std::nullopt;
}

// A field of /proc/meminfo in bytes ("MemTotal:"), 0 if unknown.
int64_t MeminfoBytes(const std::string& meminfo_path, absl::string_view key) {
  absl::StatusOr<std::string> text = ReadText(meminfo_path);
  if (!text.ok()) return 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t kib;
    if (fields.size() >= 2 && fields[0] == key && absl::SimpleAtoi(fields[1], &kib)) {
      return kib * 1024;
    }
  }
  return 0;
}

// Characters of a cgroup name, at most `max_length` of them.
std::string SanitizeName(absl::string_view name, size_t max_length) {
  std::string clean;
  for (char c : name.substr(0, max_length)) {
    bool keep =
        absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    clean.push_back(keep ? c : '_');
  }
  if (clean.empty() || clean == "." || clean == "..") clean = "node";
  return clean;
}

}  // namespace distcc_cuda::memory_cap_internal
