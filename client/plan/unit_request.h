// SPDX-License-Identifier: Apache-2.0
// From a compile as it runs here (a folder, nvcc flags, a source, the input
// closure the scan found) to a CompileUnit of the protocol: its workspace
// at the canonical root, other files at their own paths, all relative to
// "/" (client/plan/workspace_layout.h). Shared by `distcc-cuda build PLAN` and
// the launcher.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/plan/workspace_layout.h"
#include "common/nvcc/nvcc_args.h"
#include "common/store/cas_client.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::client {

// The argument model's check of a unit's flags before anything runs here:
// every option is one the workers accept, with a value of the right form,
// and no file it names (source, include folder, pre-include) is in the
// host's private folders. nvcc -M would otherwise read them, and the scan
// would ship them. INVALID_ARGUMENT naming `name` and the argument.
absl::Status CheckBeforeScan(const std::string& name, const std::string& directory,
                             const std::vector<std::string>& flags, const std::string& source,
                             v1::UnitCompiler compiler = v1::UNIT_COMPILER_NVCC);

// INVALID_ARGUMENT when a file of `closure` (or what a link in it points
// at) lies in a private folder of this machine: such files never leave it.
absl::Status CheckClosure(const std::string& name, const std::vector<std::string>& closure);

// The include folders a unit names outside the toolkit and the system
// (`excluded`), absolute.
std::vector<std::string> IncludeFolders(const std::string& directory,
                                        const std::vector<std::string>& flags,
                                        const std::vector<std::string>& excluded,
                                        v1::UnitCompiler compiler = v1::UNIT_COMPILER_NVCC);

// Every file and folder a unit's flags name outside `excluded` (include
// folders and pre-included files), absolute: what the unit reaches by
// those names, not by "../" from its sources (LayoutFor's anchors).
std::vector<std::string> NamedInputPaths(const std::string& directory,
                                         const std::vector<std::string>& flags,
                                         const std::vector<std::string>& excluded,
                                         v1::UnitCompiler compiler = v1::UNIT_COMPILER_NVCC);

// Places `unit`, run in `directory` (absolute) here, in `layout`: its
// workspace root "/" and its working directory where the layout puts
// `directory`.
void PlaceUnit(v1::CompileUnit& unit, const WorkspaceLayout& layout, const std::string& directory);

// The deepest folder above every path ("/" when they share none).
std::string CommonAncestor(const std::vector<std::string>& paths);

// `path` relative to `base`, "." for the same folder.
std::string Relative(const std::string& path, const std::string& base);

// How a unit run in `directory` names its source `path` (both absolute,
// each in the layout's workspace or one of its roots) on a worker:
// relative to where `directory` is there (a worker takes no other), so
// "../workspace/src/k.cu" from an out-of-tree build folder.
std::string NamedFrom(const std::string& path, const std::string& directory,
                      const WorkspaceLayout& layout);

// The build's own CUDA toolkit as flags may name it: its roots
// (ToolkitRoots: as named and on disk, each ending in '/') and those of them
// whose folders a relocated unit names at kCanonicalToolkitRoot: not a
// folder of the whole system (nvcc in /usr/bin), nor a Python environment's
// prefix (conda's nvcc), whose include folder holds more than the
// toolkit's headers. Found once per build, not per unit.
struct ToolkitPlaces {
  std::vector<std::string> roots;
  std::vector<std::string> relocatable;
};
ToolkitPlaces PlacesOfToolkit(std::vector<std::string> roots);
// Adds the toolkit's first relocatable root, as named, to `roots` (the
// summary's lines) at kCanonicalToolkitRoot; nothing if none relocates.
void MergeToolkitRoot(const ToolkitPlaces& toolkit, InputRoots& roots);

// Rewrites the include paths of `flags` for a worker: paths inside the
// layout's workspace relative to `directory` where it lies in the
// workspace (else at their canonical place), so
// that they reach the same files wherever the workspace is mounted, those
// in one of its input roots at the root's canonical place, others
// absolute as they are. Include
// folders of this machine's own toolkit (`toolkit`, its ToolkitRoots) are
// dropped from nvcc's flags: nvcc searches its own toolkit's folders
// anyway, and the worker's toolkit lies elsewhere. A host compiler's flags
// (and nvcc's -include) name them at kCanonicalToolkitRoot, which the
// worker places in the unit's toolkit: /usr/local/cuda, /usr/local/cuda-13.0
// and ~/cuda are one toolkit's compile. As is (--absolute-paths), only
// nvcc's at a non-standard place are dropped and the rest kept. So
// is a header folder outside the workspace that is missing or empty (the
// include folder of every venv, which setuptools adds) when the layout is
// relocated: it changes no lookup, and kept it would key the results by
// the venv's path.
// `flags` are `compiler`'s.
absl::StatusOr<std::vector<std::string>> RelativeFlags(
    const std::vector<std::string>& flags, const std::string& directory,
    const WorkspaceLayout& layout, const ToolkitPlaces& toolkit,
    v1::UnitCompiler compiler = v1::UNIT_COMPILER_NVCC);

// The distinct input files of a build in one workspace layout, each hashed
// once.
struct WorkspaceFiles {
  std::map<std::string, v1::InputFile> by_path;  // absolute path -> input
  std::vector<BlobSource> blobs;
  // The Directory blobs of the units' input trees, each once.
  std::vector<BlobSource> folders;
  std::set<Digest> folders_seen;
  // The root of each distinct list of shared inputs (their paths and
  // digests, in order): units of one kernel family include the same
  // headers, and their tree is made once.
  std::unordered_map<std::string, v1::Digest> roots;
  // The same by the closure a scan found (AddUnitInputs): the paths of its
  // files but the unit's source, length-prefixed. Within one
  // WorkspaceFiles a path has one digest, so equal paths make equal trees.
  std::unordered_map<std::string, v1::Digest> roots_by_closure;
  // What the units' checks found acceptable (tree files' paths, include
  // folders), for one list of system prefixes.
  CheckedUnitParts checked;
  // The BuildPlan blob of a build too large for one message (PackLargeBuild).
  std::vector<BlobSource> plan;
  // Where set, the digest of a file already known to be current (the scan
  // cache vouched for it: ScanCache::KnownDigest); InputFor hashes the
  // others.
  std::function<std::optional<Digest>(const std::string& path)> known_digest;

  // Everything to upload: the files, the folders that name them, the plan.
  std::vector<BlobSource> AllBlobs() const;
};

// Uploads what the coordinator lacks of `files`, in the order AllBlobs
// gives; returns how many input files (not folders or plan) were uploaded.
absl::StatusOr<int> UploadWorkspace(CasClient& cas, const WorkspaceFiles& files);

// A part of a build larger than kInlineBuildBytes sends its units and sets
// as a BuildPlan blob (added to `files.plan`) and names it, so no count of
// units meets the limit on one message (kMaxMessageBytes). Returns whether
// it did.
inline constexpr int64_t kInlineBuildBytes = 1 << 20;
bool PackLargeBuild(v1::AddUnitsRequest& request, WorkspaceFiles& files);

// Sends `inputs` as the tree they make (common/store/input_tree.h): sets `root`,
// adds the tree's folders to `files` and leaves in `inputs` only the file
// at `own_path` (the unit's source; "": none). A header every unit includes
// is then described once per build, not once per unit, and units that
// include the same headers share one root: their own sources, which no
// other unit reads, stay beside it instead of making a tree each.
// `check_new_tree`, when given, is called with the files of a tree not
// made before in `files`, before it is made; its error is returned.
using CheckInputs =
    std::function<absl::Status(const google::protobuf::RepeatedPtrField<v1::InputFile>& files)>;
absl::Status MoveIntoInputTree(google::protobuf::RepeatedPtrField<v1::InputFile>& inputs,
                               v1::Digest& root, WorkspaceFiles& files,
                               const std::string& own_path = "",
                               const CheckInputs& check_new_tree = nullptr);

// What the coordinator and the workers will check of `unit`, checked here
// first so that a refusal names the unit before anything is uploaded, and
// its inputs moved into a tree (MoveIntoInputTree, `own_path` beside it):
// the files of each distinct tree are checked once per build
// (ValidateInputPath; the headers a kernel family's units share are not
// checked again for every unit), then the unit with its own files
// (ValidateCompileUnit). INVALID_ARGUMENT naming the unit. A unit whose
// output is one of its tree's files is refused by the coordinator, which
// looks the output up in the tree.
absl::Status CheckAndMoveIntoInputTree(v1::CompileUnit& unit, WorkspaceFiles& files,
                                       const std::string& own_path,
                                       const std::vector<std::string>& system_prefixes);

// Gives `unit` (placed in `layout`: PlaceUnit) its inputs from the closure
// its scan found (absolute paths; repeats ignored): the file at absolute
// `source` listed beside the tree of all the others, and checks it as
// CheckAndMoveIntoInputTree does. Each file is hashed once per build
// (InputFor). A closure seen before in `files` reuses its tree without
// making its list again: the units of a kernel family include the same
// headers, so a 55,000-unit CUTLASS build makes 200 lists, not 55,000.
absl::Status AddUnitInputs(v1::CompileUnit& unit, const std::vector<std::string>& closure,
                           const std::string& source, const WorkspaceLayout& layout,
                           WorkspaceFiles& files, const std::vector<std::string>& system_prefixes);

// The input for the file at absolute `path`, at its place in `layout`
// (relative to "/"); hashed (unless `files.known_digest` knows it) and
// added to `files` the first time. `files` holds one layout's inputs.
absl::StatusOr<v1::InputFile> InputFor(const std::string& path, const WorkspaceLayout& layout,
                                       WorkspaceFiles& files);

}  // namespace distcc_cuda::client
