// SPDX-License-Identifier: Apache-2.0
#include "client/plan/workspace_layout.h"

#include <algorithm>
#include <filesystem>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/base/files.h"

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

std::string CompileWorkspace(const std::string& directory, const std::string& source,
                             const std::string& bound) {
  const std::string folder = AbsolutePath(directory);
  const std::string source_folder = fs::path(AbsolutePath(source, folder)).parent_path().string();
  return Above(FindProjectRoot(folder, bound), FindProjectRoot(source_folder, bound));
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

bool WorkspaceLayout::Contains(absl::string_view path) const { return IsUnder(path, root_); }

std::string WorkspaceLayout::OnWorker(const std::string& path) const {
  if (!relocated() || !Contains(path)) return path;
  if (path.size() == root_.size()) return canonical_;
  const size_t rest = root_ == "/" ? 1 : root_.size() + 1;
  return absl::StrCat(canonical_, "/", absl::string_view(path).substr(rest));
}

std::string WorkspaceLayout::InTree(const std::string& path) const {
  std::string on_worker = OnWorker(path);
  return on_worker == "/" ? "" : on_worker.substr(1);
}

std::string WorkspaceLayout::ToLocalText(absl::string_view text) const {
  if (!relocated()) return std::string(text);
  return absl::StrReplaceAll(text, {{canonical_, root_ == "/" ? "" : root_}});
}

absl::StatusOr<WorkspaceLayout> LayoutFor(const std::string& workspace,
                                          const std::vector<std::string>& closure,
                                          const std::vector<std::string>& anchors,
                                          bool absolute_paths, OutsideFiles* outside) {
  std::string root = workspace;
  auto anchor_of = [&](const std::string& path) -> const std::string* {
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
  for (const std::string& path : closure) {
    if (layout.Contains(path)) continue;
    if (layout.relocated() && IsUnder(path, kCanonicalWorkspace)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " lies under ", kCanonicalWorkspace,
                       ", where the workers put the workspace, but outside this build's workspace ",
                       root, "; build with --absolute-paths, or move it"));
    }
    if (outside == nullptr) continue;
    const std::string* anchor = anchor_of(path);
    ++(*outside)[anchor != nullptr ? *anchor : path];
  }
  return layout;
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

}  // namespace

// Whether `workspace` can be found in texts by its name: a folder whose
// name holds a space or what make or a shell escapes is spelled otherwise
// in a make rule, so such a workspace keys by its absolute paths.
bool Markable(const std::string& workspace) {
  return !workspace.empty() && workspace != "/" &&
         workspace.find_first_of(" \t\n\\#$:,\"'=%") == std::string::npos;
}

std::string MarkWorkspace(absl::string_view text, const std::string& workspace) {
  if (!Markable(workspace)) return std::string(text);
  std::string out;
  size_t from = 0;
  for (size_t at = text.find(workspace); at != absl::string_view::npos;
       at = text.find(workspace, at + 1)) {
    const size_t end = at + workspace.size();
    const bool starts = at == 0 || BeforePath(text[at - 1]) || (at == 2 && text[0] == '-');
    const bool ends = end == text.size() || AfterPath(text[end]);
    if (!starts || !ends || at < from) continue;
    absl::StrAppend(&out, text.substr(from, at - from), kWorkspaceMark);
    from = end;
  }
  absl::StrAppend(&out, text.substr(from));
  return out;
}

std::string WorkspaceMarked(absl::string_view text, const std::string& workspace) {
  if (!Markable(workspace)) return std::string(text);
  return absl::StrReplaceAll(text, {{kWorkspaceMark, workspace}});
}

std::string DescribeWorkspaces(const std::map<std::string, int>& units, const OutsideFiles& outside,
                               bool absolute_paths) {
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
  if (!outside.empty()) {
    absl::StrAppend(&text, "\n            outside it, keyed by their own paths: ",
                    DescribeOutsideFiles(outside));
  }
  return text;
}

}  // namespace distcc_cuda::client
