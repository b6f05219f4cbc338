// SPDX-License-Identifier: Apache-2.0
#include "client/plan/workspace_layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::client {
namespace {

using ::testing::HasSubstr;

// One folder tree of marker files per case, under a fresh folder.
class FindProjectRootTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = AbsolutePath(testing::NewTempDir("project-root-")); }
  void Make(const std::string& relative) {
    ASSERT_TRUE(WriteFileAtomically(root_ + "/" + relative, "").ok());
  }
  std::string At(const std::string& relative) { return root_ + "/" + relative; }
  std::string root_;
};

TEST_F(FindProjectRootTest, TheNearestSetupPyPyprojectOrGitWins) {
  Make("repo/.git/HEAD");
  Make("repo/python/pkg/pyproject.toml");
  Make("repo/python/pkg/csrc/k.cu");
  Make("sdist/setup.py");
  Make("sdist/build/temp.linux-x86_64-cpython-311/.ninja_log");
  EXPECT_EQ(FindProjectRoot(At("repo/python/pkg/csrc")), At("repo/python/pkg"));
  EXPECT_EQ(FindProjectRoot(At("repo/python")), At("repo"));
  EXPECT_EQ(FindProjectRoot(At("sdist/build/temp.linux-x86_64-cpython-311")), At("sdist"));
}

TEST_F(FindProjectRootTest, AGitWorktreeIsAProjectOfItsOwn) {
  Make("main/.git/HEAD");
  Make("main/src/k.cu");
  // A worktree's .git is a file naming the main checkout's folder.
  ASSERT_TRUE(
      WriteFileAtomically(At("feature/.git"), "gitdir: ../main/.git/worktrees/feature\n").ok());
  Make("feature/src/k.cu");
  EXPECT_EQ(FindProjectRoot(At("main/src")), At("main"));
  EXPECT_EQ(FindProjectRoot(At("feature/src")), At("feature"));
}

TEST_F(FindProjectRootTest, CMakeSubdirectoriesBelongToTheOutermostCMakeFolder) {
  Make("proj/CMakeLists.txt");
  Make("proj/src/CMakeLists.txt");
  Make("proj/src/kernels/CMakeLists.txt");
  Make("proj/src/kernels/k.cu");
  Make("proj/build/src/kernels/CMakeFiles/x.dir/flags.make");
  EXPECT_EQ(FindProjectRoot(At("proj/src/kernels")), At("proj"));
  // CMake compiles in the build folder's mirror of the subdirectory.
  EXPECT_EQ(FindProjectRoot(At("proj/build/src/kernels")), At("proj"));
}

TEST_F(FindProjectRootTest, NoMarkerMeansTheFolderItself) {
  Make("loose/deeper/k.cu");
  EXPECT_EQ(FindProjectRoot(At("loose/deeper")), At("loose/deeper"));
}

TEST_F(FindProjectRootTest, TheSessionFolderBoundsTheSearchFromInsideIt) {
  Make(".git/HEAD");  // the user's home as a dotfiles repository
  Make("work/run/k.cu");
  Make("tmp/pip-req-build-x/setup.py");
  Make("tmp/pip-req-build-x/build/temp/.keep");
  // Inside the session's folder: the search stops there.
  EXPECT_EQ(FindProjectRoot(At("work/run"), At("work")), At("work"));
  // Outside it (pip's temporary folder): bounded by nothing but markers.
  EXPECT_EQ(FindProjectRoot(At("tmp/pip-req-build-x/build/temp"), At("work")),
            At("tmp/pip-req-build-x"));
  // Unbounded, the home's .git is the project.
  EXPECT_EQ(FindProjectRoot(At("work/run")), root_);
}

TEST_F(FindProjectRootTest, AnOutOfTreeBuildFolderAndItsSourcesAreOneWorkspace) {
  Make("proj/CMakeLists.txt");
  Make("proj/src/k.cu");
  Make("build-proj/CMakeCache.txt");
  EXPECT_EQ(CompileWorkspace(At("build-proj/src"), At("proj/src/k.cu")), root_);
  EXPECT_EQ(CompileWorkspace(At("proj/build"), At("proj/src/k.cu")), At("proj"));
}

TEST(WorkspaceLayoutTest, TheWorkspaceMovesToTheCanonicalRootAndNothingElseMoves) {
  const WorkspaceLayout layout = WorkspaceLayout::Relocated("/home/ada/flash-attention");
  EXPECT_TRUE(layout.relocated());
  EXPECT_EQ(layout.OnWorker("/home/ada/flash-attention"), "/distcc-cuda/workspace");
  EXPECT_EQ(layout.OnWorker("/home/ada/flash-attention/csrc/flash.cu"),
            "/distcc-cuda/workspace/csrc/flash.cu");
  EXPECT_EQ(layout.InTree("/home/ada/flash-attention/csrc/flash.cu"),
            "distcc-cuda/workspace/csrc/flash.cu");
  // A sibling whose name starts alike is not inside.
  EXPECT_EQ(layout.OnWorker("/home/ada/flash-attention-old/x.h"),
            "/home/ada/flash-attention-old/x.h");
  EXPECT_EQ(layout.InTree("/venv/lib/torch/include/ATen/ATen.h"),
            "venv/lib/torch/include/ATen/ATen.h");
  EXPECT_EQ(layout.ToLocalText("/distcc-cuda/workspace/csrc/flash.cu(12): error: x\n"),
            "/home/ada/flash-attention/csrc/flash.cu(12): error: x\n");
}

TEST(WorkspaceLayoutTest, AsIsKeepsEveryPath) {
  const WorkspaceLayout layout = WorkspaceLayout::AsIs("/home/ada/proj");
  EXPECT_FALSE(layout.relocated());
  EXPECT_EQ(layout.OnWorker("/home/ada/proj/k.cu"), "/home/ada/proj/k.cu");
  EXPECT_EQ(layout.InTree("/home/ada/proj/k.cu"), "home/ada/proj/k.cu");
  EXPECT_EQ(layout.ToLocalText("/distcc-cuda/workspace/k.cu"), "/distcc-cuda/workspace/k.cu");
}

TEST(WorkspaceLayoutTest, AWholeFileSystemWorkspaceStillRelocates) {
  const WorkspaceLayout layout = WorkspaceLayout::Relocated("/");
  EXPECT_EQ(layout.OnWorker("/tmp/k.cu"), "/distcc-cuda/workspace/tmp/k.cu");
  EXPECT_EQ(layout.ToLocalText("/distcc-cuda/workspace/tmp/k.cu: error"), "/tmp/k.cu: error");
}

TEST(LayoutForTest, FilesNamedByAbsoluteFlagsStayAtTheirOwnPaths) {
  OutsideFiles outside;
  absl::StatusOr<WorkspaceLayout> layout =
      LayoutFor("/tmp/pip-req-build-abc",
                {"/tmp/pip-req-build-abc/csrc/k.cu", "/tmp/pip-req-build-abc/csrc/k.h",
                 "/venv/torch/include/ATen/ATen.h", "/venv/torch/include/c10/core/Device.h",
                 "/py/include/python3.11/Python.h", "/opt/pre.h"},
                {"/tmp/pip-req-build-abc/csrc", "/venv/torch/include", "/py/include/python3.11",
                 "/opt/pre.h"},
                /*absolute_paths=*/false, &outside);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->root(), "/tmp/pip-req-build-abc");
  EXPECT_EQ(layout->canonical(), "/distcc-cuda/workspace");
  EXPECT_THAT(outside, ::testing::UnorderedElementsAre(::testing::Pair("/venv/torch/include", 2),
                                                       ::testing::Pair("/py/include/python3.11", 1),
                                                       ::testing::Pair("/opt/pre.h", 1)));
  EXPECT_EQ(DescribeOutsideFiles(outside, 2),
            "/venv/torch/include (2 files), /opt/pre.h (1 file) and 1 more");
}

TEST(LayoutForTest, AFileReachedByDotDotFromInsideWidensTheWorkspace) {
  // #include "../common/util.h" from proj/kernels/k.cu: on a worker it is
  // looked for beside the canonical root, so it must move with the
  // workspace.
  absl::StatusOr<WorkspaceLayout> layout =
      LayoutFor("/src/team/proj/kernels",
                {"/src/team/proj/kernels/k.cu", "/src/team/proj/common/util.h",
                 "/venv/torch/include/torch.h"},
                {"/venv/torch/include"}, false);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->root(), "/src/team/proj");
  EXPECT_EQ(layout->InTree("/src/team/proj/common/util.h"), "distcc-cuda/workspace/common/util.h");
  EXPECT_EQ(layout->InTree("/venv/torch/include/torch.h"), "venv/torch/include/torch.h");
}

TEST(LayoutForTest, WithAbsolutePathsNothingMoves) {
  absl::StatusOr<WorkspaceLayout> layout =
      LayoutFor("/home/ada/proj", {"/home/ada/proj/k.cu"}, {}, /*absolute_paths=*/true);
  ASSERT_TRUE(layout.ok());
  EXPECT_FALSE(layout->relocated());
  EXPECT_EQ(layout->InTree("/home/ada/proj/k.cu"), "home/ada/proj/k.cu");
}

TEST(LayoutForTest, AFileOfThisMachineUnderTheCanonicalRootIsRefused) {
  absl::StatusOr<WorkspaceLayout> layout =
      LayoutFor("/home/ada/proj", {"/home/ada/proj/k.cu", "/distcc-cuda/workspace/other.h"},
                {"/distcc-cuda/workspace"}, false);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(layout.status().message()),
              HasSubstr("/distcc-cuda/workspace/other.h lies under /distcc-cuda/workspace"));
  EXPECT_THAT(std::string(layout.status().message()), HasSubstr("--absolute-paths"));
  // The workspace itself may lie there: it moves onto itself.
  EXPECT_TRUE(
      LayoutFor("/distcc-cuda/workspace/proj", {"/distcc-cuda/workspace/proj/k.cu"}, {}, false)
          .ok());
}

TEST(DescribeWorkspacesTest, SaysWhereTheWorkersSawItAndWhatIsKeyedByItsPath) {
  EXPECT_EQ(DescribeWorkspaces({{"/tmp/a", 3}}, {}, false),
            "workspace /tmp/a (/distcc-cuda/workspace on the workers: its results serve the same "
            "tree in any folder)");
  EXPECT_EQ(
      DescribeWorkspaces({{"/tmp/a", 1}, {"/tmp/b", 4}}, {{"/venv/torch/include", 900}}, true),
      "workspace /tmp/b and 1 more (--absolute-paths: at its own path on the workers; "
      "results are keyed by it)\n"
      "            outside it, keyed by their own paths: /venv/torch/include (900 files)");
}

}  // namespace
}  // namespace distcc_cuda::client
