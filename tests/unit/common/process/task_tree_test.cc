// SPDX-License-Identifier: Apache-2.0
#include "common/process/task_tree.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/base/files.h"
#include "common/base/status.h"
#include "common/store/cas_store.h"
#include "common/store/digest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::InputFile Input(const std::string& path, const std::string& bytes, bool carried) {
  v1::InputFile input;
  input.set_path(path);
  *input.mutable_digest() = ToProto(DigestOf(bytes));
  if (carried) input.set_content(bytes);
  return input;
}

// A generated source travels in its unit: it is laid out from its own
// bytes, as a stored input would be (read-only, at kMaterializedMtime), and
// `place` is asked only for the inputs that are stored.
TEST(TaskTreeTest, AnInputThatCarriesItsBytesIsLaidOutFromThemLikeAStoredOne) {
  const std::string task_dir = testing::NewTempDir("task-tree-");
  v1::CompileUnit unit;
  unit.set_working_directory("kernels");
  *unit.add_inputs() = Input("kernels/k.cuh", "template <int N> void K() {}\n", false);
  *unit.add_inputs() = Input("kernels/k_1.cu", "#include \"k.cuh\"\ntemplate void K<1>();\n", true);
  unit.add_output_paths("k_1.o");
  std::vector<std::string> placed;
  absl::StatusOr<TaskTree> tree = TaskTree::Prepare(
      unit, task_dir, nullptr, [&](const v1::InputFile& input, const std::string& destination) {
        placed.push_back(input.path());
        RETURN_IF_ERROR(MakeDirectories(std::filesystem::path(destination).parent_path().string()));
        RETURN_IF_ERROR(WriteNewFile(destination, "template <int N> void K() {}\n", 0444));
        return FinishMaterialized(destination, false);
      });
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_THAT(placed, ElementsAre("kernels/k.cuh"));
  const std::string source = tree->tree() + "/kernels/k_1.cu";
  EXPECT_EQ(*ReadFile(source), "#include \"k.cuh\"\ntemplate void K<1>();\n");
  struct stat info;
  ASSERT_EQ(stat(source.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0444u);
  EXPECT_EQ(info.st_mtime, kMaterializedMtime);
}

// Bytes that do not hash to the input's digest are never laid out.
TEST(TaskTreeTest, CarriedBytesThatDoNotMatchTheirDigestAreRefused) {
  const std::string task_dir = testing::NewTempDir("task-tree-");
  v1::CompileUnit unit;
  v1::InputFile* input = unit.add_inputs();
  *input = Input("k_1.cu", "template void K<1>();\n", true);
  input->set_content("template void K<666>();\n");
  unit.add_output_paths("k_1.o");
  absl::StatusOr<TaskTree> tree =
      TaskTree::Prepare(unit, task_dir, nullptr, [](const v1::InputFile&, const std::string&) {
        return absl::InternalError("nothing is stored");
      });
  EXPECT_TRUE(absl::IsInvalidArgument(tree.status())) << tree.status();
  EXPECT_THAT(tree.status().message(), HasSubstr("cannot fetch input k_1.cu"));
  EXPECT_THAT(tree.status().message(), HasSubstr("do not hash to its digest"));
  EXPECT_FALSE(std::filesystem::exists(task_dir + "/tree/k_1.cu"));
}

}  // namespace
}  // namespace distcc_cuda
