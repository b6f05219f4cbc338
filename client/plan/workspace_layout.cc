// SPDX-License-Identifier: Apache-2.0
#include "client/plan/workspace_layout.h"

#include <algorithm>
#include <filesystem>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/nvcc/canonical_paths.h"
#include "common/nvcc/nvcc_args.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

// Whether `path` is `folder` or lies under it (both absolute and normal).
bool IsUnder(absl::string_view path, absl::string_view folder) {
  if (folder == "/") return absl::StartsWith(path, "/");
  return absl::StartsWith(path, folder) &&
         (path.size() == folder.size() || path[folder.size()] == '/');
}

bool Holds(const std::string& folder, const char* name) {
  std::error_code error;
  return fs::exists(fs::path(folder) / name, error);
}

bool HoldsProject(const std::string& folder) {
  return Holds(folder, ".git") || Holds(folder, "setup.py") || Holds(folder, "pyproject.toml");
}

std::string Parent(const std::string& folder) {
  return folder == "/" ? folder : fs::path(folder).parent_path().string();
}

// The deepest folder above both (absolute, normal) paths.
std::string Above(const std::string& a, const std::string& b) {
  std::string common = a;
  while (!IsUnder(b, common)) common = Parent(common);
  return common;
}

}  // namespace

std::string FindProjectRoot(const std::string& folder, const std::string& bound) {
  const std::string start = AbsolutePath(folder);
  const bool bounded = !bound.empty() && IsUnder(start, AbsolutePath(bound));
  const std::string top = bounded ? AbsolutePath(bound) : "/";
  for (std::string at = start;; at = Parent(at)) {
    if (HoldsProject(at)) return at;
    if (Holds(at, "CMakeLists.txt")) {
      // The outermost of an unbroken chain of CMake folders, unless a
      // project marker says where the project starts on the way.
      std::string outer = at;
      while (outer != top && outer != "/" && !HoldsProject(outer) &&
             Holds(Parent(outer), "CMakeLists.txt")) {
        outer = Parent(outer);
      }
      return outer;
    }
    // A session's folder is the project of what it builds; without one,
    // the folder itself.
    if (at == top) return bounded ? top : start;
  }
}

namespace {

// Whether neither of two (absolute, normal) folders holds the other.
bool Apart(const std::string& a, const std::string& b) { return !IsUnder(a, b) && !IsUnder(b, a); }

}  // namespace

std::string CompileWorkspace(const std::string& directory, const std::string& source,
                             const std::string& bound) {
  const std::string folder = AbsolutePath(directory);
  const std::string source_folder = fs::path(AbsolutePath(source, folder)).parent_path().string();
  const std::string directory_project = FindProjectRoot(folder, bound);
  const std::string source_project = FindProjectRoot(source_folder, bound);
  // An out-of-tree build folder is a root of its own (OutOfTreeBuildFolder).
  if (Apart(directory_project, source_project)) return source_project;
  return Above(directory_project, source_project);
}

std::string OutOfTreeBuildFolder(const std::string& directory, const std::string& workspace,
                                 const std::string& bound) {
  const std::string folder = AbsolutePath(directory);
  if (IsUnder(folder, workspace)) return "";
  const std::string top = bound.empty() ? "/" : AbsolutePath(bound);
  const bool bounded = IsUnder(folder, top);
  for (std::string at = folder;; at = Parent(at)) {
    if (Holds(at, "CMakeCache.txt")) return Apart(at, workspace) ? at : "";
    if (at == "/" || (bounded && at == top)) break;
  }
  const std::string project = FindProjectRoot(folder, bound);
  return Apart(project, workspace) ? project : "";
}

namespace {

// "python3", "python3.11", "python3.13t", "python2.7m": a Python's own
// header folder's name.
bool IsPythonHeaderFolder(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "python") || name.empty() || !absl::ascii_isdigit(name[0])) {
    return false;
  }
  name.remove_prefix(1);
  if (absl::ConsumePrefix(&name, ".")) {
    if (name.empty() || !absl::ascii_isdigit(name[0])) return false;
    while (!name.empty() && absl::ascii_isdigit(name[0])) name.remove_prefix(1);
  }
  for (char c : name) {
    if (!absl::ascii_islower(c)) return false;
  }
  return true;
}

bool IsSystemPath(absl::string_view path) {
  static const std::vector<std::string>* const kSystem =
      new std::vector<std::string>(SystemIncludePrefixes());
  const std::string folder = absl::StrCat(path, "/");
  return std::any_of(kSystem->begin(), kSystem->end(),
                     [&](const std::string& prefix) { return absl::StartsWith(folder, prefix); });
}

}  // namespace

std::optional<InputRoot> FindInputRoot(absl::string_view path) {
  if (!absl::StartsWith(path, "/") || IsSystemPath(path)) return std::nullopt;
  std::vector<absl::string_view> names = absl::StrSplit(path.substr(1), '/');
  // A folder's path: the names up to `last`.
  auto folder = [&](size_t last) {
    std::string local;
    for (size_t i = 0; i <= last; ++i) absl::StrAppend(&local, "/", names[i]);
    return local;
  };
  for (size_t i = names.size(); i-- > 0;) {
    if (names[i] == "site-packages" || names[i] == "dist-packages") {
      return InputRoot{folder(i), absl::StrCat(kCanonicalArea, "/site-packages"),
                       "Python packages"};
    }
  }
  for (size_t i = 0; i + 1 < names.size(); ++i) {
    if (names[i] != "include") continue;
    if (IsPythonHeaderFolder(names[i + 1])) {
      return InputRoot{folder(i + 1), absl::StrCat(kCanonicalArea, "/include/", names[i + 1]),
                       "Python headers"};
    }
    if (i + 2 < names.size() && names[i + 1] == "site" && IsPythonHeaderFolder(names[i + 2])) {
      return InputRoot{folder(i + 2), absl::StrCat(kCanonicalArea, "/include/site/", names[i + 2]),
                       "Python packages' headers"};
    }
  }
  return std::nullopt;
}

WorkspaceLayout::WorkspaceLayout(std::string root, std::string canonical)
    : root_(std::move(root)), canonical_(std::move(canonical)) {}

WorkspaceLayout WorkspaceLayout::Relocated(std::string root) {
  return WorkspaceLayout(std::move(root), kCanonicalWorkspace);
}

WorkspaceLayout WorkspaceLayout::AsIs(std::string root) {
  std::string canonical = root;
  return WorkspaceLayout(std::move(root), std::move(canonical));
}

void WorkspaceLayout::AddInputRoot(InputRoot root) { input_roots_.push_back(std::move(root)); }

std::string WorkspaceLayout::Key() const {
  std::string key = absl::StrCat(root_, " at ", canonical_);
  for (const InputRoot& root : input_roots_) {
    absl::StrAppend(&key, "\n", root.local, " at ", root.canonical);
  }
  return key;
}

bool WorkspaceLayout::Contains(absl::string_view path) const { return IsUnder(path, root_); }

bool WorkspaceLayout::Moves(absl::string_view path) const {
  if (relocated() && Contains(path)) return true;
  return std::any_of(input_roots_.begin(), input_roots_.end(),
                     [&](const InputRoot& root) { return IsUnder(path, root.local); });
}

namespace {

// `path` under `from` (both absolute and normal), moved under `to`.
std::string MovedPath(const std::string& path, const std::string& from, const std::string& to) {
  if (path.size() == from.size()) return to;
  const size_t rest = from == "/" ? 1 : from.size() + 1;
  return absl::StrCat(to, "/", absl::string_view(path).substr(rest));
}

}  // namespace

std::string WorkspaceLayout::OnWorker(const std::string& path) const {
  if (Contains(path)) return relocated() ? MovedPath(path, root_, canonical_) : path;
  for (const InputRoot& root : input_roots_) {
    if (IsUnder(path, root.local)) return MovedPath(path, root.local, root.canonical);
  }
  return path;
}

std::string WorkspaceLayout::InTree(const std::string& path) const {
  std::string on_worker = OnWorker(path);
  return on_worker == "/" ? "" : on_worker.substr(1);
}

std::string WorkspaceLayout::ToLocalText(absl::string_view text,
                                         const std::string& directory) const {
  // At one place, the longer canonical name is taken ("site-packages-2").
  std::vector<std::pair<std::string, std::string>> names;
  if (relocated()) names.emplace_back(canonical_, root_ == "/" ? "" : root_);
  for (const InputRoot& root : input_roots_) names.emplace_back(root.canonical, root.local);
  if (names.empty()) return std::string(text);
  std::string local = absl::StrReplaceAll(text, names);
  if (!directory.empty() && !Contains(directory) && Moves(directory)) {
    // "../workspace/src/k.cu(3): error" from an out-of-tree build folder.
    const std::string from = fs::path(canonical_).lexically_relative(OnWorker(directory)).string();
    local = MarkWorkspace(local, from, WorkspaceSpelling::kPath, root_ == "/" ? "" : root_);
  }
  return local;
}

namespace {

// The input roots of `anchors` outside the workspace (every file outside
// it lies under one of them once the workspace has widened), added to
// `layout` as LayoutFor says.
void AddInputRoots(const std::vector<std::string>& anchors, WorkspaceLayout& layout) {
  auto below_an_anchor = [&](const std::string& folder) {
    return std::any_of(anchors.begin(), anchors.end(), [&](const std::string& anchor) {
      return !layout.Contains(anchor) && anchor.size() < folder.size() && IsUnder(folder, anchor);
    });
  };
  for (const std::string& anchor : anchors) {
    if (layout.Contains(anchor) || layout.Moves(anchor)) continue;
    std::optional<InputRoot> root = FindInputRoot(anchor);
    if (!root || IsUnder(layout.root(), root->local) || below_an_anchor(root->local)) continue;
    const std::vector<InputRoot>& added = layout.input_roots();
    if (std::any_of(added.begin(), added.end(),
                    [&](const InputRoot& other) { return IsUnder(other.local, root->local); })) {
      continue;  // one root inside another: both keep what they are
    }
    const std::string place = root->canonical;
    for (int n = 2;
         std::any_of(added.begin(), added.end(),
                     [&](const InputRoot& other) { return other.canonical == root->canonical; });
         ++n) {
      root->canonical = absl::StrCat(place, "-", n);
    }
    layout.AddInputRoot(*std::move(root));
  }
}

}  // namespace

absl::StatusOr<WorkspaceLayout> LayoutFor(const std::string& workspace,
                                          const std::vector<std::string>& closure,
                                          const std::vector<std::string>& anchors,
                                          bool absolute_paths, OutsideFiles* outside,
                                          const std::string& build_folder) {
  std::string root = workspace;
  const bool own_build_folder = !build_folder.empty() && Apart(build_folder, root);
  // As is, the compile's folder lies in the workspace, as a local nvcc sees it.
  if (own_build_folder && absolute_paths) root = Above(root, build_folder);
  const bool build_root = own_build_folder && !absolute_paths;
  auto anchor_of = [&](const std::string& path) -> const std::string* {
    if (build_root && IsUnder(path, build_folder)) return &build_folder;
    for (const std::string& anchor : anchors) {
      if (!IsUnder(anchor, root) && IsUnder(path, anchor)) return &anchor;
    }
    return nullptr;
  };
  for (const std::string& path : closure) {
    if (!IsUnder(path, root) && anchor_of(path) == nullptr) root = Above(root, path);
  }
  WorkspaceLayout layout =
      absolute_paths ? WorkspaceLayout::AsIs(root) : WorkspaceLayout::Relocated(root);
  if (build_root && !IsUnder(build_folder, root)) {
    layout.AddInputRoot(InputRoot{build_folder, kCanonicalBuildFolder, "build folder"});
  }
  if (!absolute_paths) AddInputRoots(anchors, layout);
  for (const std::string& path : closure) {
    if (layout.Contains(path) || layout.Moves(path)) continue;
    if (layout.relocated() && IsUnder(path, kCanonicalArea)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " lies under ", kCanonicalArea,
          ", where the workers put the workspace and the input roots, but outside this build's "
          "workspace ",
          root, " and its input roots; build with --absolute-paths, or move it"));
    }
    if (outside == nullptr) continue;
    const std::string* anchor = anchor_of(path);
    ++(*outside)[anchor != nullptr ? *anchor : path];
  }
  return layout;
}

void MergeInputRoots(const WorkspaceLayout& layout, InputRoots& into) {
  for (const InputRoot& root : layout.input_roots()) into.try_emplace(root.local, root);
}

void MergeOutsideFiles(const OutsideFiles& from, OutsideFiles& into) {
  for (const auto& [folder, count] : from) {
    int& most = into[folder];
    most = std::max(most, count);
  }
}

std::string DescribeOutsideFiles(const OutsideFiles& outside, int limit) {
  std::vector<std::pair<int, std::string>> by_files;
  for (const auto& [folder, files] : outside) by_files.emplace_back(-files, folder);
  std::sort(by_files.begin(), by_files.end());
  std::string text;
  for (size_t i = 0; i < by_files.size() && static_cast<int>(i) < limit; ++i) {
    absl::StrAppend(&text, i == 0 ? "" : ", ", by_files[i].second, " (", -by_files[i].first,
                    by_files[i].first == -1 ? " file)" : " files)");
  }
  if (static_cast<int>(by_files.size()) > limit) {
    absl::StrAppend(&text, " and ", by_files.size() - limit, " more");
  }
  return text;
}

namespace {

bool BeforePath(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '=' || c == ',' || c == ':' || c == '"' ||
         c == '\'';
}

bool AfterPath(char c) {
  return c == '/' || c == ' ' || c == '\t' || c == '\n' || c == ',' || c == ':' || c == '"' ||
         c == '\'';
}

// Whether `workspace` can be found in texts by its name: a folder whose
// name holds a tab, a newline, a backslash or a quote keys by its absolute
// paths (make and the shell spell those in more than one way).
bool Markable(const std::string& workspace) {
  return !workspace.empty() && workspace != "/" &&
         workspace.find_first_of("\t\n\\\"'") == std::string::npos;
}

// `workspace` as a text of `spelling` writes it: make's rules (g++ -M,
// nvcc -M) escape a space as "\ ", '#' as "\#" and '$' as "$$".
std::string Spelled(const std::string& workspace, WorkspaceSpelling spelling) {
  if (spelling == WorkspaceSpelling::kPath) return workspace;
  return absl::StrReplaceAll(workspace, {{" ", "\\ "}, {"#", "\\#"}, {"$", "$$"}});
}

}  // namespace

std::string MarkWorkspace(absl::string_view text, const std::string& workspace,
                          WorkspaceSpelling spelling, absl::string_view mark) {
  if (!Markable(workspace)) return std::string(text);
  const std::string spelled = Spelled(workspace, spelling);
  std::string out;
  size_t from = 0;
  for (size_t at = text.find(spelled); at != absl::string_view::npos;
       at = text.find(spelled, at + 1)) {
    const size_t end = at + spelled.size();
    const bool starts = at == 0 || BeforePath(text[at - 1]) || (at == 2 && text[0] == '-');
    const bool ends = end == text.size() || AfterPath(text[end]);
    if (!starts || !ends || at < from) continue;
    absl::StrAppend(&out, text.substr(from, at - from), mark);
    from = end;
  }
  absl::StrAppend(&out, text.substr(from));
  return out;
}

std::string WorkspaceMarked(absl::string_view text, const std::string& workspace,
                            WorkspaceSpelling spelling, absl::string_view mark) {
  if (!Markable(workspace)) return std::string(text);
  return absl::StrReplaceAll(text, {{mark, Spelled(workspace, spelling)}});
}

std::string DescribeWorkspaces(const std::map<std::string, int>& units, const InputRoots& roots,
                               const OutsideFiles& outside, bool absolute_paths) {
  std::string most;
  int most_units = -1;
  for (const auto& [root, count] : units) {
    if (count > most_units) std::tie(most, most_units) = std::tie(root, count);
  }
  std::string text = absl::StrCat("workspace ", most);
  if (units.size() > 1) absl::StrAppend(&text, " and ", units.size() - 1, " more");
  absl::StrAppend(&text, absolute_paths
                             ? " (--absolute-paths: at its own path on the workers; results "
                               "are keyed by it)"
                             : absl::StrCat(" (", kCanonicalWorkspace,
                                            " on the workers: its results serve the same tree in "
                                            "any folder)"));
  for (const auto& [local, root] : roots) {
    absl::StrAppend(&text, "\n            ", root.kind, " ", local, " (", root.canonical,
                    root.canonical == kCanonicalToolkitRoot
                        ? " on the workers, each its own of this release: results are keyed by "
                          "the release, not the folder)"
                        : " on the workers: the same files serve from any venv or folder)");
  }
  if (!outside.empty()) {
    absl::StrAppend(&text, "\n            outside it, keyed by their own paths: ",
                    DescribeOutsideFiles(outside));
  }
  return text;
}

}  // namespace distcc_cuda::client
