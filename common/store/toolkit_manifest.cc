// SPDX-License-Identifier: Apache-2.0
#include "common/store/toolkit_manifest.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/store/digest.h"

namespace distcc_cuda {
namespace fs = std::filesystem;
namespace {

constexpr char kFormatLine[] = "distcc-cuda toolkit manifest 1";

// Names in a manifest are words: no space, no control character.
bool IsWord(absl::string_view text) {
  return !text.empty() && std::none_of(text.begin(), text.end(), [](char c) {
    return static_cast<unsigned char>(c) <= ' ' || c == 0x7f;
  });
}

// One entry's line, for a path relative to `folder`.
absl::StatusOr<std::string> LineOf(const fs::path& folder, const fs::directory_entry& entry) {
  const std::string relative = entry.path().lexically_relative(folder).string();
  if (!IsWord(relative)) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", entry.path().string(),
                     "' has a space or a control character in its name; a "
                     "toolkit's files have none"));
  }
  std::error_code error;
  if (entry.is_symlink(error)) {
    const std::string target = fs::read_symlink(entry.path(), error).string();
    // A link stays inside: relative, and resolved lexically below the folder.
    const std::string resolved =
        (fs::path(relative).parent_path() / target).lexically_normal().string();
    // Lexically, and as the file system resolves it (a link through links).
    std::error_code resolve_error;
    const fs::path real_folder = fs::weakly_canonical(folder, resolve_error);
    const fs::path real_target =
        fs::weakly_canonical(entry.path().parent_path() / target, resolve_error);
    const std::string inside = real_target.lexically_relative(real_folder).string();
    if (error || resolve_error || !IsWord(target) || fs::path(target).is_absolute() ||
        !StaysInside(resolved) || inside.empty() || !StaysInside(inside)) {
      return absl::FailedPreconditionError(
          absl::StrCat((folder / relative).string(), " is a link that leads out of the toolkit (",
                       target, "); a toolkit must hold its own files"));
    }
    return absl::StrCat("link ", target, " ", relative);
  }
  if (entry.is_directory(error)) return std::string();
  if (!entry.is_regular_file(error)) {
    return absl::FailedPreconditionError(absl::StrCat(
        entry.path().string(), " is neither a file, a folder nor a link; a toolkit holds none"));
  }
  ASSIGN_OR_RETURN(Digest digest, DigestOfFile(entry.path().string()));
  struct stat info {};
  const bool runs = stat(entry.path().c_str(), &info) == 0 && (info.st_mode & S_IXUSR) != 0;
  return absl::StrCat("file ", digest.hash, " ", digest.size_bytes, " ", runs ? "x" : "-", " ",
                      relative);
}

// Whether a filtered manifest lists `entry`: `keep` takes it and, for a
// link, the path it leads to, inside the folder.
bool Kept(const std::string& folder, const fs::directory_entry& entry, const std::string& relative,
          const ToolkitPathFilter& keep) {
  if (!keep(relative)) return false;
  std::error_code error;
  if (!entry.is_symlink(error)) return true;
  const fs::path target = fs::read_symlink(entry.path(), error);
  if (error || target.is_absolute()) return false;
  const std::string resolved =
      (fs::path(relative).parent_path() / target).lexically_normal().string();
  if (!StaysInside(resolved) || resolved == ".") return false;
  std::error_code resolve_error;
  const fs::path real_target =
      fs::weakly_canonical(entry.path().parent_path() / target, resolve_error);
  const std::string inside =
      real_target.lexically_relative(fs::weakly_canonical(folder, resolve_error)).string();
  return !resolve_error && !inside.empty() && StaysInside(inside) && keep(resolved) && keep(inside);
}

// The manifest's lines by path.
std::map<std::string, std::string> ByPath(const std::string& manifest) {
  std::map<std::string, std::string> lines;
  for (absl::string_view line : absl::StrSplit(manifest, '\n', absl::SkipEmpty())) {
    if (line == kFormatLine) continue;
    const size_t last_space = line.rfind(' ');
    lines.emplace(std::string(line.substr(last_space + 1)), std::string(line));
  }
  return lines;
}

// A line's entry, or what is wrong with it.
absl::StatusOr<ToolkitEntry> EntryOf(absl::string_view line) {
  std::vector<absl::string_view> words = absl::StrSplit(line, ' ');
  ToolkitEntry entry;
  bool valid = false;
  if (words.size() == 5 && words[0] == "file" && (words[3] == "x" || words[3] == "-")) {
    entry.digest.hash = std::string(words[1]);
    valid =
        absl::SimpleAtoi(words[2], &entry.digest.size_bytes) && ValidateDigest(entry.digest).ok();
    entry.executable = words[3] == "x";
    entry.path = std::string(words[4]);
  } else if (words.size() == 3 && words[0] == "link") {
    entry.link = true;
    entry.target = std::string(words[1]);
    entry.path = std::string(words[2]);
    const std::string resolved =
        (fs::path(entry.path).parent_path() / entry.target).lexically_normal().string();
    valid = IsWord(entry.target) && !fs::path(entry.target).is_absolute() &&
            StaysInside(resolved) && resolved != ".";
  }
  if (!valid || !IsPlainRelativePath(entry.path) || entry.path == kToolkitManifestName) {
    return absl::InvalidArgumentError(
        absl::StrCat("the toolkit manifest's line '", line.substr(0, 200), "' is not valid"));
  }
  return entry;
}

}  // namespace

absl::StatusOr<std::vector<ToolkitEntry>> ParseToolkitManifest(absl::string_view text) {
  if (static_cast<int64_t>(text.size()) > kMaxToolkitManifestBytes) {
    return absl::InvalidArgumentError("the toolkit manifest is larger than 16 MiB");
  }
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (lines.empty() || lines[0] != kFormatLine || !lines.back().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a toolkit manifest (its first line must be '", kFormatLine,
                     "' and its last must end)"));
  }
  lines.pop_back();
  if (lines.size() - 1 > static_cast<size_t>(kMaxToolkitEntries)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the toolkit manifest lists more than ", kMaxToolkitEntries, " entries"));
  }
  std::vector<ToolkitEntry> entries;
  std::set<std::string> paths;
  std::set<std::string> links;
  for (size_t i = 1; i < lines.size(); ++i) {
    ASSIGN_OR_RETURN(ToolkitEntry entry, EntryOf(lines[i]));
    if (!paths.insert(entry.path).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("the toolkit manifest names ", entry.path, " twice"));
    }
    if (entry.link) links.insert(entry.path);
    entries.push_back(std::move(entry));
  }
  // Nothing is written through a link, nor below a file.
  for (const ToolkitEntry& entry : entries) {
    for (fs::path up = fs::path(entry.path).parent_path(); !up.empty(); up = up.parent_path()) {
      if (links.count(up.string()) > 0 || (paths.count(up.string()) > 0)) {
        return absl::InvalidArgumentError(absl::StrCat("the toolkit manifest puts ", entry.path,
                                                       " below the file or link ", up.string()));
      }
    }
  }
  return entries;
}

absl::StatusOr<std::string> ManifestOf(const std::string& folder) {
  return ManifestOf(folder, nullptr);
}

absl::StatusOr<std::string> ManifestOf(const std::string& folder, const ToolkitPathFilter& keep) {
  std::error_code error;
  fs::recursive_directory_iterator walk(folder, error);
  if (error) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the toolkit folder ", folder, ": ", error.message()));
  }
  std::map<std::string, std::string> lines;
  for (; !error && walk != fs::recursive_directory_iterator(); walk.increment(error)) {
    const fs::directory_entry& entry = *walk;
    const std::string relative = entry.path().lexically_relative(folder).string();
    if (relative == kToolkitManifestName) continue;
    if (keep && !Kept(folder, entry, relative, keep)) continue;
    ASSIGN_OR_RETURN(std::string line, LineOf(folder, entry));
    if (!line.empty()) lines.emplace(relative, std::move(line));
  }
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot read all of the toolkit folder ", folder, ": ", error.message()));
  }
  std::string manifest = absl::StrCat(kFormatLine, "\n");
  for (const auto& [path, line] : lines) absl::StrAppend(&manifest, line, "\n");
  return manifest;
}

absl::Status VerifyManifest(const std::string& folder) {
  absl::StatusOr<std::string> written = ReadFile(folder + "/" + kToolkitManifestName);
  if (!written.ok()) {
    return absl::NotFoundError(absl::StrCat(folder, " has no ", kToolkitManifestName,
                                            ": it is not a toolkit distcc-cuda installed"));
  }
  ASSIGN_OR_RETURN(std::string now, ManifestOf(folder));
  if (now == *written) return absl::OkStatus();
  const std::map<std::string, std::string> listed = ByPath(*written);
  const std::map<std::string, std::string> found = ByPath(now);
  std::string what = "its manifest is damaged";
  for (const auto& [path, line] : listed) {
    auto it = found.find(path);
    if (it == found.end()) {
      what = absl::StrCat(path, " is missing");
      break;
    }
    if (it->second != line) {
      what = absl::StrCat(path, " changed since it was installed");
      break;
    }
  }
  for (const auto& [path, line] : found) {
    if (what != "its manifest is damaged") break;
    if (listed.count(path) == 0) what = absl::StrCat(path, " is not part of it");
  }
  return absl::FailedPreconditionError(
      absl::StrCat("the toolkit at ", folder, " is not as installed: ", what,
                   " (`distcc-cuda toolkit install` of its release installs it again)"));
}

}  // namespace distcc_cuda
