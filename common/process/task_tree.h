// SPDX-License-Identifier: Apache-2.0
// One compile unit's folder on the machine that compiles it: the unit's
// inputs laid out as the client's workspace (tree/), a temporary folder
// (tmp/) and the folders its outputs go to, writable by the sandbox user and
// nobody else. Workers compile units in it; `distcc-cuda build --verify`
// rebuilds units in one the same way, so both see the same files, the same
// paths and the same modification times.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/process/sandbox.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda {

// Where a unit that names no workspace root is compiled: inside the sandbox,
// and (through a mount namespace) on workers without one. Under /run, which
// only root may write: no other user can put a link there first.
inline constexpr char kUnitRoot[] = "/run/distcc-cuda-unit";

// Places one input's bytes at `destination` (its parents exist or are made
// by the callee), modified at kMaterializedMtime, read-only.
using PlaceInput =
    std::function<absl::Status(const v1::InputFile& input, const std::string& destination)>;

class TaskTree {
 public:
  // Lays out `unit` in `task_dir` (an existing, empty folder): every input
  // through `place` (one that carries its bytes, once they are found to hash
  // to its digest, from those), the temporary folder, the working directory and the
  // outputs' folders. With a `sandbox`, the sandbox user may reach the task
  // folder and write only the temporary and output folders.
  static absl::StatusOr<TaskTree> Prepare(const v1::CompileUnit& unit, const std::string& task_dir,
                                          const Sandbox* sandbox, const PlaceInput& place);

  const std::string& tree() const { return tree_; }
  const std::string& temp() const { return temp_; }
  // Where nvcc starts, in the tree on this machine's disk.
  const std::string& working_directory() const { return cwd_; }
  // The sandbox's view: the tree at the unit's workspace root (kUnitRoot for
  // a unit that names none), nvcc starting in its working directory.
  SandboxTask ForSandbox() const;

  // Copies output `index` of the unit from the tree to `destination`,
  // following no link (the compile may have rearranged its own tree).
  absl::Status CollectOutput(int index, const std::string& destination) const;

 private:
  TaskTree() = default;

  std::string workspace_root_;
  std::string unit_working_directory_;
  std::vector<std::string> output_paths_;
  std::string tree_;
  std::string temp_;
  std::string cwd_;
};

}  // namespace distcc_cuda
