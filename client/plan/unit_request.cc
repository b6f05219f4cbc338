// SPDX-License-Identifier: Apache-2.0
#include "client/plan/unit_request.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <system_error>
#include <unordered_set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/canonical_paths.h"
#include "common/nvcc/forwarded_flags.h"
#include "common/nvcc/nvcc_args.h"
#include "common/store/digest.h"
#include "common/store/input_tree.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;

namespace {

// The paths a flag's value names: nvcc's lists split at commas, the host
// compiler's value whole.
std::vector<std::string> PathsOf(const NvccArgument& flag, v1::UnitCompiler compiler) {
  if (compiler == v1::UNIT_COMPILER_HOST_CXX) return {flag.value};
  return SplitNvccList(flag.value);
}

}  // namespace

absl::Status CheckBeforeScan(const std::string& name, const std::string& directory,
                             const std::vector<std::string>& flags, const std::string& source,
                             v1::UnitCompiler compiler) {
  std::vector<std::string> arguments = flags;
  arguments.insert(arguments.end(), {"-c", source, "-o", "distcc-cuda-scan.o"});
  absl::StatusOr<NvccCommand> command = ParseCompileArguments(compiler, arguments);
  if (!command.ok()) return Annotate(command.status(), absl::StrCat("unit ", name));
  std::vector<std::string> paths = {source};
  for (const NvccArgument& flag : command->flags) {
    if (flag.kind != NvccValueKind::kInputPath) continue;
    for (const std::string& path : PathsOf(flag, compiler)) paths.push_back(path);
  }
  for (const std::string& path : paths) {
    std::string absolute = AbsolutePath(path, directory);
    if (IsHostPrivatePath(absolute)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unit ", name, ": ", path, " (", absolute,
          ") is in a private folder of this machine; distcc-cuda never reads or sends files "
          "under /etc, /proc, /sys, /dev, /boot, /run, /var/log or credential folders"));
    }
  }
  return absl::OkStatus();
}

namespace {

// The absolute paths of `flags`' input-path values outside `excluded`;
// with `folders_only`, no pre-included file.
std::vector<std::string> FlagPaths(const std::string& directory,
                                   const std::vector<std::string>& flags,
                                   const std::vector<std::string>& excluded,
                                   v1::UnitCompiler compiler, bool folders_only) {
  std::vector<std::string> paths;
  absl::StatusOr<NvccCommand> command = ParseCompileArguments(compiler, flags);
  if (!command.ok()) return paths;  // refused earlier, with the reason
  for (const NvccArgument& flag : command->flags) {
    if (flag.kind != NvccValueKind::kInputPath) continue;
    if (folders_only && (flag.option == "-include" || flag.option == "--pre-include" ||
                         flag.option == "-imacros")) {
      continue;
    }
    for (const std::string& path : PathsOf(flag, compiler)) {
      std::string absolute = AbsolutePath(path, directory);
      bool system = std::any_of(excluded.begin(), excluded.end(), [&](const std::string& prefix) {
        return absl::StartsWith(absolute + "/", prefix);
      });
      if (!system) paths.push_back(absolute);
    }
  }
  return paths;
}

}  // namespace

std::vector<std::string> IncludeFolders(const std::string& directory,
                                        const std::vector<std::string>& flags,
                                        const std::vector<std::string>& excluded,
                                        v1::UnitCompiler compiler) {
  return FlagPaths(directory, flags, excluded, compiler, /*folders_only=*/true);
}

std::vector<std::string> NamedInputPaths(const std::string& directory,
                                         const std::vector<std::string>& flags,
                                         const std::vector<std::string>& excluded,
                                         v1::UnitCompiler compiler) {
  return FlagPaths(directory, flags, excluded, compiler, /*folders_only=*/false);
}

void PlaceUnit(v1::CompileUnit& unit, const WorkspaceLayout& layout, const std::string& directory) {
  unit.set_workspace_root("/");
  unit.set_working_directory(layout.InTree(directory));
}

std::string CommonAncestor(const std::vector<std::string>& paths) {
  fs::path common;
  bool first = true;
  for (const std::string& path : paths) {
    fs::path p(path);
    if (first) {
      common = p;
      first = false;
      continue;
    }
    fs::path joined;
    auto a = common.begin();
    auto b = p.begin();
    for (; a != common.end() && b != p.end() && *a == *b; ++a, ++b) joined /= *a;
    common = joined;
  }
  std::string out = common.string();
  return out.empty() ? "/" : out;
}

std::string NamedFrom(const std::string& path, const std::string& directory,
                      const WorkspaceLayout& layout) {
  return Relative(layout.OnWorker(path), layout.OnWorker(directory));
}

std::string Relative(const std::string& path, const std::string& base) {
  std::string relative = fs::path(path).lexically_relative(base).string();
  return relative.empty() ? "." : relative;
}

namespace {

// Whether `folder` holds nothing a header lookup could find: it is missing,
// or holds only folders (a venv's include/python3.X, made empty), at most
// 64 of them. A folder that cannot be read is not vacant, nor one with a
// link.
bool Vacant(const std::string& folder) {
  std::error_code error;
  fs::recursive_directory_iterator entries(folder, error);
  if (error) {
    return error == std::errc::no_such_file_or_directory || error == std::errc::not_a_directory;
  }
  int folders = 0;
  for (; entries != fs::recursive_directory_iterator(); entries.increment(error)) {
    if (error || ++folders > 64) return false;
    const fs::file_status status = entries->symlink_status(error);
    if (error || !fs::is_directory(status)) return false;
  }
  return !error;
}

// `path` at the canonical toolkit root when it lies in one of `roots`.
std::optional<std::string> OnCanonicalToolkit(const std::string& path,
                                              const std::vector<std::string>& roots) {
  for (const std::string& root : roots) {
    if (path + "/" == root) return std::string(kCanonicalToolkitRoot);
    if (absl::StartsWith(path, root)) {
      return absl::StrCat(kCanonicalToolkitRoot, "/", path.substr(root.size()));
    }
  }
  return std::nullopt;
}

}  // namespace

ToolkitPlaces PlacesOfToolkit(std::vector<std::string> roots) {
  ToolkitPlaces places;
  for (const std::string& root : roots) {
    if (root == "/" || root == "/usr/" || root == "/usr/local/" || root == "/opt/") continue;
    std::error_code error;
    if (fs::exists(root + "conda-meta", error) || fs::exists(root + "pyvenv.cfg", error)) continue;
    places.relocatable.push_back(root);
  }
  places.roots = std::move(roots);
  return places;
}

void MergeToolkitRoot(const ToolkitPlaces& toolkit, InputRoots& roots) {
  if (toolkit.relocatable.empty()) return;
  std::string local = toolkit.relocatable.front();
  if (local.size() > 1 && local.back() == '/') local.pop_back();
  roots.try_emplace(local, InputRoot{local, kCanonicalToolkitRoot, "CUDA toolkit"});
}

absl::StatusOr<std::vector<std::string>> RelativeFlags(const std::vector<std::string>& flags,
                                                       const std::string& directory,
                                                       const WorkspaceLayout& layout,
                                                       const ToolkitPlaces& toolkit,
                                                       v1::UnitCompiler compiler) {
  ASSIGN_OR_RETURN(NvccCommand parsed, ParseCompileArguments(compiler, flags));
  const bool host = compiler == v1::UNIT_COMPILER_HOST_CXX;
  const std::vector<std::string> system = SystemIncludePrefixes();
  auto under = [](const std::string& path, const std::vector<std::string>& prefixes) {
    return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& prefix) {
      return absl::StartsWith(path + "/", prefix);
    });
  };
  // Relocated, the toolkit's folders go by its canonical root whatever its
  // place; as is (--absolute-paths), those at a standard place keep theirs.
  static const std::vector<std::string> kNone;
  const std::vector<std::string>& roots = layout.relocated() ? toolkit.relocatable : kNone;
  std::vector<NvccArgument> kept;
  for (NvccArgument& flag : parsed.flags) {
    if (flag.kind == NvccValueKind::kInputPath) {
      // nvcc searches its own toolkit's folders anyway; g++ does not.
      const bool header_folder =
          flag.option != "-include" && flag.option != "--pre-include" && flag.option != "-imacros";
      const bool search_folder = !host && header_folder;
      std::vector<std::string> pieces;
      for (const std::string& path : PathsOf(flag, compiler)) {
        std::string absolute = AbsolutePath(path, directory);
        const bool in_toolkit =
            under(absolute, roots) || (under(absolute, toolkit.roots) && !under(absolute, system));
        if (search_folder && in_toolkit) continue;
        const bool system_path = under(absolute, system);
        const bool inside = layout.Contains(absolute) && !system_path;
        // Run outside the workspace (an out-of-tree build folder), a unit
        // names the workspace's folders at their canonical place, which
        // its messages' paths are then named back from.
        const bool relative = inside && layout.Contains(directory);
        // A venv's empty include folder changes no lookup; dropped, it
        // keys nothing by the venv's path.
        if (header_folder && layout.relocated() && !inside && Vacant(absolute)) continue;
        const std::optional<std::string> canonical = OnCanonicalToolkit(absolute, roots);
        std::string piece = relative                                 ? Relative(absolute, directory)
                            : canonical                              ? *canonical
                            : !system_path && layout.Moves(absolute) ? layout.OnWorker(absolute)
                                                                     : absolute;
        pieces.push_back(host ? piece : absl::StrReplaceAll(piece, {{",", "\\,"}}));
      }
      if (pieces.empty()) continue;
      flag.value = absl::StrJoin(pieces, ",");
    }
    kept.push_back(std::move(flag));
  }
  parsed.flags = std::move(kept);
  return parsed.FlagArguments();
}

absl::StatusOr<v1::InputFile> InputFor(const std::string& path, const WorkspaceLayout& layout,
                                       WorkspaceFiles& files) {
  std::string in_tree = layout.InTree(path);
  auto it = files.by_path.find(path);
  // A unit of other input roots may place the same file elsewhere.
  if (it != files.by_path.end() && it->second.path() == in_tree) return it->second;
  std::optional<Digest> known;
  if (it != files.by_path.end()) known = FromProto(it->second.digest());
  if (!known && files.known_digest) known = files.known_digest(path);
  if (!known) {
    ASSIGN_OR_RETURN(known, DigestOfFile(path));
  }
  const Digest& digest = *known;
  v1::InputFile input;
  input.set_path(std::move(in_tree));
  *input.mutable_digest() = ToProto(digest);
  input.set_is_executable(IsExecutableFile(path));
  if (it == files.by_path.end()) files.blobs.push_back(BlobSource{digest, path, ""});
  files.by_path[path] = input;
  return input;
}

std::vector<BlobSource> WorkspaceFiles::AllBlobs() const {
  std::vector<BlobSource> all = blobs;
  all.insert(all.end(), folders.begin(), folders.end());
  all.insert(all.end(), plan.begin(), plan.end());
  return all;
}

bool PackLargeBuild(v1::AddUnitsRequest& request, WorkspaceFiles& files) {
  if (static_cast<int64_t>(request.ByteSizeLong()) <= kInlineBuildBytes) return false;
  v1::BuildPlan plan;
  plan.mutable_units()->Swap(request.mutable_units());
  plan.mutable_instantiation_sets()->Swap(request.mutable_instantiation_sets());
  std::string bytes = plan.SerializeAsString();
  Digest digest = DigestOf(bytes);
  *request.mutable_plan() = ToProto(digest);
  files.plan.push_back(BlobSource{digest, "", std::move(bytes)});
  return true;
}

absl::StatusOr<int> UploadWorkspace(CasClient& cas, const WorkspaceFiles& files) {
  ASSIGN_OR_RETURN(int uploaded, cas.UploadMissing(files.blobs));
  // The folders after the files they name, the plan after the folders.
  RETURN_IF_ERROR(cas.UploadMissing(files.folders).status());
  RETURN_IF_ERROR(cas.UploadMissing(files.plan).status());
  return uploaded;
}

absl::Status MoveIntoInputTree(google::protobuf::RepeatedPtrField<v1::InputFile>& inputs,
                               v1::Digest& root, WorkspaceFiles& files, const std::string& own_path,
                               const CheckInputs& check_new_tree) {
  google::protobuf::RepeatedPtrField<v1::InputFile> own;
  google::protobuf::RepeatedPtrField<v1::InputFile> shared;
  for (v1::InputFile& input : inputs) {
    *(input.path() == own_path ? own.Add() : shared.Add()) = std::move(input);
  }
  std::string key;
  for (const v1::InputFile& input : shared) {
    // Length-prefixed: no two lists make the same key.
    absl::StrAppend(&key, input.path().size(), ":", input.path(), input.digest().hash().size(), ":",
                    input.digest().hash(), input.digest().size_bytes(),
                    input.is_executable() ? "x" : "-");
  }
  auto known = files.roots.find(key);
  if (known != files.roots.end()) {
    root = known->second;
  } else {
    if (check_new_tree) RETURN_IF_ERROR(check_new_tree(shared));
    ASSIGN_OR_RETURN(InputTree tree, BuildInputTree(shared));
    for (auto& [digest, bytes] : tree.directories) {
      if (files.folders_seen.insert(digest).second) {
        files.folders.push_back(BlobSource{digest, "", std::move(bytes)});
      }
    }
    root = ToProto(tree.root);
    files.roots.emplace(std::move(key), root);
  }
  inputs.Swap(&own);
  return absl::OkStatus();
}

namespace {

// The check of a new tree's files for `unit` (CheckInputs): each path once
// per build.
CheckInputs CheckTreeFiles(const v1::CompileUnit& unit, WorkspaceFiles& files,
                           const std::vector<std::string>& system_prefixes) {
  return [&unit, &files, &system_prefixes](
             const google::protobuf::RepeatedPtrField<v1::InputFile>& shared) -> absl::Status {
    std::unordered_set<std::string>& known = files.checked.input_paths[unit.workspace_root()];
    for (const v1::InputFile& input : shared) {
      if (known.count(input.path()) != 0) continue;
      RETURN_IF_ERROR(
          Annotate(ValidateInputPath(unit.workspace_root(), input.path(), system_prefixes),
                   absl::StrCat("unit ", unit.name())));
      known.insert(input.path());
    }
    return absl::OkStatus();
  };
}

}  // namespace

absl::Status CheckAndMoveIntoInputTree(v1::CompileUnit& unit, WorkspaceFiles& files,
                                       const std::string& own_path,
                                       const std::vector<std::string>& system_prefixes) {
  RETURN_IF_ERROR(MoveIntoInputTree(*unit.mutable_inputs(), *unit.mutable_input_root(), files,
                                    own_path, CheckTreeFiles(unit, files, system_prefixes)));
  return ValidateCompileUnit(unit, system_prefixes, &files.checked);
}

absl::Status AddUnitInputs(v1::CompileUnit& unit, const std::vector<std::string>& closure,
                           const std::string& source, const WorkspaceLayout& layout,
                           WorkspaceFiles& files, const std::vector<std::string>& system_prefixes) {
  // Each path after its length in 4 bytes: no two closures make one key;
  // the layout's roots first, for they place the paths.
  std::string key = layout.Key();
  key.push_back('\0');
  size_t key_size = key.size();
  for (const std::string& path : closure) key_size += 4 + path.size();
  key.reserve(key_size);
  for (const std::string& path : closure) {
    if (path == source) continue;
    const uint32_t length = static_cast<uint32_t>(path.size());
    key.append(reinterpret_cast<const char*>(&length), sizeof(length));
    key.append(path);
  }
  ASSIGN_OR_RETURN(v1::InputFile own, InputFor(source, layout, files));
  unit.clear_inputs();
  if (auto known = files.roots_by_closure.find(key); known != files.roots_by_closure.end()) {
    *unit.mutable_input_root() = known->second;
  } else {
    std::set<std::string> seen;
    for (const std::string& path : closure) {
      if (!seen.insert(path).second) continue;
      ASSIGN_OR_RETURN(*unit.add_inputs(), InputFor(path, layout, files));
    }
    // The source spelled otherwise in the closure is still the unit's own.
    RETURN_IF_ERROR(MoveIntoInputTree(*unit.mutable_inputs(), *unit.mutable_input_root(), files,
                                      own.path(), CheckTreeFiles(unit, files, system_prefixes)));
    unit.clear_inputs();
    files.roots_by_closure.emplace(std::move(key), unit.input_root());
  }
  *unit.add_inputs() = std::move(own);
  return ValidateCompileUnit(unit, system_prefixes, &files.checked);
}

namespace {

// fs::canonical(file), "" where it fails, with each folder resolved once
// in `real_folders`: a CUTLASS unit's 1,163 headers lie in a few hundred
// folders, each a dozen names deep.
std::string RealPathOf(const std::string& file,
                       absl::flat_hash_map<std::string, std::string>& real_folders) {
  const fs::path path(file);
  const std::string name = path.filename().string();
  struct stat info;
  std::error_code error;
  if (name.empty() || name == "." || name == ".." || lstat(file.c_str(), &info) != 0 ||
      S_ISLNK(info.st_mode)) {
    std::string real = fs::canonical(path, error).string();
    return error ? "" : real;
  }
  const std::string parent = path.parent_path().string();
  auto [it, added] = real_folders.try_emplace(parent);
  if (added) {
    std::string real = fs::canonical(parent, error).string();
    it->second = error ? "" : real;
  }
  if (it->second.empty()) return "";
  return it->second.back() == '/' ? it->second + name : absl::StrCat(it->second, "/", name);
}

}  // namespace

absl::Status CheckClosure(const std::string& name, const std::vector<std::string>& closure) {
  absl::flat_hash_map<std::string, std::string> real_folders;
  for (const std::string& file : closure) {
    // Through a symlink too: what is read is the link's target.
    std::string real = RealPathOf(file, real_folders);
    for (const std::string& path : {file, real.empty() ? file : real}) {
      if (!IsHostPrivatePath(path)) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          name, " reads ", file, path == file ? "" : absl::StrCat(" (a link to ", path, ")"),
          ", a file in a private folder of this machine; distcc-cuda does not send such files "
          "to the cluster. Remove the #include or the option that pulls it in"));
    }
  }
  return absl::OkStatus();
}

}  // namespace distcc_cuda::client
