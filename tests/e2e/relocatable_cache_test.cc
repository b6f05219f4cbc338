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
  // certificate for 127.0.0.1, a worker's and three users' (alice, bob, carol).
  void StartCluster() {
    certs_ = root_ + "/certs";
    ASSERT_TRUE(InitCertificateAuthority(certs_, "relocatable-test").ok());
    ASSERT_TRUE(
        IssueCertificateFiles(certs_, {PeerRole::kCoordinator, "coordinator", {"127.0.0.1"}}).ok());
    ASSERT_TRUE(IssueCertificateFiles(certs_, {PeerRole::kWorker, "rc-worker", {}}).ok());
    for (const char* user : {"alice", "bob", "carol"}) {
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

// The sdist of a small PyTorch extension in `folder`/dist: a binding of
// Python's C API (torch's headers would cost a minute of g++), and two
// kernels, one of which reads a header of torch's (c10's macros). Its
// archive's path.
std::string MakeTinySdist(const std::string& python, const std::string& folder) {
  const std::string pkg = folder;
  EXPECT_TRUE(WriteFileAtomically(pkg + "/setup.py", R"(from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
setup(name="tiny_ext", version="1.0",
      ext_modules=[CUDAExtension("tiny_ext", ["csrc/binding.cpp", "csrc/scale.cu", "csrc/shift.cu"],
                                 extra_compile_args={"cxx": ["-O2"], "nvcc": ["-O3"]})],
      cmdclass={"build_ext": BuildExtension})
)")
                  .ok());
  EXPECT_TRUE(WriteFileAtomically(pkg + "/MANIFEST.in", "include csrc/*.cu csrc/*.h\n").ok());
  EXPECT_TRUE(WriteFileAtomically(pkg + "/csrc/twice.h", kHeader).ok());
  EXPECT_TRUE(WriteFileAtomically(pkg + "/csrc/binding.cpp", R"(#include <Python.h>
static PyObject* kernels(PyObject*, PyObject*) { return PyLong_FromLong(2); }
static PyMethodDef methods[] = {{"kernels", kernels, METH_NOARGS, ""}, {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "tiny_ext", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_tiny_ext() { return PyModule_Create(&module); }
)")
                  .ok());
  EXPECT_TRUE(WriteFileAtomically(pkg + "/csrc/scale.cu",
                                  "#include <c10/macros/Macros.h>\n#include \"twice.h\"\n"
                                  "__global__ void scale(float* x) { x[threadIdx.x] = "
                                  "Twice(x[threadIdx.x]); }\n")
                  .ok());
  EXPECT_TRUE(WriteFileAtomically(pkg + "/csrc/shift.cu",
                                  "#include \"twice.h\"\n__global__ void shift(float* x) { "
                                  "x[threadIdx.x] = Twice(x[threadIdx.x]) + 1; }\n")
                  .ok());
  ProcessSpec sdist;
  sdist.argv = {python, "setup.py", "-q", "sdist"};
  sdist.working_directory = pkg;
  absl::StatusOr<ProcessResult> packed = RunProcess(sdist);
  EXPECT_TRUE(packed.ok() && packed->exit_code == 0) << (packed.ok() ? packed->stderr_text : "");
  return pkg + "/dist/tiny_ext-1.0.tar.gz";
}

// DISTCC_TORCH_PYTHON and DISTCC_UV, absolute; "" where either is unset.
std::pair<std::string, std::string> TorchPythonAndUv() {
  const char* python = std::getenv("DISTCC_TORCH_PYTHON");
  const char* uv = std::getenv("DISTCC_UV");
  if (python == nullptr || *python == '\0' || uv == nullptr || *uv == '\0') return {};
  return {fs::absolute(python).string(), fs::absolute(uv).string()};
}

constexpr char kNeedsTorchAndUv[] =
    "needs DISTCC_TORCH_PYTHON (a python with torch: scripts/torch_python) and DISTCC_UV (uv: "
    "scripts/uv), as scripts/test sets them";

// Whether `python` imports the extension installed in `target` and it
// answers.
void ExpectImports(const std::string& python, const std::string& target) {
  ProcessSpec imported;
  imported.argv = {python, "-c",
                   absl::StrCat("import sys; sys.path.insert(0, '", target,
                                "'); import torch, tiny_ext; print(tiny_ext.kernels())")};
  absl::StatusOr<ProcessResult> ran = RunProcess(imported);
  ASSERT_TRUE(ran.ok());
  EXPECT_EQ(ran->stdout_text, "2\n") << target << ": " << ran->stderr_text;
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

// The absolute paths in `binary`'s strings, a line each: what its debug
// information names.
std::string FoldersNamed(const std::string& binary) {
  std::string folders;
  std::string run;
  for (char c : binary + '\0') {
    if (c >= 0x20 && c < 0x7f) {
      run.push_back(c);
      continue;
    }
    if (absl::StartsWith(run, "/") && run.size() > 4) absl::StrAppend(&folders, run, "\n");
    run.clear();
  }
  return folders;
}

// The torch venv's files at `venv` (a venv: pyvenv.cfg names the same
// Python), each a hard link to the original: a teammate's copy of the
// same packages, at no cost in disk.
void LinkVenv(const std::string& original, const std::string& venv) {
  fs::create_directories(fs::path(venv).parent_path());
  fs::copy(original, venv,
           fs::copy_options::recursive | fs::copy_options::create_hard_links |
               fs::copy_options::copy_symlinks);
}

// A conda environment's layout at `prefix`, as conda installs one: a
// Python of its own (the interpreter, its standard library, its headers
// under PREFIX/include/python3.X, its build data naming PREFIX where it
// named the original's, as conda rewrites an installed package's
// prefix), and the torch venv's packages in its site-packages. Hard links
// and links to the original's files. The environment's python.
std::string LinkCondaLikeEnvironment(const std::string& python, const std::string& venv,
                                     const std::string& prefix) {
  ProcessSpec ask;
  ask.argv = {python, "-c",
              "import sys, sysconfig; print(sys.base_prefix); print(sys.version_info[1]); "
              "print(sysconfig.get_config_var('INCLUDEPY'))"};
  absl::StatusOr<ProcessResult> asked = RunProcess(ask);
  EXPECT_TRUE(asked.ok() && asked->exit_code == 0);
  if (!asked.ok()) return "";
  const std::vector<std::string> lines = absl::StrSplit(asked->stdout_text, '\n');
  const std::string base = lines.at(0);
  const std::string version = absl::StrCat("python3.", lines.at(1));
  const std::string lib = prefix + "/lib/" + version;
  fs::create_directories(lib);
  fs::create_directories(prefix + "/bin");
  fs::create_directories(prefix + "/include");
  fs::create_hard_link(base + "/bin/" + version, prefix + "/bin/" + version);
  fs::copy(fs::path(lines.at(2)), prefix + "/include/" + version,
           fs::copy_options::recursive | fs::copy_options::create_hard_links);
  for (const fs::directory_entry& entry : fs::directory_iterator(base + "/lib/" + version)) {
    const std::string name = entry.path().filename().string();
    if (name == "site-packages") continue;
    if (name == "__pycache__") {  // what this Python compiles stays its own
      fs::create_directories(lib + "/" + name);
      continue;
    }
    if (absl::StartsWith(name, "_sysconfigdata")) {
      absl::StatusOr<std::string> data = ReadFile(entry.path().string());
      EXPECT_TRUE(data.ok());
      EXPECT_TRUE(
          WriteFileAtomically(lib + "/" + name, absl::StrReplaceAll(*data, {{base, prefix}})).ok());
      continue;
    }
    fs::create_symlink(entry.path(), lib + "/" + name);
  }
  fs::copy(venv + "/lib/" + version + "/site-packages", lib + "/site-packages",
           fs::copy_options::recursive | fs::copy_options::create_hard_links |
               fs::copy_options::copy_symlinks);
  return prefix + "/bin/" + version;
}

// A team on one coordinator over mutual TLS: alice's torch in ~/.venv,
// bob's in a conda-like environment under /opt/envs with a Python of its
// own, carol's ~/.venv with one byte of a torch header changed. The same
// sdist installed by each with pip or uv from their own temporary folders:
// bob's compiles nothing, carol's only the unit that reads the changed
// header, and each summary names the user's own roots.
TEST_F(RelocatableCacheTest, TeammatesVenvsAndPythonsElsewhereShareOneClustersCompiles) {
  const auto [python, uv] = TorchPythonAndUv();
  if (python.empty()) GTEST_SKIP() << kNeedsTorchAndUv;
  const std::string original = fs::path(python).parent_path().parent_path().string();
  const std::string alice_venv = root_ + "/home-alice/.venv";
  const std::string carol_venv = root_ + "/home-carol/.venv";
  std::error_code linked;
  fs::create_hard_link(original + "/pyvenv.cfg", root_ + "/same-file-system", linked);
  if (linked) {
    GTEST_SKIP() << "needs the test's folder on the file system of " << original
                 << " (its copies are hard links): " << linked.message();
  }
  LinkVenv(original, alice_venv);
  LinkVenv(original, carol_venv);
  const std::string bob_python = LinkCondaLikeEnvironment(python, original, root_ + "/opt/envs/x");
  ASSERT_FALSE(bob_python.empty());
  // Carol's copy of one header differs by a comment: a file of its own.
  std::string header;
  for (const fs::directory_entry& entry : fs::directory_iterator(carol_venv + "/lib")) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "python3")) {
      header = entry.path().string() + "/site-packages/torch/include/c10/macros/Macros.h";
    }
  }
  ASSERT_TRUE(IsRegularFile(header)) << header;
  absl::StatusOr<std::string> text = ReadFile(header);
  ASSERT_TRUE(text.ok());
  ASSERT_TRUE(fs::remove(header));
  ASSERT_TRUE(WriteFileAtomically(header, *text + "// carol's\n").ok());

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
