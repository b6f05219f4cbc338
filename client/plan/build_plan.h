// SPDX-License-Identifier: Apache-2.0
// A build as its plan file describes it on this machine (a kernel manifest
// or a compile_commands.json): units and instantiation sets with absolute
// folders, before their inputs are scanned and their paths made relative
// to a workspace root.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/plan/build_options.h"
#include "client/plan/link_step.h"
#include "common/process/subprocess.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::client {

// A unit before its paths are made relative to the workspace root.
struct LocalUnit {
  std::string name;
  std::string directory;             // absolute; nvcc runs here
  std::vector<std::string> flags;    // without -c, -o, sources, dependency flags
  std::string source;                // as given (relative to directory, or absolute)
  std::string local_object;          // where the object lands on this machine
  std::vector<std::string> closure;  // absolute input paths
  std::string compiler;              // a compile_commands.json entry's nvcc, as it names it
  std::string build_folder;          // the out-of-tree build folder `directory` lies in, or ""
};

// An instantiation set before its paths are made relative.
struct LocalSet {
  v1::InstantiationSet set;
  std::string directory;
  std::vector<std::string> flags;
  std::vector<std::string> closure;
};

// What `distcc-cuda build PLAN` builds and how it links it.
struct LocalPlan {
  // The folder of this machine the build belongs to, which the workers see
  // at the canonical root (client/plan/workspace_layout.h): a manifest's own
  // folder; the project folder above a compile_commands.json's entries.
  std::string workspace;
  std::vector<LocalUnit> units;
  std::vector<LocalSet> sets;
  std::string object_dir;
  std::string library_path;
  LinkRecipe link;
};

// The plan of options.plan_path: a .toml kernel manifest (objects in
// OUT/obj, its [link] table) or a compile_commands.json (each entry one
// unit; --objects-dir, --link-command, --library). INVALID_ARGUMENT or
// NOT_FOUND naming the file for a bad plan.
absl::StatusOr<LocalPlan> LoadLocalPlan(const BuildOptions& options, bool is_compdb);

// A compile is what its command asked: every compile_commands.json entry's
// own nvcc (LocalUnit::compiler, a bare name found through $PATH) is the
// build's (`nvcc_path`, of `toolchain`), the same file or one that says the
// same release and build. INVALID_ARGUMENT naming both and --nvcc for
// another; FAILED_PRECONDITION for one that names no release. An nvcc this
// machine lacks (a database made elsewhere) is said on `out`, once.
absl::Status CheckEntriesCompiler(const LocalPlan& plan, const std::string& nvcc_path,
                                  const v1::ToolchainFingerprint& toolchain, std::ostream& out,
                                  const ProcessRunner& run = RunProcess);

// CheckBeforeScan for every unit and instantiation set of the plan: nothing
// runs here, not even a scan, with arguments a worker would refuse.
absl::Status CheckPlanBeforeScan(const LocalPlan& plan);

// Where a compile_commands.json plan's objects go, said before any is
// written: each command's own -o unless `objects_dir`, and how many of
// those files exist (they are replaced as their units finish).
std::string DescribeObjectPlacement(const LocalPlan& plan, const std::string& objects_dir);

}  // namespace distcc_cuda::client
