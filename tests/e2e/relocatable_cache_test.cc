// SPDX-License-Identifier: Apache-2.0
// One cache for every folder, machine and user (client/plan/workspace_layout.h):
// the same tree built from another folder, by another user over mutual
// TLS, from a second git worktree, from a fresh temporary folder, and by
// pip and uv from their own temporary folders is answered from the cache,
// with the same device code; and what an object still says of the folder.
// The real binaries and the real nvcc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/nvcc/fatbin.h"
#include "common/process/subprocess.h"
#include "common/transport/certificates.h"
#include "tests/support/background_process.h"
#include "tests/support/cuda_sources.h"
#include "tests/support/loopback_cluster.h"
#include "tests/support/test_paths.h"
#include "tests/support/torch_projects.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;
using testing::ExpectImports;
using testing::FoldersNamed;
using ::testing::HasSubstr;
using testing::kNeedsTorchAndUv;
using testing::LinkCondaLikeEnvironment;
using testing::LinkVenv;
using testing::MakeTinySdist;
using ::testing::Not;
using testing::TorchPythonAndUv;

constexpr const char* kHeader = testing::kTwiceHeader;
// Internal device entities (an anonymous namespace, a static kernel),
// whose names nvcc derives from the source's absolute path, an assert
// (__FILE__ in device code) and __FILE__ in host code.
constexpr char kKernel[] = R"(#include <cassert>
#include <cstdio>
#include "twice.h"
namespace { __device__ float bias = 1.0f; }
static __global__ void Scale(float* x) { assert(x != nullptr); x[0] = Twice(x[0]) + bias; }
void Launch(float* x) { std::printf("%s\n", __FILE__); Scale<<<1, 1>>>(x); }
)";
constexpr char kCompile[] =
    "$PYTORCH_NVCC -O2 -Iinclude -gencode arch=compute_100,code=[sm_100,compute_100] "
    "-Xcompiler=-fPIC -c src/k.cu -o obj/k.o";

class RelocatableCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nvcc_ = testing::RealNvccPath();
    if (nvcc_.empty()) GTEST_SKIP() << "needs the real nvcc at /usr/local/cuda/bin/nvcc";
    root_ = AbsolutePath(testing::NewTempDir("relocatable-"));
  }

  // A cluster over mutual TLS, as a team runs one: a CA, the coordinator's
  // certificate for 127.0.0.1, a worker's and four users' (alice, bob, carol, dave).
  void StartCluster() {
    certs_ = root_ + "/certs";
    ASSERT_TRUE(InitCertificateAuthority(certs_, "relocatable-test").ok());
    ASSERT_TRUE(
        IssueCertificateFiles(certs_, {PeerRole::kCoordinator, "coordinator", {"127.0.0.1"}}).ok());
    ASSERT_TRUE(IssueCertificateFiles(certs_, {PeerRole::kWorker, "rc-worker", {}}).ok());
    for (const char* user : {"alice", "bob", "carol", "dave"}) {
      ASSERT_TRUE(IssueCertificateFiles(certs_, {PeerRole::kClient, user, {}}).ok());
    }
    fs::create_directories(root_ + "/cluster");
    auto cluster = testing::LoopbackCluster::Start(
        root_ + "/cluster", nvcc_, {{"rc-worker", 2, "8GiB", true, Tls("rc-worker")}},
        Tls("coordinator"));
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }

  std::vector<std::string> Tls(const std::string& name) const {
    return {"--tls-ca",  certs_ + "/ca.crt",          "--tls-cert", certs_ + "/" + name + ".crt",
            "--tls-key", certs_ + "/" + name + ".key"};
  }

  // `user`'s flags for the cluster: its address and the user's certificate.
  std::vector<std::string> AsUser(const std::string& user) const {
    std::vector<std::string> flags = {"--coordinator", cluster_->address()};
    for (std::string& flag : Tls(user)) flags.push_back(std::move(flag));
    return flags;
  }

  // `distcc-cuda ARGS` in `directory` with `environment` (HOME is the
  // test's unless given: each user's state lives in their own home).
  ProcessResult Client(const std::vector<std::string>& args, const std::string& directory,
                       std::map<std::string, std::string> environment = {}) {
    ProcessSpec spec;
    spec.argv = {testing::BinaryPath("distcc-cuda")};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.working_directory = directory;
    environment.try_emplace("HOME", root_ + "/home");
    spec.environment = std::move(environment);
    spec.timeout = absl::Minutes(10);
    return testing::RunToEnd(spec);
  }

  // `distcc-cuda build FLAGS -- sh -c SCRIPT` in `directory`.
  ProcessResult Session(const std::vector<std::string>& flags, const std::string& script,
                        const std::string& directory,
                        std::map<std::string, std::string> environment = {}) {
    std::vector<std::string> args = {"build", "--nvcc", nvcc_};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "sh", "-c", script});
    return Client(args, directory, std::move(environment));
  }

  // A project of one kernel and its header at `folder`.
  void WriteKernelProject(const std::string& folder) {
    ASSERT_TRUE(WriteFileAtomically(folder + "/include/twice.h", kHeader).ok());
    ASSERT_TRUE(WriteFileAtomically(folder + "/src/k.cu", kKernel).ok());
    fs::create_directories(folder + "/obj");
  }

  void CopyAttention(const std::string& folder) {
    fs::create_directories(fs::path(folder).parent_path());
    fs::copy(testing::SourceDir() + "/examples/attention", folder, fs::copy_options::recursive);
  }

  std::vector<DeviceImage> Images(const std::string& path) {
    absl::StatusOr<std::vector<DeviceImage>> images = ReadDeviceImages(path);
    EXPECT_TRUE(images.ok()) << path << ": " << images.status();
    return images.ok() ? *images : std::vector<DeviceImage>{};
  }

  std::string nvcc_;
  std::string root_;
  std::string certs_;
  std::unique_ptr<testing::LoopbackCluster> cluster_;
};

// "units     N (C compiled, K cached, ..." of a plan build's summary.
struct Counts {
  int units = -1, compiled = -1, cached = -1;
};
Counts PlanCounts(const std::string& summary) {
  static const std::regex kUnits(R"(units +([0-9]+) \(([0-9]+) compiled, ([0-9]+) cached)");
  std::smatch match;
  Counts counts;
  if (std::regex_search(summary, match, kUnits)) {
    counts = {std::stoi(match[1]), std::stoi(match[2]), std::stoi(match[3])};
  }
  return counts;
}

TEST_F(RelocatableCacheTest, AttentionInAnotherFolderAtAnotherDepthIsAllCached) {
  const std::string first = root_ + "/first/attention";
  const std::string second = root_ + "/second/at/another/depth/attention";
  CopyAttention(first);
  CopyAttention(second);
  ProcessResult built = Client({"build", first + "/kernels.toml", "-o", root_ + "/out1", "--nvcc",
                                nvcc_, "--state-dir", root_ + "/state"},
                               root_);
  ASSERT_EQ(built.exit_code, 0) << built.stdout_text << built.stderr_text;
  const Counts cold = PlanCounts(built.stdout_text);
  ASSERT_GT(cold.units, 0) << built.stdout_text;
  EXPECT_EQ(cold.compiled, cold.units);
  EXPECT_THAT(built.stdout_text, HasSubstr("workspace " + first + " (/distcc-cuda/workspace"));

  ProcessResult moved = Client({"build", second + "/kernels.toml", "-o", root_ + "/out2", "--nvcc",
                                nvcc_, "--state-dir", root_ + "/state"},
                               root_);
  ASSERT_EQ(moved.exit_code, 0) << moved.stdout_text << moved.stderr_text;
  const Counts warm = PlanCounts(moved.stdout_text);
  EXPECT_EQ(warm.units, cold.units) << moved.stdout_text;
  EXPECT_EQ(warm.compiled, 0) << moved.stdout_text;
  EXPECT_EQ(warm.cached, cold.units);
  // The include scans too: the same questions of the moved tree.
  EXPECT_THAT(moved.stdout_text, HasSubstr(" scans unchanged since the last build"));
  EXPECT_THAT(moved.stdout_text, HasSubstr("workspace " + second + " (/distcc-cuda/workspace"));
  const std::vector<DeviceImage> one = Images(root_ + "/out1/libattention_sm100.so");
  ASSERT_GE(one.size(), static_cast<size_t>(cold.units)) << "a cubin per unit at least";
  EXPECT_TRUE(one == Images(root_ + "/out2/libattention_sm100.so"))
      << "the moved tree's library has other device code";
}

// Two users, their checkouts at different paths under different homes,
// one coordinator over mutual TLS: the second build compiles nothing.
TEST_F(RelocatableCacheTest, TwoUsersCheckoutsAtDifferentPathsShareOneClustersCache) {
  StartCluster();
  const std::string alice = root_ + "/home-alice/src/attention";
  const std::string bob = root_ + "/b/work/checkouts/deeper/attention";
  CopyAttention(alice);
  CopyAttention(bob);
  auto build = [&](const std::string& user, const std::string& checkout) {
    std::vector<std::string> args = {
        "build", checkout + "/kernels.toml", "-o", checkout + "/out", "--nvcc", nvcc_};
    for (std::string& flag : AsUser(user)) args.push_back(std::move(flag));
    return Client(args, checkout, {{"HOME", root_ + "/home-" + user}});
  };
  ProcessResult first = build("alice", alice);
  ASSERT_EQ(first.exit_code, 0) << first.stdout_text << first.stderr_text;
  const Counts cold = PlanCounts(first.stdout_text);
  ASSERT_GT(cold.units, 0) << first.stdout_text;
  EXPECT_EQ(cold.compiled, cold.units);
  ProcessResult second = build("bob", bob);
  ASSERT_EQ(second.exit_code, 0) << second.stdout_text << second.stderr_text;
  const Counts warm = PlanCounts(second.stdout_text);
  EXPECT_EQ(warm.compiled, 0) << second.stdout_text;
  EXPECT_EQ(warm.cached, warm.units);
  EXPECT_TRUE(Images(alice + "/out/libattention_sm100.so") ==
              Images(bob + "/out/libattention_sm100.so"))
      << "bob's library has other device code than alice's";
}

// A git worktree is a folder of its own (its .git is a file): its compiles
// are the main checkout's, through the launcher as through a plan.
TEST_F(RelocatableCacheTest, TwoGitWorktreesOfOneRepositoryShareTheirCompiles) {
  StartCluster();
  const std::string repo = root_ + "/repos/kernels";
  WriteKernelProject(repo);
  ASSERT_TRUE(WriteFileAtomically(repo + "/.gitignore", "obj/\n").ok());
  auto git = [&](const std::vector<std::string>& args) {
    ProcessSpec spec;
    spec.argv = {"git", "-c", "user.name=test", "-c", "user.email=test@example.com"};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.working_directory = repo;
    absl::StatusOr<ProcessResult> ran = RunProcess(spec);
    ASSERT_TRUE(ran.ok() && ran->exit_code == 0) << (ran.ok() ? ran->stderr_text : "");
  };
  git({"init", "-q"});
  git({"add", "."});
  git({"commit", "-q", "-m", "kernels"});
  const std::string feature = root_ + "/worktrees/elsewhere/feature";
  git({"worktree", "add", "-q", feature});
  fs::create_directories(feature + "/obj");

  ProcessResult main_build = Session(AsUser("alice"), kCompile, repo);
  ASSERT_EQ(main_build.exit_code, 0) << main_build.stderr_text;
  EXPECT_THAT(main_build.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached"));
  EXPECT_THAT(main_build.stderr_text, HasSubstr("workspace " + repo + " ("));
  ProcessResult feature_build = Session(AsUser("bob"), kCompile, feature);
  ASSERT_EQ(feature_build.exit_code, 0) << feature_build.stderr_text;
  EXPECT_THAT(feature_build.stderr_text, HasSubstr("1 on the cluster (0 compiled, 1 cached"));
  EXPECT_THAT(feature_build.stderr_text, HasSubstr("workspace " + feature + " ("));
  EXPECT_TRUE(Images(repo + "/obj/k.o") == Images(feature + "/obj/k.o"));
}

TEST_F(RelocatableCacheTest, TheLauncherFromTwoFreshTemporaryFoldersCompilesOnce) {
  const std::string state = root_ + "/state";
  const std::string one = AbsolutePath(testing::NewTempDir("fresh-"));
  const std::string two = AbsolutePath(testing::NewTempDir("fresh-"));
  WriteKernelProject(one);
  WriteKernelProject(two);
  ProcessResult first = Session({"--state-dir", state}, kCompile, one);
  ASSERT_EQ(first.exit_code, 0) << first.stderr_text;
  EXPECT_THAT(first.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached"));
  ProcessResult second = Session({"--state-dir", state}, kCompile, two);
  ASSERT_EQ(second.exit_code, 0) << second.stderr_text;
  EXPECT_THAT(second.stderr_text, HasSubstr("1 on the cluster (0 compiled, 1 cached"));
  absl::StatusOr<std::string> a = ReadFile(one + "/obj/k.o");
  absl::StatusOr<std::string> b = ReadFile(two + "/obj/k.o");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b) << "the cached object is not the one compiled from the first folder";
}

// What the object says about the folder (docs/caching.md, "One cache for every
// folder"): nvcc's dependency file names the user's own paths (ninja reads
// it); __FILE__ is the source as the command named it; host debug
// information names the canonical root, not the user's folder, unless
// --absolute-paths; nvcc's messages name the user's files.
TEST_F(RelocatableCacheTest, WhatAnObjectSaysAboutTheFolder) {
  const std::string proj = root_ + "/users/ada/proj";
  WriteKernelProject(proj);
  ASSERT_TRUE(WriteFileAtomically(proj + "/setup.py", "").ok());
  const std::string compile =
      absl::StrCat("$PYTORCH_NVCC -g -lineinfo -I", proj, "/include -MD -MF obj/k.d ",
                   "-gencode arch=compute_100,code=[sm_100,compute_100] -c src/k.cu -o obj/k.o");
  ProcessResult built = Session({"--state-dir", root_ + "/state"}, compile, proj);
  ASSERT_EQ(built.exit_code, 0) << built.stderr_text;
  absl::StatusOr<std::string> object = ReadFile(proj + "/obj/k.o");
  absl::StatusOr<std::string> deps = ReadFile(proj + "/obj/k.d");
  ASSERT_TRUE(object.ok() && deps.ok());
  EXPECT_THAT(*deps, HasSubstr(proj + "/include/twice.h")) << "ninja reads the user's paths";
  EXPECT_EQ(object->find(proj), std::string::npos) << "the object names the user's folder";
  EXPECT_THAT(*object, HasSubstr("/distcc-cuda/workspace")) << "host debug information";
  EXPECT_THAT(*object, HasSubstr("src/k.cu")) << "__FILE__";
  for (const DeviceImage& image : Images(proj + "/obj/k.o")) {
    EXPECT_EQ(image.payload.find(proj), std::string::npos) << DescribeDeviceImage(image);
  }
  // With --absolute-paths: the user's folder, as a local nvcc writes it.
  ProcessResult as_is =
      Session({"--state-dir", root_ + "/state", "--absolute-paths"}, compile, proj);
  ASSERT_EQ(as_is.exit_code, 0) << as_is.stderr_text;
  EXPECT_THAT(as_is.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached"))
      << "an --absolute-paths result is keyed by its folder";
  EXPECT_THAT(ReadFile(proj + "/obj/k.o").value_or(""), HasSubstr(proj));
  // nvcc's messages name the files as the user's command does (the
  // include folder inside the workspace went relative), never the
  // canonical root.
  ASSERT_TRUE(WriteFileAtomically(proj + "/include/twice.h",
                                  absl::StrCat("#pragma once\n#warning twice is old\n", kHeader))
                  .ok());
  ProcessResult warned = Session({"--state-dir", root_ + "/state"}, compile, proj);
  ASSERT_EQ(warned.exit_code, 0) << warned.stderr_text;
  EXPECT_THAT(warned.stdout_text + warned.stderr_text,
              HasSubstr("include/twice.h:2:2: warning: #warning twice is old"));
  EXPECT_THAT(warned.stdout_text + warned.stderr_text,
              Not(HasSubstr("/distcc-cuda/workspace/include")));
}

// The workers have the workspace at the canonical root only: a source
// that names its own header by its absolute path compiles here, and the
// launcher says why and what to do.
TEST_F(RelocatableCacheTest, AnAbsoluteIncludeOfTheWorkspacesOwnFileCompilesHereSayingWhy) {
  const std::string proj = root_ + "/absolute-include";
  ASSERT_TRUE(WriteFileAtomically(proj + "/setup.py", "").ok());
  ASSERT_TRUE(WriteFileAtomically(proj + "/v.h", "#define V 3\n").ok());
  ASSERT_TRUE(WriteFileAtomically(proj + "/k.cu", absl::StrCat("#include \"", proj,
                                                               "/v.h\"\n__global__ void k(int* "
                                                               "p) { p[0] = V; }\n"))
                  .ok());
  ProcessResult built =
      Session({"--state-dir", root_ + "/state"},
              "$PYTORCH_NVCC -gencode arch=compute_100,code=sm_100 -c k.cu -o k.o", proj);
  ASSERT_EQ(built.exit_code, 0) << built.stderr_text;
  EXPECT_THAT(built.stderr_text,
              HasSubstr(absl::StrCat("the source names ", proj, "/v.h, a file of its workspace ",
                                     proj, ", by its absolute path")));
  EXPECT_THAT(built.stderr_text, HasSubstr("or build with --absolute-paths"));
  EXPECT_TRUE(IsRegularFile(proj + "/k.o"));
  ProcessResult as_is =
      Session({"--state-dir", root_ + "/state", "--absolute-paths"},
              "$PYTORCH_NVCC -gencode arch=compute_100,code=sm_100 -c k.cu -o k.o", proj);
  ASSERT_EQ(as_is.exit_code, 0) << as_is.stderr_text;
  EXPECT_THAT(as_is.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached"));
}

// A PyTorch extension as its users install it: pip and uv unpack its sdist
// into a new temporary folder each time and build there.
TEST_F(RelocatableCacheTest, PipAndUvBuildAnSdistInTheirOwnTemporaryFoldersCompilingOnce) {
  const auto [python, uv] = TorchPythonAndUv();
  if (python.empty()) GTEST_SKIP() << kNeedsTorchAndUv;
  const std::string archive = MakeTinySdist(python, root_ + "/tiny");
  ASSERT_TRUE(IsRegularFile(archive));

  // Their temporary folders under the test's own.
  fs::create_directories(root_ + "/tmp");
  const std::map<std::string, std::string> environment = {
      {"TMPDIR", root_ + "/tmp"},
      {"TORCH_CUDA_ARCH_LIST", "10.0"},
      {"CUDA_HOME", fs::path(nvcc_).parent_path().parent_path().string()}};
  const std::vector<std::string> state = {"--state-dir", root_ + "/state"};
  ProcessResult pip = Session(state,
                              absl::StrCat(python,
                                           " -m pip install --no-build-isolation --no-deps "
                                           "--no-index --no-cache-dir --target ",
                                           root_, "/by-pip ", archive),
                              root_, environment);
  ASSERT_EQ(pip.exit_code, 0) << pip.stdout_text << pip.stderr_text;
  EXPECT_THAT(pip.stderr_text, HasSubstr("3 on the cluster (3 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(pip.stderr_text, HasSubstr("workspace " + root_ + "/tmp/pip-"));
  ProcessResult by_uv =
      Session(state,
              absl::StrCat(uv, " pip install --python ", python,
                           " --no-build-isolation --no-deps --offline --no-cache --target ", root_,
                           "/by-uv ", archive),
              root_, environment);
  ASSERT_EQ(by_uv.exit_code, 0) << by_uv.stdout_text << by_uv.stderr_text;
  EXPECT_THAT(by_uv.stderr_text, HasSubstr("3 on the cluster (0 compiled, 3 cached, 0 failed)"));
  EXPECT_THAT(by_uv.stderr_text, HasSubstr("workspace " + root_ + "/tmp/"));
  for (const char* target : {"by-pip", "by-uv"}) ExpectImports(python, root_ + "/" + target);
}

// Whether `program` is on PATH.
bool Have(const std::string& program) {
  ProcessSpec which;
  which.argv = {"sh", "-c", "command -v " + program};
  absl::StatusOr<ProcessResult> ran = RunProcess(which);
  return ran.ok() && ran->exit_code == 0;
}

// CMake's out-of-tree build folders (`cmake -B` elsewhere, a generated
// header in each) beside checkouts elsewhere: a root of their own, so the
// teammate's ninja and then compile_commands.json build take the first's
// results, ninja's dependencies name the teammate's own files and the
// object neither user's folders.
TEST_F(RelocatableCacheTest, OutOfTreeCMakeBuildFoldersElsewhereShareTheirCompiles) {
  if (!Have("cmake") || !Have("ninja")) GTEST_SKIP() << "needs cmake and ninja on PATH";
  const std::string state = root_ + "/state";
  auto configure = [&](const std::string& checkout, const std::string& folder) {
    WriteKernelProject(checkout);
    EXPECT_TRUE(WriteFileAtomically(
                    checkout + "/src/k.cu",
                    absl::StrCat("#include \"config.h\"\n#warning \"made here\"\n", kKernel))
                    .ok());
    EXPECT_TRUE(WriteFileAtomically(checkout + "/config.h.in", "#define SCALE 2\n").ok());
    EXPECT_TRUE(WriteFileAtomically(
                    checkout + "/CMakeLists.txt",
                    "cmake_minimum_required(VERSION 3.18)\nproject(k LANGUAGES CUDA)\n"
                    "configure_file(config.h.in ${CMAKE_BINARY_DIR}/gen/config.h)\n"
                    "add_library(k SHARED src/k.cu)\n"
                    "target_include_directories(k PRIVATE include ${CMAKE_BINARY_DIR}/gen)\n")
                    .ok());
    ProcessSpec spec;
    spec.argv = {"cmake",
                 "-S",
                 checkout,
                 "-B",
                 folder,
                 "-G",
                 "Ninja",
                 "-DCMAKE_CUDA_COMPILER=" + nvcc_,
                 "-DCMAKE_CUDA_ARCHITECTURES=100",
                 "-DCMAKE_CUDA_COMPILER_LAUNCHER=" + testing::BinaryPath("distcc-cuda"),
                 "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"};
    ProcessResult ran = testing::RunToEnd(spec);
    EXPECT_EQ(ran.exit_code, 0) << ran.stdout_text << ran.stderr_text;
  };
  const std::string alice = root_ + "/home-alice/src/proj", alice_build = root_ + "/scratch/ab";
  const std::string bob = root_ + "/b/work/proj", bob_build = root_ + "/tmp-bob/out/build-x";
  configure(alice, alice_build);
  configure(bob, bob_build);
  const std::string object = "/CMakeFiles/k.dir/src/k.cu.o";

  ProcessResult first = Session({"--state-dir", state}, "ninja -C " + alice_build, alice);
  ASSERT_EQ(first.exit_code, 0) << first.stderr_text;
  EXPECT_THAT(first.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached"));
  EXPECT_THAT(first.stderr_text, HasSubstr("workspace " + alice + " ("));
  EXPECT_THAT(first.stderr_text,
              HasSubstr("build folder " + alice_build + " (/distcc-cuda/build on the workers"));
  // nvcc's warning names the source as the user has it, not as the worker did.
  EXPECT_THAT(first.stdout_text, HasSubstr(alice + "/src/k.cu:2:2: warning: #warning"))
      << first.stdout_text;
  EXPECT_THAT(first.stdout_text, Not(HasSubstr("workspace/src/k.cu")));
  ProcessResult second = Session({"--state-dir", state}, "ninja -C " + bob_build, bob);
  ASSERT_EQ(second.exit_code, 0) << second.stderr_text;
  EXPECT_THAT(second.stderr_text, HasSubstr("1 on the cluster (0 compiled, 1 cached"));
  EXPECT_THAT(second.stderr_text, HasSubstr("build folder " + bob_build + " ("));
  EXPECT_THAT(second.stdout_text, HasSubstr(bob + "/src/k.cu:2:2: warning: #warning"));
  absl::StatusOr<std::string> a = ReadFile(alice_build + object);
  absl::StatusOr<std::string> b = ReadFile(bob_build + object);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b) << "bob's object is not alice's result";
  EXPECT_EQ(FoldersNamed(*b).find(root_), std::string::npos) << FoldersNamed(*b);
  ProcessSpec deps;
  deps.argv = {"ninja", "-C", bob_build, "-t", "deps"};
  ProcessResult listed = testing::RunToEnd(deps);
  EXPECT_THAT(listed.stdout_text, HasSubstr(bob + "/include/twice.h"));
  EXPECT_THAT(listed.stdout_text, HasSubstr(bob_build + "/gen/config.h"));
  EXPECT_THAT(listed.stdout_text, Not(HasSubstr(alice)));

  // The same through each build folder's compile_commands.json (alice's
  // may take the launcher's result: the unit is the same).
  auto plan = [&](const std::string& checkout, const std::string& folder) {
    return Client({"build", folder + "/compile_commands.json", "-o", folder + "/plan-out", "--nvcc",
                   nvcc_, "--library", "libk.so", "--state-dir", state},
                  checkout);
  };
  ProcessResult alice_plan = plan(alice, alice_build);
  ASSERT_EQ(alice_plan.exit_code, 0) << alice_plan.stdout_text << alice_plan.stderr_text;
  EXPECT_EQ(PlanCounts(alice_plan.stdout_text).units, 1) << alice_plan.stdout_text;
  ProcessResult bob_plan = plan(bob, bob_build);
  ASSERT_EQ(bob_plan.exit_code, 0) << bob_plan.stdout_text << bob_plan.stderr_text;
  EXPECT_EQ(PlanCounts(bob_plan.stdout_text).compiled, 0) << bob_plan.stdout_text;
  EXPECT_EQ(PlanCounts(bob_plan.stdout_text).cached, 1) << bob_plan.stdout_text;
  EXPECT_THAT(bob_plan.stdout_text, HasSubstr(bob + "/src/k.cu:2:2: warning: #warning"));
  EXPECT_THAT(bob_plan.stdout_text, Not(HasSubstr("workspace/src/k.cu")));
}

// A team on one coordinator over mutual TLS: alice's torch in ~/.venv,
// bob's in a conda-like environment under /opt/envs with a Python of its
// own, carol's ~/.venv with one byte of a torch header changed, dave's
// ~/.venv with another torch release's headers (scripts/torch_headers).
// The same sdist installed by each with pip or uv from their own temporary
// folders: bob's compiles nothing, carol's and dave's only the unit that
// reads torch's headers, and each summary names the user's own roots.
TEST_F(RelocatableCacheTest, TeammatesVenvsAndPythonsElsewhereShareOneClustersCompiles) {
  const auto [python, uv] = TorchPythonAndUv();
  if (python.empty()) GTEST_SKIP() << kNeedsTorchAndUv;
  const char* other_torch = std::getenv("DISTCC_OTHER_TORCH_INCLUDE");
  if (other_torch == nullptr || *other_torch == '\0') {
    GTEST_SKIP() << "needs DISTCC_OTHER_TORCH_INCLUDE (another torch release's torch/include: "
                    "scripts/torch_headers), as scripts/test sets it";
  }
  const std::string original = fs::path(python).parent_path().parent_path().string();
  const std::string alice_venv = root_ + "/home-alice/.venv";
  const std::string carol_venv = root_ + "/home-carol/.venv";
  const std::string dave_venv = root_ + "/home-dave/.venv";
  std::error_code linked;
  fs::create_hard_link(original + "/pyvenv.cfg", root_ + "/same-file-system", linked);
  if (linked) {
    GTEST_SKIP() << "needs the test's folder on the file system of " << original
                 << " (its copies are hard links): " << linked.message();
  }
  for (const std::string& venv : {alice_venv, carol_venv, dave_venv}) LinkVenv(original, venv);
  const std::string bob_python = LinkCondaLikeEnvironment(python, original, root_ + "/opt/envs/x");
  ASSERT_FALSE(bob_python.empty());
  auto torch_include = [](const std::string& venv) {
    std::string include;
    for (const fs::directory_entry& entry : fs::directory_iterator(venv + "/lib")) {
      const std::string name = entry.path().filename().string();
      if (absl::StartsWith(name, "python3")) {
        include = entry.path().string() + "/site-packages/torch/include";
      }
    }
    return include;
  };
  // Carol's copy of one header differs by a comment: a file of its own.
  const std::string header = torch_include(carol_venv) + "/c10/macros/Macros.h";
  ASSERT_TRUE(IsRegularFile(header)) << header;
  absl::StatusOr<std::string> text = ReadFile(header);
  ASSERT_TRUE(text.ok());
  ASSERT_TRUE(fs::remove(header));
  ASSERT_TRUE(WriteFileAtomically(header, *text + "// carol's\n").ok());
  // Dave's torch is another release: its headers are those of the other
  // release's wheel.
  ASSERT_GT(fs::remove_all(torch_include(dave_venv)), 0u);
  fs::copy(other_torch, torch_include(dave_venv), fs::copy_options::recursive);

  StartCluster();
  const std::string archive = MakeTinySdist(python, root_ + "/tiny");
  ASSERT_TRUE(IsRegularFile(archive));
  auto install = [&](const std::string& user, const std::string& user_python, bool with_uv) {
    const std::string home = root_ + "/home-" + user;
    fs::create_directories(home + "/tmp");
    const std::map<std::string, std::string> environment = {
        {"HOME", home},
        {"TMPDIR", home + "/tmp"},
        {"TORCH_CUDA_ARCH_LIST", "10.0"},
        {"CUDA_HOME", fs::path(nvcc_).parent_path().parent_path().string()}};
    const std::string target = home + "/installed";
    const std::string command =
        with_uv ? absl::StrCat(uv, " pip install --python ", user_python,
                               " --no-build-isolation --no-deps --offline --no-cache --target ",
                               target, " ", archive)
                : absl::StrCat(user_python,
                               " -m pip install --no-build-isolation --no-deps --no-index "
                               "--no-cache-dir --target ",
                               target, " ", archive);
    ProcessResult run = Session(AsUser(user), command, home, environment);
    EXPECT_EQ(run.exit_code, 0) << run.stdout_text << run.stderr_text;
    ExpectImports(user_python, target);
    return run.stderr_text;
  };
  const std::string alice = install("alice", alice_venv + "/bin/python", false);
  EXPECT_THAT(alice, HasSubstr("3 on the cluster (3 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(alice, HasSubstr("Python packages " + alice_venv + "/lib/python3."));
  const std::string bob = install("bob", bob_python, true);
  EXPECT_THAT(bob, HasSubstr("3 on the cluster (0 compiled, 3 cached, 0 failed)"));
  EXPECT_THAT(bob, HasSubstr("Python packages " + root_ + "/opt/envs/x/lib/python3."));
  EXPECT_THAT(bob, HasSubstr("Python headers " + root_ + "/opt/envs/x/include/python3."));
  EXPECT_THAT(bob, Not(HasSubstr("keyed by their own paths"))) << bob;
  const std::string carol = install("carol", carol_venv + "/bin/python", false);
  EXPECT_THAT(carol, HasSubstr("3 on the cluster (1 compiled, 2 cached, 0 failed)")) << carol;
  const std::string dave = install("dave", dave_venv + "/bin/python", true);
  EXPECT_THAT(dave, HasSubstr("3 on the cluster (1 compiled, 2 cached, 0 failed)")) << dave;
  // Bob's module, of alice's compiles, names none of alice's folders: its
  // debug information names the canonical places.
  for (const fs::directory_entry& entry : fs::directory_iterator(root_ + "/home-bob/installed")) {
    if (entry.path().extension() != ".so") continue;
    absl::StatusOr<std::string> module = ReadFile(entry.path().string());
    ASSERT_TRUE(module.ok());
    const std::string folders = FoldersNamed(*module);
    EXPECT_THAT(folders, Not(HasSubstr("home-alice"))) << folders;
    EXPECT_THAT(folders, HasSubstr("/distcc-cuda/workspace")) << folders;
  }
}

}  // namespace
}  // namespace distcc_cuda
