// SPDX-License-Identifier: Apache-2.0
#include "common/process/task_tree.h"

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/store/cas_store.h"
#include "common/store/digest.h"

namespace distcc_cuda {
namespace {

// Lays out an input that carries its bytes (a generated source, inlined by
// the coordinator) as a stored one would be: read-only, at the same time.
absl::Status PlaceContent(const v1::InputFile& input, const std::string& destination) {
  const Digest digest = FromProto(input.digest());
  if (DigestOf(input.content()) != digest) {
    return absl::InvalidArgumentError(
        absl::StrCat("its bytes do not hash to its digest ", digest.ToString()));
  }
  std::filesystem::path target(destination);
  RETURN_IF_ERROR(MakeDirectories(target.parent_path().string()));
  std::error_code error;
  std::filesystem::remove(target, error);
  RETURN_IF_ERROR(WriteNewFile(destination, input.content(), 0444));
  return FinishMaterialized(destination, input.is_executable());
}

}  // namespace

absl::StatusOr<TaskTree> TaskTree::Prepare(const v1::CompileUnit& unit, const std::string& task_dir,
                                           const Sandbox* sandbox, const PlaceInput& place) {
  TaskTree task;
  task.workspace_root_ = unit.workspace_root();
  task.unit_working_directory_ = unit.working_directory();
  task.output_paths_.assign(unit.output_paths().begin(), unit.output_paths().end());
  task.tree_ = task_dir + "/tree";
  task.temp_ = task_dir + "/tmp";
  RETURN_IF_ERROR(MakeDirectories(task.tree_));
  RETURN_IF_ERROR(MakeDirectories(task.temp_));
  if (sandbox != nullptr) {
    RETURN_IF_ERROR(sandbox->GrantReach(task_dir));
    RETURN_IF_ERROR(sandbox->GrantWrite(task.temp_));
  }
  for (const v1::InputFile& input : unit.inputs()) {
    const std::string destination = task.tree_ + "/" + input.path();
    RETURN_IF_ERROR(
        Annotate(input.has_content() ? PlaceContent(input, destination) : place(input, destination),
                 absl::StrCat("cannot fetch input ", input.path())));
  }
  task.cwd_ =
      unit.working_directory().empty() ? task.tree_ : task.tree_ + "/" + unit.working_directory();
  // The only folders the compile may write: where its outputs go.
  std::vector<std::string> writable = {task.cwd_};
  for (const std::string& output : unit.output_paths()) {
    writable.push_back(std::filesystem::path(task.cwd_ + "/" + output).parent_path().string());
  }
  for (const std::string& folder : writable) {
    RETURN_IF_ERROR(MakeDirectories(folder));
    if (sandbox != nullptr) RETURN_IF_ERROR(sandbox->GrantWrite(folder));
  }
  return task;
}

SandboxTask TaskTree::ForSandbox() const {
  std::string root = workspace_root_.empty() ? std::string(kUnitRoot) : workspace_root_;
  std::string inside = unit_working_directory_.empty()
                           ? root
                           : (std::filesystem::path(root) / unit_working_directory_).string();
  return SandboxTask{tree_, root, temp_, inside};
}

absl::Status TaskTree::CollectOutput(int index, const std::string& destination) const {
  if (index < 0 || static_cast<size_t>(index) >= output_paths_.size()) {
    return absl::OutOfRangeError(absl::StrCat("the unit has no output ", index));
  }
  const std::string& output = output_paths_[index];
  std::string relative = std::filesystem::path(unit_working_directory_.empty()
                                                   ? output
                                                   : unit_working_directory_ + "/" + output)
                             .lexically_normal()
                             .string();
  return CopyFileBeneath(tree_, relative, destination);
}

}  // namespace distcc_cuda
