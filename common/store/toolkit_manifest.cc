// SPDX-License-Identifier: Apache-2.0
#include "common/store/toolkit_manifest.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/store/digest.h"

namespace distcc_cuda {
namespace fs = std::filesystem;
namespace {

constexpr char kFormatLine[] = "distcc-cuda toolkit manifest 1";

// Names in a manifest are words of printable ASCII: no space, no control
// character, nothing a terminal could act on.
bool IsWord(absl::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return static_cast<unsigned char>(c) > ' ' && static_cast<unsigned char>(c) < 0x7f;
  });
}

// A path within the limits: at most kMaxToolkitPathBytes and
// kMaxToolkitPathDepth names.
bool WithinPathLimits(absl::string_view path) {
  return path.size() <= kMaxToolkitPathBytes &&
         std::count(path.begin(), path.end(), '/') < kMaxToolkitPathDepth;
}

absl::Status Refuse(absl::string_view what) {
  return absl::InvalidArgumentError(TerminalSafe(what, false, 600));
}

// What a manifest's entries make: files, links, and the folders their paths
// imply. Views into the entries, which must outlive it.
class ManifestIndex {
 public:
  explicit ManifestIndex(const std::vector<ToolkitEntry>& entries) {
    for (const ToolkitEntry& entry : entries) {
      (entry.link ? links_ : files_).emplace(entry.path, &entry);
      // Each folder once: the walk up stops at one already known.
      absl::string_view path = entry.path;
      for (size_t slash = path.rfind('/'); slash != absl::string_view::npos;
           slash = path.rfind('/', slash - 1)) {
        if (!folders_.insert(path.substr(0, slash)).second || slash == 0) break;
      }
    }
  }

  size_t folders() const { return folders_.size(); }

  // A file or link where the manifest needs a folder.
  absl::Status CheckNothingBelowAFileOrLink() const {
    for (const auto* kind : {&files_, &links_}) {
      for (const auto& [path, entry] : *kind) {
        if (folders_.contains(path)) {
          return Refuse(absl::StrCat("the toolkit manifest puts entries below the ",
                                     entry->link ? "link " : "file ", path));
        }
      }
    }
    return absl::OkStatus();
  }

  // `link` resolved name by name from its folder, through folders of the
  // manifest only, to a file, a folder or a link that resolves so too.
  absl::Status CheckLink(const ToolkitEntry& link) const {
    absl::flat_hash_set<absl::string_view> chain;
    return Resolve(link, chain);
  }

 private:
  absl::Status Resolve(const ToolkitEntry& link,
                       absl::flat_hash_set<absl::string_view>& chain) const {
    auto refuse = [&](absl::string_view why) {
      return Refuse(
          absl::StrCat("the toolkit manifest's link ", link.path, " -> ", link.target, " ", why));
    };
    if (!chain.insert(link.path).second) return refuse("is part of a cycle of links");
    if (chain.size() > static_cast<size_t>(kMaxToolkitLinkChain)) {
      return refuse(absl::StrCat("leads through more than ", kMaxToolkitLinkChain, " links"));
    }
    std::vector<absl::string_view> at = absl::StrSplit(link.path, '/');
    at.pop_back();  // the link's own folder
    std::vector<absl::string_view> names = absl::StrSplit(link.target, '/');
    for (size_t i = 0; i < names.size(); ++i) {
      const absl::string_view name = names[i];
      if (name.empty()) return refuse("has an empty name");
      if (name == ".") continue;
      if (name == "..") {
        if (at.empty()) return refuse("leads out of the toolkit");
        at.pop_back();
        continue;
      }
      at.push_back(name);
      const std::string reached = absl::StrJoin(at, "/");
      if (folders_.contains(reached)) continue;
      auto file = files_.find(reached);
      auto other = links_.find(reached);
      // "file/." is no file to the kernel (ENOTDIR): only the last name may be one.
      const bool last = i + 1 == names.size();
      if (!last && (file != files_.end() || other != links_.end())) {
        return refuse(absl::StrCat("leads through ", reached,
                                   ", which is not a folder of the toolkit but a ",
                                   other != links_.end() ? "link" : "file"));
      }
      if (!last) return refuse(absl::StrCat("leads to nothing the toolkit holds (", reached, ")"));
      if (file != files_.end()) return absl::OkStatus();
      if (other != links_.end()) return Resolve(*other->second, chain);
      return refuse("leads to nothing the toolkit holds");
    }
    if (at.empty()) return refuse("leads to the toolkit's own folder");
    return absl::OkStatus();
  }

  absl::flat_hash_map<absl::string_view, const ToolkitEntry*> files_;
  absl::flat_hash_map<absl::string_view, const ToolkitEntry*> links_;
  absl::flat_hash_set<absl::string_view> folders_;
};

// One entry's line, for a path relative to `folder`.
absl::StatusOr<std::string> LineOf(const fs::path& folder, const fs::directory_entry& entry) {
  const std::string relative = entry.path().lexically_relative(folder).string();
  if (!IsWord(relative)) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", TerminalSafe(entry.path().string()),
                     "' has a space, a control character or a byte outside ASCII in its name; a "
                     "toolkit's files have none"));
  }
  if (!WithinPathLimits(relative)) {
    return absl::FailedPreconditionError(absl::StrCat(
        entry.path().string(), " is deeper than ", kMaxToolkitPathDepth, " folders or longer than ",
        kMaxToolkitPathBytes, " bytes within the toolkit; a toolkit's files are not"));
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
  ToolkitEntry entry;
  bool valid = false;
  // Two paths and a few words at most: longer is refused before splitting.
  if (line.size() <= 2 * kMaxToolkitPathBytes + 100) {
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ');
    if (words.size() == 5 && words[0] == "file" && (words[3] == "x" || words[3] == "-")) {
      entry.digest.hash = std::string(words[1]);
      valid = absl::SimpleAtoi(words[2], &entry.digest.size_bytes) &&
              ValidateDigest(entry.digest).ok() && entry.digest.size_bytes <= kMaxToolkitFileBytes;
      entry.executable = words[3] == "x";
      entry.path = std::string(words[4]);
    } else if (words.size() == 3 && words[0] == "link") {
      entry.link = true;
      entry.target = std::string(words[1]);
      entry.path = std::string(words[2]);
      valid = IsWord(entry.target) && entry.target.front() != '/' && WithinPathLimits(entry.target);
    }
  }
  if (!valid || !IsWord(entry.path) || !IsPlainRelativePath(entry.path) ||
      !WithinPathLimits(entry.path) || entry.path == kToolkitManifestName) {
    return Refuse(absl::StrCat("the toolkit manifest's line '", line.substr(0, 200),
                               line.size() > 200 ? "..." : "", "' is not valid"));
  }
  return entry;
}

// The links of `entries` that do not resolve inside through them.
std::set<std::string> UnresolvedLinks(const std::vector<ToolkitEntry>& entries) {
  const ManifestIndex index(entries);
  std::set<std::string> unresolved;
  for (const ToolkitEntry& entry : entries) {
    if (entry.link && !index.CheckLink(entry).ok()) unresolved.insert(entry.path);
  }
  return unresolved;
}

// `lines` (path -> manifest line, all of them ours) without the links
// that lead to nothing they list, until none is left.
void DropUnresolvedLinks(std::map<std::string, std::string>& lines) {
  for (;;) {
    std::vector<ToolkitEntry> entries;
    for (const auto& [path, line] : lines) {
      absl::StatusOr<ToolkitEntry> entry = EntryOf(line);
      if (entry.ok()) entries.push_back(*std::move(entry));
    }
    const std::set<std::string> unresolved = UnresolvedLinks(entries);
    if (unresolved.empty()) return;
    for (const std::string& path : unresolved) lines.erase(path);
  }
}

}  // namespace

absl::StatusOr<std::vector<ToolkitEntry>> ParseToolkitManifest(absl::string_view text) {
  if (static_cast<int64_t>(text.size()) > kMaxToolkitManifestBytes) {
    return absl::InvalidArgumentError("the toolkit manifest is larger than 16 MiB");
  }
  const size_t first_end = text.find('\n');
  if (first_end == absl::string_view::npos || text.substr(0, first_end) != kFormatLine ||
      text.back() != '\n') {
    return absl::InvalidArgumentError(
        absl::StrCat("not a toolkit manifest (its first line must be '", kFormatLine,
                     "' and its last must end)"));
  }
  // Counted before anything is split: a manifest of empty lines costs no
  // more than its bytes.
  const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  if (lines - 1 > static_cast<size_t>(kMaxToolkitEntries)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the toolkit manifest lists more than ", kMaxToolkitEntries, " entries"));
  }
  std::vector<ToolkitEntry> entries;
  entries.reserve(lines - 1);
  for (size_t begin = first_end + 1; begin < text.size();) {
    const size_t end = text.find('\n', begin);
    ASSIGN_OR_RETURN(ToolkitEntry entry, EntryOf(text.substr(begin, end - begin)));
    begin = end + 1;
    entries.push_back(std::move(entry));
  }
  // In order, as ManifestOf writes it: the folder is later checked against
  // the manifest's very text.
  for (size_t i = 1; i < entries.size(); ++i) {
    const std::string& before = entries[i - 1].path;
    const std::string& path = entries[i].path;
    if (path == before) {
      return Refuse(absl::StrCat("the toolkit manifest names ", path, " twice"));
    }
    if (path < before) {
      return Refuse(absl::StrCat("the toolkit manifest lists ", path, " after ", before,
                                 ": a manifest lists its paths in order"));
    }
  }
  const ManifestIndex index(entries);
  if (index.folders() > static_cast<size_t>(kMaxToolkitFolders)) {
    return absl::InvalidArgumentError(absl::StrCat("the toolkit manifest's paths make more than ",
                                                   kMaxToolkitFolders, " folders"));
  }
  RETURN_IF_ERROR(index.CheckNothingBelowAFileOrLink());
  for (const ToolkitEntry& entry : entries) {
    if (entry.link) RETURN_IF_ERROR(index.CheckLink(entry));
  }
  return entries;
}

int64_t ToolkitBytes(const std::vector<ToolkitEntry>& entries) {
  int64_t bytes = 0;
  for (const ToolkitEntry& entry : entries) {
    if (!entry.link) bytes += entry.digest.size_bytes;
  }
  return bytes;
}

ToolkitDiskCost DiskCostOf(const std::vector<ToolkitEntry>& entries) {
  constexpr int64_t kBlock = 4096;
  ToolkitDiskCost cost;
  for (const ToolkitEntry& entry : entries) {
    const int64_t size = entry.link ? 0 : entry.digest.size_bytes;
    cost.bytes += std::max<int64_t>(1, (size + kBlock - 1) / kBlock) * kBlock;
  }
  const int64_t folders = static_cast<int64_t>(ManifestIndex(entries).folders());
  cost.bytes += folders * kBlock;
  cost.inodes = static_cast<int64_t>(entries.size()) + folders;
  return cost;
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
  // A part: only links that lead to what it lists (a whole folder's
  // dangling link is its own to fix, and ParseToolkitManifest says so).
  if (keep && !error) DropUnresolvedLinks(lines);
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
