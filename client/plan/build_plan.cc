// SPDX-License-Identifier: Apache-2.0
#include "client/plan/build_plan.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <ostream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/plan/compile_commands.h"
#include "client/plan/kernel_manifest.h"
#include "client/plan/unit_request.h"
#include "client/plan/workspace_layout.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/forwarded_flags.h"
#include "common/nvcc/gpu_targets.h"
#include "common/nvcc/nvcc_args.h"
#include "common/nvcc/toolchain.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

absl::StatusOr<LocalPlan> PlanFromManifest(const BuildOptions& options) {
  ASSIGN_OR_RETURN(KernelManifest manifest, LoadKernelManifest(options.plan_path));
  LocalPlan plan;
  plan.workspace = AbsolutePath(manifest.directory);
  plan.object_dir = options.output_dir + "/obj";
  plan.library_path = options.output_dir + "/" + manifest.output;
  plan.link = manifest.link;
  ASSIGN_OR_RETURN(std::vector<std::string> gencode, GencodeFlags(manifest.archs));
  std::vector<std::string> flags = manifest.flags;
  flags.insert(flags.end(), gencode.begin(), gencode.end());
  // Objects of a shared library must be position independent.
  flags.push_back("-Xcompiler=-fPIC");
  absl::StatusOr<NvccCommand> checked = ParseNvccCommand(flags);
  if (!checked.ok()) return Annotate(checked.status(), manifest.path + ": [build] flags");
  if (!checked->sources.empty() || !checked->output.empty() || checked->compile_only) {
    return absl::InvalidArgumentError(
        absl::StrCat(manifest.path, ": [build] flags must not name sources, -c or -o"));
  }
  for (const std::string& source : manifest.sources) {
    LocalUnit unit;
    unit.name = fs::path(source).stem().string();
    unit.directory = manifest.directory;
    unit.flags = flags;
    unit.source = source;
    unit.local_object = plan.object_dir + "/" + unit.name + ".o";
    plan.units.push_back(std::move(unit));
  }
  for (v1::InstantiationSet& set : manifest.instantiation_sets) {
    plan.sets.push_back(LocalSet{std::move(set), manifest.directory, flags, {}});
  }
  return plan;
}

absl::StatusOr<LocalPlan> PlanFromCompileCommands(const BuildOptions& options) {
  ASSIGN_OR_RETURN(std::vector<CompileCommand> commands, LoadCompileCommands(options.plan_path));
  LocalPlan plan;
  plan.object_dir = options.output_dir + "/obj";
  plan.library_path = options.output_dir + "/" + options.library_name;
  if (options.link_command.empty()) {
    // CMake's link of a CUDA shared library.
    plan.link.soname = options.library_name;
  } else {
    ASSIGN_OR_RETURN(plan.link, ParseLinkCommand(options.link_command));
  }
  std::set<std::string> names;
  std::map<std::string, int> next_number;
  // The entries' workspaces, once per pair of folders: a CUTLASS database
  // of 55,000 entries has a few hundred.
  std::map<std::pair<std::string, std::string>, std::string> workspaces;
  std::vector<std::string> roots;
  for (const CompileCommand& command : commands) {
    ASSIGN_OR_RETURN(NvccCommand parsed,
                     ParseNvccCommand({command.arguments.begin() + 1, command.arguments.end()}));
    LocalUnit unit;
    // k.cu, k.cu.2, k.cu.3...: each name remembers its next number, so
    // 10,000 entries of one file are named in one pass, not 10,000.
    const std::string base = fs::path(command.file).filename().string();
    unit.name = base;
    if (!names.insert(base).second) {
      int& n = next_number.try_emplace(base, 2).first->second;
      do {
        unit.name = absl::StrCat(base, ".", n++);
      } while (!names.insert(unit.name).second);
    }
    unit.directory = command.directory;
    unit.compiler = command.arguments[0];
    unit.flags = parsed.FlagArguments();
    unit.source = parsed.sources[0];
    const std::string source = AbsolutePath(unit.source, unit.directory);
    auto [workspace, added] =
        workspaces.try_emplace({unit.directory, fs::path(source).parent_path().string()});
    if (added) {
      workspace->second = CompileWorkspace(unit.directory, source);
      roots.push_back(workspace->second);
    }
    unit.local_object = options.objects_dir.empty()
                            ? command.output
                            : AbsolutePath(options.objects_dir) + "/" + unit.name + ".o";
    plan.units.push_back(std::move(unit));
  }
  plan.workspace = roots.empty() ? AbsolutePath(fs::path(options.plan_path).parent_path().string())
                                 : CommonAncestor(roots);
  std::map<std::string, std::string> build_folders;  // by directory: one look per folder
  for (LocalUnit& unit : plan.units) {
    auto [folder, added] = build_folders.try_emplace(unit.directory);
    if (added) folder->second = OutOfTreeBuildFolder(unit.directory, plan.workspace);
    unit.build_folder = folder->second;
  }
  return plan;
}

// The program `named` (relative to `directory`) stands for here: a path
// as it is, a bare name through $PATH; "" when there is none.
std::string ProgramHere(const std::string& named, const std::string& directory) {
  if (named.find('/') != std::string::npos) {
    const std::string path = AbsolutePath(named, directory);
    return IsExecutableFile(path) ? path : "";
  }
  const char* search = std::getenv("PATH");
  for (absl::string_view folder : absl::StrSplit(search ? search : "", ':', absl::SkipEmpty())) {
    const std::string path = absl::StrCat(folder, "/", named);
    if (IsExecutableFile(path)) return path;
  }
  return "";
}

bool SameFile(const std::string& a, const std::string& b) {
  std::error_code error;
  return fs::equivalent(a, b, error) && !error;
}

}  // namespace

absl::Status CheckEntriesCompiler(const LocalPlan& plan, const std::string& nvcc_path,
                                  const v1::ToolchainFingerprint& toolchain, std::ostream& out,
                                  const ProcessRunner& run) {
  struct Entries {
    const LocalUnit* first = nullptr;
    int count = 0;
  };
  std::map<std::string, Entries> by_compiler;  // a CUTLASS database names one
  for (const LocalUnit& unit : plan.units) {
    if (unit.compiler.empty()) continue;
    Entries& entries = by_compiler[unit.compiler];
    if (entries.first == nullptr) entries.first = &unit;
    ++entries.count;
  }
  const std::string ours = absl::StrCat(nvcc_path, ", nvcc ", toolchain.nvcc_release(), " (",
                                        toolchain.nvcc_build(), ")");
  for (const auto& [compiler, entries] : by_compiler) {
    const std::string which =
        absl::StrCat(entries.count, entries.count == 1 ? " entry" : " entries", " (",
                     entries.first->name, entries.count == 1 ? "" : ", ...", ")");
    const std::string here = ProgramHere(compiler, entries.first->directory);
    if (here.empty()) {
      out << "distcc-cuda: note: compile_commands.json names " << compiler << " for " << which
          << ", which this machine lacks; they compile with " << ours << "\n";
      continue;
    }
    if (SameFile(here, nvcc_path)) continue;
    absl::StatusOr<NvccRelease> theirs = AskNvccRelease(here, run);
    if (!theirs.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "compile_commands.json: ", which, " are compiled with ", compiler, ": ",
          theirs.status().message(), "; build with --nvcc PATH, the nvcc they are for"));
    }
    if (theirs->release == toolchain.nvcc_release() && theirs->build == toolchain.nvcc_build()) {
      continue;  // a copy of the same nvcc
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "compile_commands.json: ", which, " are compiled with ", here, ", nvcc ", theirs->release,
        " (", theirs->build, "), but this build's nvcc is ", ours,
        "; an entry is never compiled with another nvcc than its command names: build with "
        "--nvcc ",
        here, ", or make compile_commands.json again with ", nvcc_path));
  }
  return absl::OkStatus();
}

absl::StatusOr<LocalPlan> LoadLocalPlan(const BuildOptions& options, bool is_compdb) {
  return is_compdb ? PlanFromCompileCommands(options) : PlanFromManifest(options);
}

absl::Status CheckPlanBeforeScan(const LocalPlan& plan) {
  for (const LocalUnit& unit : plan.units) {
    RETURN_IF_ERROR(CheckBeforeScan(unit.name, unit.directory, unit.flags, unit.source));
  }
  for (const LocalSet& set : plan.sets) {
    for (const std::string& header : set.set.headers()) {
      RETURN_IF_ERROR(CheckBeforeScan(set.set.name(), set.directory, set.flags, header));
    }
  }
  return absl::OkStatus();
}

std::string DescribeObjectPlacement(const LocalPlan& plan, const std::string& objects_dir) {
  std::vector<std::string> folders;
  int existing = 0;
  for (const LocalUnit& unit : plan.units) {
    std::string object = AbsolutePath(unit.local_object, unit.directory);
    folders.push_back(fs::path(object).parent_path().string());
    existing += IsRegularFile(object);
  }
  std::sort(folders.begin(), folders.end());
  folders.erase(std::unique(folders.begin(), folders.end()), folders.end());
  std::string where = folders.size() == 1 ? folders[0]
                                          : absl::StrCat(folders.size(), " folders under ",
                                                         CommonAncestor(folders));
  if (!objects_dir.empty()) {
    return absl::StrCat(
        "distcc-cuda: objects go to ", where, " (--objects-dir)",
        existing > 0 ? absl::StrCat("; ", existing, " there already are replaced") : "", "\n");
  }
  return absl::StrCat(
      "distcc-cuda: objects go to each command's own -o, as the build that wrote this file "
      "would put them (",
      where, ")",
      existing > 0
          ? absl::StrCat("; the ", existing, " there already are replaced as their units finish")
          : "",
      "; --objects-dir DIR puts them elsewhere\n");
}

}  // namespace distcc_cuda::client
