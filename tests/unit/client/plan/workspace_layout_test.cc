// SPDX-License-Identifier: Apache-2.0
#include "client/plan/workspace_layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <tuple>
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

// `cmake -B` elsewhere: the sources' project is the workspace, and the
// build folder (its CMakeCache.txt's, from any folder CMake compiles in
// below it) a root of its own; a build folder inside the project is the
// project's, as is one that holds the sources.
TEST_F(FindProjectRootTest, AnOutOfTreeBuildFolderIsARootBesideTheSourcesProject) {
  Make("proj/CMakeLists.txt");
  Make("proj/src/k.cu");
  Make("build-proj/CMakeCache.txt");
  Make("build-proj/src/CMakeFiles/k.dir/flags.make");
  Make("proj/build/CMakeCache.txt");
  Make("loose/run/x.o");
  EXPECT_EQ(CompileWorkspace(At("build-proj/src"), At("proj/src/k.cu")), At("proj"));
  EXPECT_EQ(OutOfTreeBuildFolder(At("build-proj/src"), At("proj")), At("build-proj"));
  EXPECT_EQ(OutOfTreeBuildFolder(At("build-proj"), At("proj")), At("build-proj"));
  EXPECT_EQ(CompileWorkspace(At("proj/build"), At("proj/src/k.cu")), At("proj"));
  EXPECT_EQ(OutOfTreeBuildFolder(At("proj/build"), At("proj")), "");
  // No CMake: the compile's folder's own project.
  EXPECT_EQ(CompileWorkspace(At("loose/run"), At("proj/src/k.cu")), At("proj"));
  EXPECT_EQ(OutOfTreeBuildFolder(At("loose/run"), At("proj")), At("loose/run"));
  // Sources inside the build folder's project: one workspace, as before.
  Make("gen/.git/HEAD");
  Make("gen/out/CMakeCache.txt");
  EXPECT_EQ(CompileWorkspace(At("gen/out"), At("gen/src/k.cu")), At("gen"));
  EXPECT_EQ(OutOfTreeBuildFolder(At("gen/out"), At("gen")), "");
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
                 "/py/include/python3.11/Python.h", "/opt/pre.h", "/opt/more/pre2.h"},
                {"/tmp/pip-req-build-abc/csrc", "/venv/torch/include", "/py/include/python3.11",
                 "/opt/pre.h", "/opt/more"},
                /*absolute_paths=*/false, &outside);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->root(), "/tmp/pip-req-build-abc");
  EXPECT_EQ(layout->canonical(), "/distcc-cuda/workspace");
  // Python's headers are an input root; the rest is nobody's in particular.
  EXPECT_EQ(layout->InTree("/py/include/python3.11/Python.h"),
            "distcc-cuda/include/python3.11/Python.h");
  EXPECT_THAT(outside, ::testing::UnorderedElementsAre(::testing::Pair("/venv/torch/include", 2),
                                                       ::testing::Pair("/opt/more", 1),
                                                       ::testing::Pair("/opt/pre.h", 1)));
  EXPECT_EQ(DescribeOutsideFiles(outside, 2),
            "/venv/torch/include (2 files), /opt/more (1 file) and 1 more");
}

TEST(FindInputRootTest, PythonEnvironmentsAndPythonsHeadersWhereverTheyAre) {
  struct Case {
    const char* path;
    const char* root;       // "" for none
    const char* canonical;  // where it appears
  };
  for (const Case& c : std::vector<Case>{
           {"/home/ada/.venv/lib/python3.11/site-packages/torch/include/ATen/ATen.h",
            "/home/ada/.venv/lib/python3.11/site-packages", "/distcc-cuda/site-packages"},
           {"/opt/envs/x/lib/python3.12/site-packages/torch/include",
            "/opt/envs/x/lib/python3.12/site-packages", "/distcc-cuda/site-packages"},
           {"/home/bob/miniforge3/envs/fa/lib/python3.11/site-packages/pybind11/include/p.h",
            "/home/bob/miniforge3/envs/fa/lib/python3.11/site-packages",
            "/distcc-cuda/site-packages"},
           // A package vendoring an environment: the innermost one holds it.
           {"/v/lib/site-packages/pkg/site-packages/x.h", "/v/lib/site-packages/pkg/site-packages",
            "/distcc-cuda/site-packages"},
           {"/home/eve/.local/lib/python3.11/dist-packages/cutlass/include/cutlass.h",
            "/home/eve/.local/lib/python3.11/dist-packages", "/distcc-cuda/site-packages"},
           {"/root/.pyenv/versions/3.11.7/include/python3.11/Python.h",
            "/root/.pyenv/versions/3.11.7/include/python3.11", "/distcc-cuda/include/python3.11"},
           {"/home/bob/miniforge3/envs/fa/include/python3.13t",
            "/home/bob/miniforge3/envs/fa/include/python3.13t", "/distcc-cuda/include/python3.13t"},
           {"/venv/include/site/python3.11/pybind11/pybind11.h", "/venv/include/site/python3.11",
            "/distcc-cuda/include/site/python3.11"},
           // The system's own are the workers' own.
           {"/usr/include/python3.11/Python.h", "", ""},
           {"/usr/lib/python3/dist-packages/numpy/core/include/x.h", "", ""},
           // Names that only look alike.
           {"/opt/python3.11/include/x.h", "", ""},
           {"/src/include/python-helpers/x.h", "", ""},
           {"/src/include/pythonX/x.h", "", ""},
           {"/src/my-site-packages/x.h", "", ""},
           {"relative/site-packages/x.h", "", ""},
       }) {
    std::optional<InputRoot> root = FindInputRoot(c.path);
    if (*c.root == '\0') {
      EXPECT_FALSE(root.has_value()) << c.path << " -> " << root->local;
      continue;
    }
    ASSERT_TRUE(root.has_value()) << c.path;
    EXPECT_EQ(root->local, c.root) << c.path;
    EXPECT_EQ(root->canonical, c.canonical) << c.path;
  }
}

// torch's extension flags as cpp_extension writes them for one user.
std::vector<std::string> TorchAnchors(const std::string& venv, const std::string& python) {
  const std::string torch = venv + "/lib/python3.11/site-packages/torch/include";
  return {torch, torch + "/torch/csrc/api/include", python + "/include/python3.11"};
}

std::vector<std::string> TorchClosure(const std::string& workspace, const std::string& venv,
                                      const std::string& python) {
  const std::string torch = venv + "/lib/python3.11/site-packages/torch/include";
  return {workspace + "/csrc/k.cu", torch + "/ATen/ATen.h", torch + "/torch/csrc/api/include/t.h",
          python + "/include/python3.11/Python.h"};
}

TEST(LayoutForTest, TwoUsersVenvsAndPythonsAppearAtOnePlace) {
  std::vector<std::vector<std::string>> trees;
  for (const auto& [workspace, venv, python] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"/tmp/pip-a", "/home/ada/.venv", "/root/.pyenv/versions/3.11.7"},
           {"/work/b/proj", "/opt/envs/x", "/opt/envs/x"},
           {"/tmp/c", "/home/cy/miniforge3/envs/fa", "/home/cy/miniforge3/envs/fa"}}) {
    OutsideFiles outside;
    absl::StatusOr<WorkspaceLayout> layout =
        LayoutFor(workspace, TorchClosure(workspace, venv, python), TorchAnchors(venv, python),
                  false, &outside);
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_THAT(outside, ::testing::IsEmpty()) << workspace;
    ASSERT_EQ(layout->input_roots().size(), 2u) << layout->Key();
    EXPECT_EQ(layout->input_roots()[0].kind, "Python packages");
    EXPECT_EQ(layout->input_roots()[1].kind, "Python headers");
    std::vector<std::string> tree;
    for (const std::string& path : TorchClosure(workspace, venv, python)) {
      tree.push_back(layout->InTree(path));
    }
    for (const std::string& anchor : TorchAnchors(venv, python)) {
      tree.push_back(layout->OnWorker(anchor));
    }
    trees.push_back(tree);
    EXPECT_EQ(layout->ToLocalText("/distcc-cuda/site-packages/torch/include/ATen/ATen.h:3: "
                                  "error in /distcc-cuda/include/python3.11/Python.h"),
              absl::StrCat(venv,
                           "/lib/python3.11/site-packages/torch/include/ATen/ATen.h:3: "
                           "error in ",
                           python, "/include/python3.11/Python.h"));
  }
  EXPECT_EQ(trees[1], trees[0]);
  EXPECT_EQ(trees[2], trees[0]);
  EXPECT_THAT(
      trees[0],
      ::testing::ElementsAre(
          "distcc-cuda/workspace/csrc/k.cu", "distcc-cuda/site-packages/torch/include/ATen/ATen.h",
          "distcc-cuda/site-packages/torch/include/torch/csrc/api/include/t.h",
          "distcc-cuda/include/python3.11/Python.h", "/distcc-cuda/site-packages/torch/include",
          "/distcc-cuda/site-packages/torch/include/torch/csrc/api/include",
          "/distcc-cuda/include/python3.11"));
}

// Two users' out-of-tree build folders (generated headers in them) beside
// their checkouts: one tree on the workers, the build folder first of the
// roots; as is, the workspace widens over both as before.
TEST(LayoutForTest, AnOutOfTreeBuildFolderAppearsAtItsCanonicalRoot) {
  std::vector<std::vector<std::string>> trees;
  for (const auto& [workspace, build] : std::vector<std::pair<std::string, std::string>>{
           {"/home/ada/src/proj", "/tmp/build-ada"}, {"/w/bob/proj", "/scratch/b/out/x"}}) {
    const std::vector<std::string> closure = {workspace + "/src/k.cu", workspace + "/include/k.h",
                                              build + "/gen/config.h"};
    OutsideFiles outside;
    absl::StatusOr<WorkspaceLayout> layout = LayoutFor(
        workspace, closure, {workspace + "/include", build + "/gen"}, false, &outside, build);
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(layout->root(), workspace);
    EXPECT_THAT(outside, ::testing::IsEmpty());
    ASSERT_EQ(layout->input_roots().size(), 1u) << layout->Key();
    EXPECT_EQ(layout->input_roots()[0].kind, "build folder");
    std::vector<std::string> tree = {layout->InTree(build)};
    for (const std::string& path : closure) tree.push_back(layout->InTree(path));
    trees.push_back(tree);
    EXPECT_EQ(layout->ToLocalText("/distcc-cuda/build/gen/config.h:1: error"),
              build + "/gen/config.h:1: error");
    // The source, as named from the build folder's place on the workers.
    EXPECT_EQ(layout->ToLocalText("../../workspace/src/k.cu(3): error\n", build + "/sub"),
              workspace + "/src/k.cu(3): error\n");
    EXPECT_EQ(layout->ToLocalText("x/../workspace/src/k.cu", build), "x/../workspace/src/k.cu");
    absl::StatusOr<WorkspaceLayout> as_is = LayoutFor(
        workspace, closure, {workspace + "/include", build + "/gen"}, true, nullptr, build);
    ASSERT_TRUE(as_is.ok()) << as_is.status();
    EXPECT_TRUE(as_is->Contains(build) && as_is->Contains(workspace)) << as_is->root();
    EXPECT_THAT(as_is->input_roots(), ::testing::IsEmpty());
  }
  EXPECT_EQ(trees[1], trees[0]);
  EXPECT_THAT(trees[0], ::testing::ElementsAre(
                            "distcc-cuda/build", "distcc-cuda/workspace/src/k.cu",
                            "distcc-cuda/workspace/include/k.h", "distcc-cuda/build/gen/config.h"));
}

TEST(LayoutForTest, ARootBelowAnotherAnchorOutsideStaysWhereItIs) {
  // -I VENV/lib reaches python3.11/site-packages/x.h by that path: the
  // root cannot move apart from it.
  OutsideFiles outside;
  absl::StatusOr<WorkspaceLayout> layout =
      LayoutFor("/w", {"/w/k.cu", "/v/lib/python3.11/site-packages/x.h"},
                {"/v/lib", "/v/lib/python3.11/site-packages"}, false, &outside);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(layout->input_roots(), ::testing::IsEmpty());
  EXPECT_EQ(layout->InTree("/v/lib/python3.11/site-packages/x.h"),
            "v/lib/python3.11/site-packages/x.h");
  EXPECT_EQ(outside.size(), 1u);
}

TEST(LayoutForTest, ASecondEnvironmentIsNumberedAndTextsNameEachRightly) {
  absl::StatusOr<WorkspaceLayout> layout = LayoutFor(
      "/w",
      {"/w/k.cu", "/v/lib/python3.11/site-packages/a.h",
       "/home/u/.local/lib/python3.11/site-packages/b.h"},
      {"/v/lib/python3.11/site-packages", "/home/u/.local/lib/python3.11/site-packages"}, false);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->InTree("/v/lib/python3.11/site-packages/a.h"), "distcc-cuda/site-packages/a.h");
  EXPECT_EQ(layout->InTree("/home/u/.local/lib/python3.11/site-packages/b.h"),
            "distcc-cuda/site-packages-2/b.h");
  EXPECT_EQ(
      layout->ToLocalText("/distcc-cuda/site-packages-2/b.h and /distcc-cuda/site-packages/a.h"),
      "/home/u/.local/lib/python3.11/site-packages/b.h and "
      "/v/lib/python3.11/site-packages/a.h");
  EXPECT_NE(layout->Key(), WorkspaceLayout::Relocated("/w").Key());
}

TEST(LayoutForTest, AWorkspaceInsideAnEnvironmentIsTheWorkspaceOnly) {
  absl::StatusOr<WorkspaceLayout> layout = LayoutFor(
      "/v/lib/python3.11/site-packages/pkg",
      {"/v/lib/python3.11/site-packages/pkg/k.cu", "/v/lib/python3.11/site-packages/t/x.h"},
      {"/v/lib/python3.11/site-packages/t"}, false);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(layout->input_roots(), ::testing::IsEmpty());
  EXPECT_EQ(layout->InTree("/v/lib/python3.11/site-packages/t/x.h"),
            "v/lib/python3.11/site-packages/t/x.h");
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
      LayoutFor("/home/ada/proj", {"/home/ada/proj/k.cu", "/v/lib/python3.11/site-packages/x.h"},
                {"/v/lib/python3.11/site-packages"}, /*absolute_paths=*/true);
  ASSERT_TRUE(layout.ok());
  EXPECT_FALSE(layout->relocated());
  EXPECT_THAT(layout->input_roots(), ::testing::IsEmpty());
  EXPECT_EQ(layout->InTree("/home/ada/proj/k.cu"), "home/ada/proj/k.cu");
  EXPECT_EQ(layout->InTree("/v/lib/python3.11/site-packages/x.h"),
            "v/lib/python3.11/site-packages/x.h");
}

TEST(LayoutForTest, AFileOfThisMachineUnderTheCanonicalRootIsRefused) {
  for (const char* hidden : {"/distcc-cuda/workspace/other.h", "/distcc-cuda/include/x.h"}) {
    absl::StatusOr<WorkspaceLayout> layout =
        LayoutFor("/home/ada/proj", {"/home/ada/proj/k.cu", hidden},
                  {std::string(hidden).substr(0, std::string(hidden).rfind('/'))}, false);
    ASSERT_FALSE(layout.ok()) << hidden;
    EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(layout.status().message()),
                HasSubstr(absl::StrCat(hidden, " lies under /distcc-cuda,")));
    EXPECT_THAT(std::string(layout.status().message()), HasSubstr("--absolute-paths"));
  }
  // The workspace itself may lie there, and so may an environment: each
  // moves onto itself.
  EXPECT_TRUE(LayoutFor("/home/ada/proj",
                        {"/home/ada/proj/k.cu", "/distcc-cuda/site-packages/torch/x.h"},
                        {"/distcc-cuda/site-packages/torch"}, false)
                  .ok());
  EXPECT_TRUE(
      LayoutFor("/distcc-cuda/workspace/proj", {"/distcc-cuda/workspace/proj/k.cu"}, {}, false)
          .ok());
}

TEST(DescribeWorkspacesTest, SaysWhereTheWorkersSawItAndWhatIsKeyedByItsPath) {
  EXPECT_EQ(DescribeWorkspaces({{"/tmp/a", 3}}, {}, {}, false),
            "workspace /tmp/a (/distcc-cuda/workspace on the workers: its results serve the same "
            "tree in any folder)");
  EXPECT_EQ(
      DescribeWorkspaces({{"/tmp/a", 1}, {"/tmp/b", 4}}, {}, {{"/venv/torch/include", 900}}, true),
      "workspace /tmp/b and 1 more (--absolute-paths: at its own path on the workers; "
      "results are keyed by it)\n"
      "            outside it, keyed by their own paths: /venv/torch/include (900 files)");
  const InputRoots roots = {
      {"/v/lib/python3.11/site-packages",
       {"/v/lib/python3.11/site-packages", "/distcc-cuda/site-packages", "Python packages"}}};
  EXPECT_EQ(
      DescribeWorkspaces({{"/tmp/a", 3}}, roots, {{"/opt/x", 2}}, false),
      "workspace /tmp/a (/distcc-cuda/workspace on the workers: its results serve the same "
      "tree in any folder)\n"
      "            Python packages /v/lib/python3.11/site-packages (/distcc-cuda/site-packages "
      "on the workers: the same files serve from any venv or folder)\n"
      "            outside it, keyed by their own paths: /opt/x (2 files)");
  const InputRoots toolkit = {
      {"/usr/local/cuda", {"/usr/local/cuda", "/distcc-cuda/toolkit", "CUDA toolkit"}}};
  EXPECT_EQ(
      DescribeWorkspaces({{"/tmp/a", 3}}, toolkit, {}, false),
      "workspace /tmp/a (/distcc-cuda/workspace on the workers: its results serve the same "
      "tree in any folder)\n"
      "            CUDA toolkit /usr/local/cuda (/distcc-cuda/toolkit on the workers, each its "
      "own of this release: results are keyed by the release, not the folder)");
}

}  // namespace
}  // namespace distcc_cuda::client
