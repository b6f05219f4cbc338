// SPDX-License-Identifier: Apache-2.0
// Where a compile's files appear on the workers. The workspace (the folder
// of this machine a build belongs to: the manifest's, the project's that a
// launcher call compiles in, the unpacked sdist that pip or uv builds in)
// appears at one canonical root, the same for every client, folder and
// user; so does each input root, a folder outside it that every user has
// somewhere of their own (a Python environment's site-packages with torch's
// and pybind11's headers, Python's own include folder), found by its
// layout without configuration; any other file outside (a header named by
// an absolute -I) at its own path. A unit's paths, and so its result's
// key, its memory history and the object nvcc makes, then do not depend on
// where the workspace or the venv sits here: a pip build in a new
// temporary folder, a second checkout, a teammate's venv or a CI workspace
// finds the first one's results (as Bazel's exec root and ccache's
// base_dir make it, for more than one root). docs: docs/caching.md, "One
// cache for every folder".
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distcc_cuda::client {

// Where every workspace appears on the workers (and in --verify's rebuild).
// Not under /run or another folder no input may lie in; nobody's real
// folder.
inline constexpr char kCanonicalWorkspace[] = "/distcc-cuda/workspace";
// Where every canonical root lies on the workers: nothing of this machine
// under it is sent at its own path.
inline constexpr char kCanonicalArea[] = "/distcc-cuda";
// Where an out-of-tree build folder appears on the workers.
inline constexpr char kCanonicalBuildFolder[] = "/distcc-cuda/build";

// A folder outside the workspace whose files a compile reads and whose
// place differs from user to user: it appears on the workers at
// `canonical`, its files keyed by their place under it and their content.
struct InputRoot {
  std::string local;      // this machine's folder (absolute, normal)
  std::string canonical;  // under kCanonicalArea
  std::string kind;       // what it is, for the summary: "Python packages"
};

// The input root that holds `path` (absolute, normal; not a system
// folder's), by the folders' names alone, with its canonical place before
// any numbering: the last `site-packages` or `dist-packages` folder above
// it (a venv's, a conda environment's, a user's or Python's own) at
// /distcc-cuda/site-packages; Python's headers, `include/pythonX.Y` (and
// `include/site/pythonX.Y`, where pip puts packages' headers) at
// /distcc-cuda/include/pythonX.Y. Nothing for any other path.
std::optional<InputRoot> FindInputRoot(absl::string_view path);

// The nearest folder at or above `folder` (absolute) that holds a project:
// a `.git` (a checkout or a git worktree), a setup.py or a pyproject.toml;
// a CMakeLists.txt counts too, and its project is the outermost of the
// folders above it that hold one in an unbroken chain (CMake's
// subdirectories have their own). The search never climbs above `bound`
// when `folder` lies inside it (a `build --` session's folder: a project
// around it, such as a home folder kept in git, is not taken for it), and
// the bound is then the project when no marker is found below it; else
// `folder` itself when none is found.
std::string FindProjectRoot(const std::string& folder, const std::string& bound = "");

// The workspace of a launcher call (or a compile_commands.json entry) run
// in `directory` on `source` (both absolute): the folder above both of
// their projects (FindProjectRoot, within `bound`); the source's project
// alone when neither project holds the other (an out-of-tree build folder
// such as `cmake -B /tmp/build`, which OutOfTreeBuildFolder finds).
std::string CompileWorkspace(const std::string& directory, const std::string& source,
                             const std::string& bound = "");

// The build folder of a compile run in `directory` outside its
// `workspace` (CompileWorkspace): the nearest folder at or above it that
// holds a CMakeCache.txt (within `bound`, as FindProjectRoot), else its
// project; "" when it lies in the workspace, or holds it. Relocated, it
// appears on the workers at kCanonicalBuildFolder (LayoutFor), so that a
// teammate's build folder elsewhere, beside a checkout elsewhere, is the
// same compile.
std::string OutOfTreeBuildFolder(const std::string& directory, const std::string& workspace,
                                 const std::string& bound = "");

class WorkspaceLayout {
 public:
  // `root` (absolute and normal) appears on the workers at `canonical`.
  WorkspaceLayout(std::string root, std::string canonical);
  // `root` at kCanonicalWorkspace.
  static WorkspaceLayout Relocated(std::string root);
  // Every path at its own (--absolute-paths): results keyed by where the
  // workspace sits here, objects byte for byte a local nvcc's.
  static WorkspaceLayout AsIs(std::string root);

  const std::string& root() const { return root_; }
  const std::string& canonical() const { return canonical_; }
  bool relocated() const { return root_ != canonical_; }
  // The input roots, each outside the workspace and the others.
  const std::vector<InputRoot>& input_roots() const { return input_roots_; }
  // Adds `root` (LayoutFor decides which): OnWorker then moves its files.
  void AddInputRoot(InputRoot root);
  // What tells two layouts apart: the workspace and every input root, with
  // where each appears.
  std::string Key() const;

  // Whether the absolute `path` is the workspace root or lies under it.
  bool Contains(absl::string_view path) const;
  // Whether `path` is the workspace's or an input root's (moves on a worker).
  bool Moves(absl::string_view path) const;
  // The path that the absolute, normal `path` of this machine has on a
  // worker.
  std::string OnWorker(const std::string& path) const;
  // OnWorker relative to "/", the root every unit's paths are relative to
  // on the wire ("" for "/").
  std::string InTree(const std::string& path) const;
  // `text` (a worker's nvcc messages) with each canonical root named as it
  // is here, so that a message names the user's own files; for a unit run
  // in `directory` (absolute; "" for none) outside the workspace, also the
  // workspace as that unit's source names it ("../workspace", NamedFrom).
  std::string ToLocalText(absl::string_view text, const std::string& directory = "") const;

 private:
  std::string root_;
  std::string canonical_;
  std::vector<InputRoot> input_roots_;
};

// The files of a unit's input closure that lie outside its workspace, by
// the folder that reaches them: an include folder or a file the unit names
// by an absolute path outside the workspace. Such files are part of the
// unit's key by path and content, wherever the workspace is.
using OutsideFiles = std::map<std::string, int>;

// Adds `from` to `into`, keeping the most files per folder: what the units
// of a build read there at most.
void MergeOutsideFiles(const OutsideFiles& from, OutsideFiles& into);

// The layout of a unit whose workspace is `workspace`, whose closure
// (absolute, without the toolkit's and the system's files) is `closure`,
// and whose flags name `anchors` (absolute include folders and
// pre-included files). A file outside the workspace that no anchor holds
// is one the sources reach with "../" from inside: nvcc would look for it
// beside the canonical root, so the workspace widens to the folder above
// it (the result is then keyed by where those folders sit relative to each
// other, still not by where they are). Then each input root (FindInputRoot)
// of an anchor or a file outside the workspace is added, in the order the
// anchors and then the files name them, a second of one canonical place
// numbered ("site-packages-2"); but not one inside the workspace, and not
// one below an anchor outside it (`-I VENV/lib` reaches the root's files
// by their place under VENV/lib, which must stay as it is). The unit's
// `build_folder` (OutOfTreeBuildFolder; "" for none) is the first input
// root, at kCanonicalBuildFolder, unless the workspace widened over it. With
// `absolute_paths`, AsIs and no input root, the workspace widened over the
// build folder (as nvcc sees it here). `outside` (may be null)
// receives the files left at their own paths. INVALID_ARGUMENT for a file
// left at its own path under kCanonicalArea on this machine: it would be
// hidden on the workers.
absl::StatusOr<WorkspaceLayout> LayoutFor(const std::string& workspace,
                                          const std::vector<std::string>& closure,
                                          const std::vector<std::string>& anchors,
                                          bool absolute_paths, OutsideFiles* outside = nullptr,
                                          const std::string& build_folder = "");

// The input roots of a build's units (by their local folder), for the
// summary.
using InputRoots = std::map<std::string, InputRoot>;
void MergeInputRoots(const WorkspaceLayout& layout, InputRoots& into);

// "FOLDER (N files)" for the `limit` folders of most files, then how many
// more: what a summary says is keyed by its absolute path.
std::string DescribeOutsideFiles(const OutsideFiles& outside, int limit = 3);

// Local caches keyed by a workspace's relative layout (the scan cache): in
// `text` (a path, a flag, a make rule), each mention of the folder
// `workspace` as a whole path (at the text's start or after a space, '=',
// ',', ':' or a quote, or after a "-X" option letter; followed by '/', a
// space, ',', ':', a quote or the end) becomes kWorkspaceMark. WorkspaceMarked
// undoes it for another folder. A make rule (`spelling` kMakeRule) names
// the folder as make escapes it (a space as "\ ", '#' as "\#", '$' as
// "$$"), and is given the other folder's name so escaped. Both leave the
// text as it is for "", "/" and a folder whose name holds a tab, a newline,
// a backslash or a quote: such a workspace's entries are keyed by where it
// is.
// `mark` names another folder so keyed (an input root's).
inline constexpr char kWorkspaceMark[] = "\x01workspace\x01";
enum class WorkspaceSpelling { kPath, kMakeRule };
std::string MarkWorkspace(absl::string_view text, const std::string& workspace,
                          WorkspaceSpelling spelling = WorkspaceSpelling::kPath,
                          absl::string_view mark = kWorkspaceMark);
std::string WorkspaceMarked(absl::string_view text, const std::string& workspace,
                            WorkspaceSpelling spelling = WorkspaceSpelling::kPath,
                            absl::string_view mark = kWorkspaceMark);

// The summary's lines (after "  ", without the last newline) that say
// where a build's units were (`units` by workspace), how the workers saw
// it, each input root in a line of its own, and what of their inputs is
// keyed by its own path: a rebuild from another folder or venv can tell
// why a unit missed.
std::string DescribeWorkspaces(const std::map<std::string, int>& units, const InputRoots& roots,
                               const OutsideFiles& outside, bool absolute_paths);

}  // namespace distcc_cuda::client
