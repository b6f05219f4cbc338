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

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/nvcc/fatbin.h"
#include "common/process/subprocess.h"
#include "common/transport/certificates.h"
#include "tests/support/background_process.h"
#include "tests/support/cuda_sources.h"
#include "tests/support/loopback_cluster.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

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
  // certificate for 127.0.0.1, a worker's and two users' (alice, bob).
  void StartCluster() {
    certs_ = root_ + "/certs";
    ASSERT_TRUE(InitCertificateAuthority(certs_, "relocatable-test").ok());
    ASSERT_TRUE(
        IssueCertificateFiles(certs_, {PeerRole::kCoordinator, "coordinator", {"127.0.0.1"}}).ok());
    ASSERT_TRUE(IssueCertificateFiles(certs_, {PeerRole::kWorker, "rc-worker", {}}).ok());
    for (const char* user : {"alice", "bob"}) {
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
  const char* python_named = std::getenv("DISTCC_TORCH_PYTHON");
  const char* uv_named = std::getenv("DISTCC_UV");
  if (python_named == nullptr || *python_named == '\0' || uv_named == nullptr ||
      *uv_named == '\0') {
    GTEST_SKIP() << "needs DISTCC_TORCH_PYTHON (a python with torch: scripts/torch_python) and "
                    "DISTCC_UV (uv: scripts/uv), as scripts/test sets them";
  }
  const std::string python = fs::absolute(python_named).string();
  const std::string uv = fs::absolute(uv_named).string();
  const std::string pkg = root_ + "/tiny";
  ASSERT_TRUE(WriteFileAtomically(pkg + "/setup.py", R"(from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
setup(name="tiny_ext", version="1.0",
      ext_modules=[CUDAExtension("tiny_ext", ["csrc/binding.cpp", "csrc/scale.cu", "csrc/shift.cu"],
                                 extra_compile_args={"cxx": ["-O2"], "nvcc": ["-O3"]})],
      cmdclass={"build_ext": BuildExtension})
)")
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(pkg + "/MANIFEST.in", "include csrc/*.cu csrc/*.h\n").ok());
  ASSERT_TRUE(WriteFileAtomically(pkg + "/csrc/twice.h", kHeader).ok());
  // Python's C API only: torch's headers would cost a minute of g++.
  ASSERT_TRUE(WriteFileAtomically(pkg + "/csrc/binding.cpp", R"(#include <Python.h>
static PyObject* kernels(PyObject*, PyObject*) { return PyLong_FromLong(2); }
static PyMethodDef methods[] = {{"kernels", kernels, METH_NOARGS, ""}, {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "tiny_ext", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_tiny_ext() { return PyModule_Create(&module); }
)")
                  .ok());
  for (const char* name : {"scale", "shift"}) {
    ASSERT_TRUE(WriteFileAtomically(absl::StrCat(pkg, "/csrc/", name, ".cu"),
                                    absl::StrCat("#include \"twice.h\"\n__global__ void ", name,
                                                 "(float* x) { x[threadIdx.x] = "
                                                 "Twice(x[threadIdx.x]); }\n"))
                    .ok());
  }
  ProcessSpec sdist;
  sdist.argv = {python, "setup.py", "-q", "sdist"};
  sdist.working_directory = pkg;
  absl::StatusOr<ProcessResult> packed = RunProcess(sdist);
  ASSERT_TRUE(packed.ok() && packed->exit_code == 0) << (packed.ok() ? packed->stderr_text : "");
  const std::string archive = pkg + "/dist/tiny_ext-1.0.tar.gz";
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
  for (const char* target : {"by-pip", "by-uv"}) {
    ProcessSpec imported;
    imported.argv = {python, "-c",
                     absl::StrCat("import sys; sys.path.insert(0, '", root_, "/", target,
                                  "'); import torch, tiny_ext; print(tiny_ext.kernels())")};
    absl::StatusOr<ProcessResult> ran = RunProcess(imported);
    ASSERT_TRUE(ran.ok());
    EXPECT_EQ(ran->stdout_text, "2\n") << target << ": " << ran->stderr_text;
  }
}

}  // namespace
}  // namespace distcc_cuda
