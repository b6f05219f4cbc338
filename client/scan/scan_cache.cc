// SPDX-License-Identifier: Apache-2.0
#include "client/scan/scan_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/plan/unit_request.h"
#include "client/plan/workspace_layout.h"
#include "common/base/files.h"
#include "common/store/digest.h"
#include "distcc_cuda/v1/scan_cache.pb.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

// A file that changed this close to the scan's start may have changed
// during it, within one tick of the file system's clock.
constexpr absl::Duration kTooNew = absl::Milliseconds(100);

// How many folders of an include name ("cutlass/gemm/collective/x.hpp")
// are watched under each include folder.
constexpr int kDeepestIncludeName = 6;

int64_t Nanos(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

void SetStat(const struct stat& info, v1::ScanCacheEntry::File* file) {
  file->set_size(info.st_size);
  file->set_mtime_ns(Nanos(info.st_mtim));
  file->set_ctime_ns(Nanos(info.st_ctim));
  file->set_inode(info.st_ino);
  file->set_device(info.st_dev);
}

// What the tree memo keys a file by besides its digest: a chmod changes the
// tree (a file's executable bit) and the change time, not the digest.
std::string StatText(const v1::ScanCacheEntry::File& file) {
  return absl::StrCat(file.size(), ":", file.mtime_ns(), ":", file.ctime_ns(), ":", file.inode(),
                      ":", file.device());
}

bool SameStat(const struct stat& info, const v1::ScanCacheEntry::File& file) {
  return file.size() == info.st_size && file.mtime_ns() == Nanos(info.st_mtim) &&
         file.ctime_ns() == Nanos(info.st_ctim) && file.inode() == info.st_ino &&
         file.device() == info.st_dev;
}

// The digest of a folder's sorted entry names: a file replaced by one of
// the same name (an editor's save, a checkout) leaves it as it was.
std::string ListNamesDigest(const std::string& path) {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(path, error), end; !error && it != end; it.increment(error)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return DigestOf(absl::StrJoin(names, std::string(1, '\0'))).hash;
}

// A folder's listing is kept for others only when its mtime is at least
// this old: a name added within the same tick of the file system's clock
// would not change it.
constexpr absl::Duration kSettled = absl::Seconds(1);

// Entries are zstd frames: the paths of a flash-attention unit's entry
// (1,169 files, 2,136 folders) repeat long prefixes, 420 KB raw.
std::string Packed(const std::string& bytes) {
  std::string packed(ZSTD_compressBound(bytes.size()), '\0');
  const size_t n = ZSTD_compress(packed.data(), packed.size(), bytes.data(), bytes.size(), 3);
  if (ZSTD_isError(n)) return "";
  packed.resize(n);
  return packed;
}

std::optional<std::string> Unpacked(const std::string& packed) {
  const unsigned long long size = ZSTD_getFrameContentSize(packed.data(), packed.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN || size > (64u << 20)) {
    return std::nullopt;
  }
  std::string bytes(size, '\0');
  const size_t n = ZSTD_decompress(bytes.data(), bytes.size(), packed.data(), packed.size());
  if (ZSTD_isError(n) || n != size) return std::nullopt;
  return bytes;
}

// A folder whose mentions an entry keeps as a mark, not by where it is.
struct PathMark {
  std::string folder;
  std::string mark;
};

// The absolute paths `flag` names: the flag itself ("/x"), or a path after
// '=', ',', ':' or a one-letter option ("-I/x", "-isystem=/x").
std::vector<std::string> PathsNamedIn(const std::string& flag) {
  std::vector<std::string> paths;
  for (size_t at = flag.find('/'); at != std::string::npos; at = flag.find('/', at + 1)) {
    const char before = at == 0 ? '\0' : flag[at - 1];
    if (at != 0 && before != '=' && before != ',' && before != ':' &&
        !(at == 2 && flag[0] == '-')) {
      continue;
    }
    const size_t end = flag.find_first_of(",: '\"", at);
    std::string path =
        fs::path(flag.substr(at, end == std::string::npos ? std::string::npos : end - at))
            .lexically_normal()
            .string();
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    paths.push_back(std::move(path));
    if (end == std::string::npos) break;
    at = end;
  }
  return paths;
}

bool Within(const std::string& path, const std::string& folder) {
  return path == folder || absl::StartsWith(path, folder + "/");
}

// The prefix of the Python environment whose packages are at `site`
// (PREFIX/lib/pythonX.Y/site-packages): its own include folder is in
// setuptools' flags (every venv's, empty). None for another layout or a
// prefix of the system's.
std::optional<std::string> EnvironmentPrefix(const std::string& site) {
  const fs::path packages(site);
  const fs::path python = packages.parent_path();
  const fs::path lib = python.parent_path();
  const std::string prefix = lib.parent_path().string();
  if ((packages.filename() != "site-packages" && packages.filename() != "dist-packages") ||
      !absl::StartsWith(python.filename().string(), "python") ||
      (lib.filename() != "lib" && lib.filename() != "lib64") || prefix.size() <= 1 ||
      Within(prefix, "/usr")) {
    return std::nullopt;
  }
  return prefix;
}

// The folders `question`'s entry is keyed relative to: each input root
// (FindInputRoot: a venv's site-packages, Python's headers) its flags name
// outside its workspace, and the prefix of each environment, the longest
// first, by its canonical place (and how many such came before it), then
// the workspace. The same tree in another folder, with torch in another
// venv, asks the same question; what its files hold is checked as ever.
// None without a workspace.
std::vector<PathMark> MarksOf(const ScanQuestion& question) {
  std::vector<PathMark> marks;
  const std::string& workspace = question.workspace;
  if (workspace.empty()) return marks;
  std::map<std::string, int> uses;
  for (const std::string& flag : question.flags) {
    for (const std::string& path : PathsNamedIn(flag)) {
      std::optional<InputRoot> root = FindInputRoot(path);
      if (!root || Within(root->local, workspace) || Within(workspace, root->local) ||
          std::any_of(marks.begin(), marks.end(),
                      [&](const PathMark& mark) { return mark.folder == root->local; })) {
        continue;
      }
      const int n = ++uses[root->canonical];
      const std::string place = absl::StrCat(root->canonical, n > 1 ? absl::StrCat("#", n) : "");
      marks.push_back({root->local, absl::StrCat("\x01", place, "\x01")});
      std::optional<std::string> prefix = EnvironmentPrefix(root->local);
      if (prefix && !Within(*prefix, workspace) && !Within(workspace, *prefix)) {
        marks.push_back({*prefix, absl::StrCat("\x01prefix of ", place, "\x01")});
      }
    }
  }
  std::stable_sort(marks.begin(), marks.end(), [](const PathMark& a, const PathMark& b) {
    return a.folder.size() > b.folder.size();
  });
  marks.push_back({workspace, kWorkspaceMark});
  return marks;
}

// `text` with each folder of `marks` as its mark.
std::string Marked(std::string text, const std::vector<PathMark>& marks,
                   WorkspaceSpelling spelling = WorkspaceSpelling::kPath) {
  for (const PathMark& mark : marks) text = MarkWorkspace(text, mark.folder, spelling, mark.mark);
  return text;
}

// `text` with each mark of `marks` as its folder here.
std::string Unmarked(std::string text, const std::vector<PathMark>& marks,
                     WorkspaceSpelling spelling = WorkspaceSpelling::kPath) {
  for (const PathMark& mark : marks) {
    text = WorkspaceMarked(text, mark.folder, spelling, mark.mark);
  }
  return text;
}

// `entry` (its paths as they are here) as it is stored: paths inside
// the folders of `marks` relative to them.
v1::ScanCacheEntry Marked(v1::ScanCacheEntry entry, const std::vector<PathMark>& marks) {
  for (v1::ScanCacheEntry::File& file : *entry.mutable_files()) {
    file.set_path(Marked(file.path(), marks));
  }
  for (v1::ScanCacheEntry::Folder& folder : *entry.mutable_folders()) {
    folder.set_path(Marked(folder.path(), marks));
  }
  entry.set_dependency_text(Marked(entry.dependency_text(), marks, WorkspaceSpelling::kMakeRule));
  return entry;
}

}  // namespace

std::vector<std::string> FoldersToWatch(const ScanQuestion& question,
                                        const std::vector<std::string>& files) {
  std::set<std::string> folders;
  std::set<std::string> names;  // folder parts of include names: "", "cute", "cute/atom"...
  for (const std::string& file : files) {
    fs::path path = fs::path(AbsolutePath(file, question.directory)).lexically_normal();
    folders.insert(path.parent_path().string());
    std::vector<std::string> parts;
    for (fs::path folder = path.parent_path();
         folder.has_relative_path() && static_cast<int>(parts.size()) < kDeepestIncludeName - 1;
         folder = folder.parent_path()) {
      parts.insert(parts.begin(), folder.filename().string());
    }
    names.insert("");
    for (size_t first = 0; first < parts.size(); ++first) {
      std::vector<std::string> tail(parts.begin() + first, parts.end());
      names.insert(absl::StrJoin(tail, "/"));
    }
  }
  for (const std::string& include : IncludeFolders(question.directory, question.flags, {})) {
    for (const std::string& name : names) {
      folders.insert(
          (name.empty() ? fs::path(include) : fs::path(include) / name).lexically_normal());
    }
  }
  return {folders.begin(), folders.end()};
}

v1::ScanCacheEntry::Folder ScanCache::FolderNow(const std::string& path, bool with_names) {
  v1::ScanCacheEntry::Folder folder;
  folder.set_path(path);
  struct stat info;
  if (stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    folder.set_exists(true);
    folder.set_mtime_ns(Nanos(info.st_mtim));
    folder.set_inode(info.st_ino);
    if (with_names) folder.set_names_sha256(NamesDigest(path, folder.mtime_ns(), info.st_ino));
  }
  return folder;
}

std::string ScanCache::NamesDigest(const std::string& path, int64_t mtime_ns, uint64_t inode) {
  {
    absl::MutexLock lock(&listed_mu_);
    auto it = listed_.find(path);
    if (it != listed_.end() && it->second.mtime_ns == mtime_ns && it->second.inode == inode) {
      return it->second.names_sha256;
    }
  }
  std::string digest = ListNamesDigest(path);
  ++folders_listed_;
  struct stat after;
  if (mtime_ns < absl::ToUnixNanos(absl::Now() - kSettled) && stat(path.c_str(), &after) == 0 &&
      Nanos(after.st_mtim) == mtime_ns && after.st_ino == inode) {
    absl::MutexLock lock(&listed_mu_);
    listed_[path] = ListedFolder{mtime_ns, inode, digest};
  }
  return digest;
}

ScanCache::ScanCache(std::string folder, std::string toolchain_digest,
                     EnvironmentVariables nvcc_variables)
    : folder_(std::move(folder)),
      toolchain_digest_(std::move(toolchain_digest)),
      nvcc_variables_(std::move(nvcc_variables)) {}

std::string ScanCache::FolderFor(const std::string& state_dir,
                                 const std::optional<std::string>& named) {
  if (named.has_value() && !named->empty()) return *named == "off" ? "" : *named;
  return state_dir.empty() ? "" : state_dir + "/scan";
}

std::string ScanCache::QuestionText(const ScanQuestion& question) const {
  const std::vector<PathMark> marks = MarksOf(question);
  auto marked = [&](const std::string& text) { return Marked(text, marks); };
  // v2: paths inside the workspace are relative to it, and inside an
  // input root to its mark (a question that names none is as it was).
  std::string text = absl::StrCat("distcc-cuda scan 2\ntoolchain ", toolchain_digest_, "\nnvcc ",
                                  question.nvcc, "\ndirectory ", marked(question.directory),
                                  "\nsource ", marked(question.source), "\n");
  for (const std::string& flag : question.flags) {
    absl::StrAppend(&text, "flag ", marked(flag), "\n");
  }
  for (const std::string& argument : question.dependency_arguments) {
    absl::StrAppend(&text, "dependency ", marked(argument), "\n");
  }
  for (const auto& [name, value] : nvcc_variables_) {
    absl::StrAppend(&text, "env ", name, "=", value, "\n");
  }
  return text;
}

std::string ScanCache::EntryPath(const std::string& question) const {
  const std::string key = DigestOf(question).hash;
  return absl::StrCat(folder_, "/", key.substr(0, 2), "/", key);
}

std::optional<ScanAnswer> ScanCache::Find(const ScanQuestion& question) {
  if (folder_.empty()) return std::nullopt;
  const std::string text = QuestionText(question);
  const std::string path = EntryPath(text);
  v1::ScanCacheEntry entry;
  absl::StatusOr<std::string> stored = ReadFile(path);
  std::optional<std::string> bytes = stored.ok() ? Unpacked(*stored) : std::optional<std::string>();
  if (!bytes || !entry.ParseFromString(*bytes) || entry.question() != text) {
    ++misses_;
    return std::nullopt;
  }
  // The entry as this workspace's: its paths where the workspace is now.
  const std::vector<PathMark> marks = MarksOf(question);
  for (v1::ScanCacheEntry::File& file : *entry.mutable_files()) {
    file.set_path(Unmarked(file.path(), marks));
  }
  for (v1::ScanCacheEntry::Folder& folder : *entry.mutable_folders()) {
    folder.set_path(Unmarked(folder.path(), marks));
  }
  bool restat = false;
  for (v1::ScanCacheEntry::File& file : *entry.mutable_files()) {
    struct stat info;
    if (stat(file.path().c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
      ++misses_;
      return std::nullopt;
    }
    if (SameStat(info, file)) continue;
    // Touched or rewritten: the same content still gives the same answer.
    absl::StatusOr<Digest> digest = DigestOfFile(file.path());
    if (!digest.ok() || digest->hash != file.sha256()) {
      ++misses_;
      return std::nullopt;
    }
    SetStat(info, &file);
    restat = true;
  }
  for (v1::ScanCacheEntry::Folder& folder : *entry.mutable_folders()) {
    v1::ScanCacheEntry::Folder now = FolderNow(folder.path(), false);
    if (now.exists() != folder.exists()) {
      ++misses_;
      return std::nullopt;
    }
    if (now.mtime_ns() == folder.mtime_ns() && now.inode() == folder.inode()) continue;
    // Written to: only a new name can hide a header.
    now = FolderNow(folder.path(), true);
    if (now.names_sha256() != folder.names_sha256()) {
      ++misses_;
      return std::nullopt;
    }
    folder = std::move(now);
    restat = true;
  }
  if (restat) {
    (void)WriteFileAtomically(path, Packed(Marked(entry, marks).SerializeAsString()));
  } else {
    utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // recently used, for Trim
  }
  ++hits_;
  ScanAnswer answer;
  absl::MutexLock lock(&known_mu_);
  for (const v1::ScanCacheEntry::File& file : entry.files()) {
    answer.files.push_back(file.path());
    known_[file.path()] = Vouched{Digest{file.sha256(), file.size()}, StatText(file)};
  }
  answer.dependency_text = Unmarked(entry.dependency_text(), marks, WorkspaceSpelling::kMakeRule);
  return answer;
}

void ScanCache::Remember(const ScanQuestion& question, const ScanAnswer& answer,
                         absl::Time scan_began) {
  if (folder_.empty()) return;
  const int64_t too_new = absl::ToUnixNanos(scan_began - kTooNew);
  v1::ScanCacheEntry entry;
  entry.set_question(QuestionText(question));
  entry.set_dependency_text(answer.dependency_text);
  // Folders first: a header added while the files are hashed then shows as
  // a changed folder at the next Find.
  for (const std::string& path : FoldersToWatch(question, answer.files)) {
    v1::ScanCacheEntry::Folder folder = FolderNow(path, true);
    if (folder.exists() && folder.mtime_ns() >= too_new) return;
    *entry.add_folders() = std::move(folder);
  }
  std::set<std::string> seen;
  for (const std::string& listed : answer.files) {
    const std::string path = AbsolutePath(listed, question.directory);
    if (!seen.insert(path).second) continue;
    struct stat before, after;
    if (stat(path.c_str(), &before) != 0 || !S_ISREG(before.st_mode)) return;
    if (Nanos(before.st_mtim) >= too_new || Nanos(before.st_ctim) >= too_new) return;
    absl::StatusOr<Digest> digest = DigestOfFile(path);
    if (!digest.ok() || stat(path.c_str(), &after) != 0) return;
    v1::ScanCacheEntry::File* file = entry.add_files();
    file->set_path(path);
    SetStat(before, file);
    if (!SameStat(after, *file)) return;  // changed while it was hashed
    file->set_sha256(digest->hash);
    absl::MutexLock lock(&known_mu_);
    known_[path] = Vouched{*digest, StatText(*file)};
  }
  const std::string path = EntryPath(entry.question());
  if (!MakeDirectories(fs::path(path).parent_path().string()).ok()) return;
  (void)WriteFileAtomically(path, Packed(Marked(entry, MarksOf(question)).SerializeAsString()));
}

std::optional<Digest> ScanCache::KnownDigest(const std::string& path) const {
  absl::MutexLock lock(&known_mu_);
  auto it = known_.find(path);
  if (it == known_.end()) return std::nullopt;
  return it->second.digest;
}

std::string ScanCache::TreePath(const std::string& root, const std::string& source,
                                const std::vector<std::string>& files) const {
  if (folder_.empty()) return "";
  std::string text = absl::StrCat("distcc-cuda tree 2\nroot ", root, "\nsource ", source, "\n");
  {
    absl::MutexLock lock(&known_mu_);
    for (const std::string& file : files) {
      auto it = known_.find(file);
      if (it == known_.end()) return "";
      absl::StrAppend(&text, it->second.digest.hash, " ", it->second.digest.size_bytes, " ",
                      it->second.stat, " ", file, "\n");
    }
  }
  const std::string key = DigestOf(text).hash;
  return absl::StrCat(folder_, "/trees/", key.substr(0, 2), "/", key);
}

std::optional<v1::CompileUnit> ScanCache::FindTree(const std::string& root,
                                                   const std::string& source,
                                                   const std::vector<std::string>& files) const {
  const std::string path = TreePath(root, source, files);
  if (path.empty()) return std::nullopt;
  absl::StatusOr<std::string> stored = ReadFile(path);
  v1::CompileUnit inputs;
  if (!stored.ok() || !inputs.ParseFromString(*stored) ||
      !ValidateDigest(FromProto(inputs.input_root())).ok()) {
    return std::nullopt;
  }
  utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // recently used, for Trim
  return inputs;
}

void ScanCache::RememberTree(const std::string& root, const std::string& source,
                             const std::vector<std::string>& files,
                             const v1::CompileUnit& unit) const {
  const std::string path = TreePath(root, source, files);
  if (path.empty() || !MakeDirectories(fs::path(path).parent_path().string()).ok()) return;
  v1::CompileUnit inputs;
  *inputs.mutable_input_root() = unit.input_root();
  *inputs.mutable_inputs() = unit.inputs();
  (void)WriteFileAtomically(path, inputs.SerializeAsString());
}

int ScanCache::Trim(int64_t max_bytes) {
  if (folder_.empty()) return 0;
  struct Entry {
    int64_t mtime_ns;
    int64_t bytes;
    std::string path;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code error;
  for (fs::recursive_directory_iterator it(folder_, error), end; !error && it != end;
       it.increment(error)) {
    struct stat info;
    if (stat(it->path().c_str(), &info) != 0 || !S_ISREG(info.st_mode)) continue;
    entries.push_back({Nanos(info.st_mtim), static_cast<int64_t>(info.st_size), it->path()});
    total += info.st_size;
  }
  if (total <= max_bytes) return 0;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.mtime_ns < b.mtime_ns; });
  int removed = 0;
  for (const Entry& entry : entries) {
    if (total <= max_bytes) break;
    if (unlink(entry.path.c_str()) == 0) {
      total -= entry.bytes;
      ++removed;
    }
  }
  return removed;
}

}  // namespace distcc_cuda::client
