// SPDX-License-Identifier: Apache-2.0
#include "client/plan/build_plan.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "client/plan/compile_commands.h"
#include "client/plan/kernel_manifest.h"
#include "client/plan/unit_request.h"
#include "client/plan/workspace_layout.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/forwarded_flags.h"
#include "common/nvcc/gpu_targets.h"
#include "common/nvcc/nvcc_args.h"

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
  return plan;
}

}  // namespace

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
