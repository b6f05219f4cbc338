// SPDX-License-Identifier: Apache-2.0
// The toolkit a build needs (client/toolkit/): `distcc-cuda toolkit
// install` from PyPI's NVIDIA wheels, once, safely twice at once, checked
// against its manifest; and `build -- COMMAND` checking the CUDA its torch
// was built with before the command runs: a stand-in torch (version.py
// only) of 13.2 builds with the installed 13.2, one of 12.8 stops the build
// before anything runs, one of 13.1 is a warning; the real torch from PyPI
// (CUDA 13.2) builds an extension with the 13.2 toolkit on a machine whose
// nvcc is 13.0. The real binaries, real nvcc 13.0 and 13.2.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/files.h"
#include "common/nvcc/toolchain.h"
#include "common/process/subprocess.h"
#include "common/store/cas_store.h"
#include "common/store/toolkit_manifest.h"
#include "tests/support/background_process.h"
#include "tests/support/loopback_cluster.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kVersion[] = "13.2.86";
constexpr char kKernel[] = "__global__ void Scale(float* x) { x[threadIdx.x] *= 2.0f; }\n";

class ToolkitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nvcc_ = testing::RealNvccPath();
    if (nvcc_.empty()) GTEST_SKIP() << "needs the real nvcc at /usr/local/cuda/bin/nvcc";
    const char* cache = std::getenv("DISTCC_TOOLKIT_CACHE");
    if (cache == nullptr || *cache == '\0') {
      GTEST_SKIP() << "needs DISTCC_TOOLKIT_CACHE, a folder that keeps the toolkit installed "
                      "from PyPI between runs (scripts/test sets it to build/toolkits/installed)";
    }
    cache_ = AbsolutePath(cache);
    absl::StatusOr<NvccRelease> said = AskNvccRelease(nvcc_);
    ASSERT_TRUE(said.ok()) << said.status();
    release_ = said->release;
    if (release_ == "13.2") GTEST_SKIP() << "this machine's nvcc is 13.2, the toolkit's release";
    root_ = AbsolutePath(testing::NewTempDir("toolkit-"));
  }

  // `distcc-cuda ARGS` in `directory`.
  ProcessResult Client(const std::vector<std::string>& args, const std::string& directory,
                       std::map<std::string, std::string> environment = {}) {
    ProcessSpec spec;
    spec.argv = {testing::BinaryPath("distcc-cuda")};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.working_directory = directory;
    environment.try_emplace("HOME", root_ + "/home");
    environment.try_emplace("CUDA_HOME", fs::path(nvcc_).parent_path().parent_path().string());
    spec.environment = std::move(environment);
    spec.timeout = absl::Minutes(15);
    return testing::RunToEnd(spec);
  }

  // The toolkit of kVersion in the run-to-run cache: installed from PyPI
  // the first time, found after.
  std::string Installed() {
    ProcessResult installed =
        Client({"toolkit", "install", kVersion, "--toolkit-dir", cache_}, root_);
    EXPECT_EQ(installed.exit_code, 0) << installed.stderr_text;
    return LastLine(installed.stdout_text);
  }

  static std::string LastLine(const std::string& text) {
    std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
    return lines.empty() ? "" : lines.back();
  }

  // k.cu compiled to `object` in root_/work by `distcc-cuda build
  // --coordinator ADDRESS FLAGS -- sh -c '$PYTORCH_NVCC ...'`.
  ProcessResult BuildOnCluster(const std::string& address, const std::vector<std::string>& flags,
                               const std::string& object) {
    EXPECT_TRUE(WriteFileAtomically(root_ + "/work/k.cu", kKernel).ok());
    std::vector<std::string> args = {"build", "--coordinator", address};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(),
                {"--", "sh", "-c", "$PYTORCH_NVCC -O2 -arch=sm_100 -c k.cu -o " + object});
    return Client(args, root_ + "/work");
  }

  // A stand-in torch built for `cuda` in root_/site, which fails if imported.
  void WriteTorch(const std::string& cuda) {
    ASSERT_TRUE(WriteFileAtomically(root_ + "/site/torch/__init__.py",
                                    "raise ImportError('distcc-cuda imported torch')\n")
                    .ok());
    ASSERT_TRUE(WriteFileAtomically(root_ + "/site/torch/version.py",
                                    absl::StrCat("__version__ = '2.15.0+stand-in'\n"
                                                 "cuda: Optional[str] = '",
                                                 cuda, "'\n"))
                    .ok());
  }

  // `distcc-cuda build --state-dir ... -- python3 -c SCRIPT` in root_/work,
  // the script compiling k.cu through $PYTORCH_NVCC and saying its
  // CUDA_HOME; with the stand-in torch on PYTHONPATH.
  ProcessResult PythonBuild(const std::vector<std::string>& flags) {
    EXPECT_TRUE(WriteFileAtomically(root_ + "/work/k.cu", kKernel).ok());
    std::vector<std::string> args = {"build", "--state-dir", root_ + "/state"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(),
                {"--", "python3", "-c",
                 "import os, subprocess; open('ran', 'w'); subprocess.check_call("
                 "os.environ['PYTORCH_NVCC'].split() + ['-O2', '-arch=sm_100', '-c', 'k.cu', "
                 "'-o', 'k.o']); print('CUDA_HOME=' + os.environ.get('CUDA_HOME', ''))"});
    return Client(args, root_ + "/work", {{"PYTHONPATH", root_ + "/site"}});
  }

  std::string nvcc_;
  std::string release_;  // the machine's nvcc's: 13.0 here
  std::string cache_;
  std::string root_;
};

TEST_F(ToolkitTest, InstallsFromPyPIOnceSafelyAtOnceChecksItsFilesAndRemovesIt) {
  const std::string home = Installed();
  EXPECT_EQ(home, absl::StrCat(cache_, "/cuda-", kVersion));
  ProcessSpec ask;
  ask.argv = {home + "/bin/nvcc", "--version"};
  absl::StatusOr<ProcessResult> version = RunProcess(ask);
  ASSERT_TRUE(version.ok());
  EXPECT_THAT(version->stdout_text, HasSubstr("release 13.2, V13.2.86"));
  EXPECT_TRUE(IsRegularFile(home + "/lib64/libcudart.so")) << "torch links -lcudart from lib64";
  ProcessResult again = Client({"toolkit", "install", "13.2", "--toolkit-dir", cache_}, root_);
  ASSERT_EQ(again.exit_code, 0) << again.stderr_text;
  EXPECT_THAT(again.stderr_text, HasSubstr("CUDA 13.2.86 is installed already"));
  EXPECT_EQ(LastLine(again.stdout_text), home);

  // Two installs into a new folder at once: one fetches, the other waits
  // and finds its toolkit.
  const std::string fresh = root_ + "/fresh";
  ProcessResult results[2];
  std::thread other([&] {
    results[1] = Client({"toolkit", "install", kVersion, "--toolkit-dir", fresh}, root_);
  });
  results[0] = Client({"toolkit", "install", kVersion, "--toolkit-dir", fresh}, root_);
  other.join();
  int fetched = 0;
  for (const ProcessResult& result : results) {
    ASSERT_EQ(result.exit_code, 0) << result.stderr_text;
    EXPECT_EQ(LastLine(result.stdout_text), absl::StrCat(fresh, "/cuda-", kVersion));
    fetched += absl::StrContains(result.stderr_text, "fetching CUDA") ? 1 : 0;
  }
  EXPECT_EQ(fetched, 1);
  for (const fs::directory_entry& entry : fs::directory_iterator(fresh)) {
    EXPECT_THAT(entry.path().filename().string(), Not(HasSubstr(".installing"))) << "left over";
  }

  // A changed header is found, and installing again repairs it.
  const std::string header = absl::StrCat(fresh, "/cuda-", kVersion, "/include/cuda_runtime.h");
  ASSERT_TRUE(WriteFileAtomically(header, "#error tampered\n").ok());
  ProcessResult listed = Client({"toolkit", "list", "--toolkit-dir", fresh}, root_);
  EXPECT_THAT(listed.stdout_text, HasSubstr("include/cuda_runtime.h changed"));
  ProcessResult repaired = Client({"toolkit", "install", "13.2", "--toolkit-dir", fresh}, root_);
  ASSERT_EQ(repaired.exit_code, 0) << repaired.stderr_text;
  EXPECT_THAT(repaired.stderr_text, HasSubstr("installing it again"));
  listed = Client({"toolkit", "list", "--toolkit-dir", fresh}, root_);
  EXPECT_THAT(listed.stdout_text,
              HasSubstr(absl::StrCat("CUDA 13.2.86  ", fresh, "/cuda-13.2.86  ")));
  EXPECT_THAT(listed.stdout_text, HasSubstr("files as installed"));

  ProcessResult removed = Client({"toolkit", "remove", "13.2", "--toolkit-dir", fresh}, root_);
  ASSERT_EQ(removed.exit_code, 0) << removed.stderr_text;
  EXPECT_THAT(removed.stdout_text, HasSubstr("removed CUDA 13.2.86"));
  EXPECT_FALSE(fs::exists(absl::StrCat(fresh, "/cuda-", kVersion)));
  listed = Client({"toolkit", "list", "--toolkit-dir", fresh}, root_);
  EXPECT_THAT(listed.stdout_text, HasSubstr("no toolkits in " + fresh));

  ProcessResult twelve = Client({"toolkit", "install", "12.8", "--toolkit-dir", fresh}, root_);
  EXPECT_EQ(twelve.exit_code, 2);
  EXPECT_THAT(twelve.stderr_text, HasSubstr("PyPI has no CUDA 12.8 compiler"));
}

TEST_F(ToolkitTest, TorchOfTheInstalledReleaseGetsItForTheCommand) {
  const std::string home = Installed();
  WriteTorch("13.2");
  ProcessResult built = PythonBuild({"--toolkit-dir", cache_});
  ASSERT_EQ(built.exit_code, 0) << built.stdout_text << built.stderr_text;
  EXPECT_THAT(built.stderr_text,
              HasSubstr(absl::StrCat("torch 2.15.0+stand-in was built for CUDA 13.2: using CUDA "
                                     "13.2.86 at ",
                                     home, ", not nvcc ", release_, " at ", nvcc_)));
  EXPECT_THAT(built.stdout_text, HasSubstr("CUDA_HOME=" + home));
  EXPECT_THAT(built.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached"));
  EXPECT_THAT(built.stderr_text, HasSubstr("nvcc 13.2 (cuda_13.2"));
  EXPECT_TRUE(IsRegularFile(root_ + "/work/k.o"));
}

TEST_F(ToolkitTest, TorchOfAnotherMajorStopsTheBuildBeforeTheCommandRuns) {
  WriteTorch("12.8");
  ProcessResult stopped = PythonBuild({"--toolkit-dir", root_ + "/no-toolkits"});
  EXPECT_EQ(stopped.exit_code, 2);
  EXPECT_THAT(stopped.stderr_text,
              AllOf(HasSubstr("torch 2.15.0+stand-in (" + root_ +
                              "/site/torch) was built for CUDA 12.8, but this build's nvcc is " +
                              release_ + " (" + nvcc_ + ")"),
                    HasSubstr("nothing was run"), HasSubstr("--toolkit /usr/local/cuda-12.8")));
  EXPECT_FALSE(fs::exists(root_ + "/work/ran")) << "the command ran";
  EXPECT_FALSE(fs::exists(root_ + "/work/k.o"));
  EXPECT_THAT(stopped.stderr_text, Not(HasSubstr("compiled")));
}

TEST_F(ToolkitTest, TorchOfAnotherMinorIsOneWarningAndTheBuildGoesOn) {
  WriteTorch("13.1");
  ProcessResult built = PythonBuild({"--toolkit-dir", root_ + "/no-toolkits"});
  ASSERT_EQ(built.exit_code, 0) << built.stderr_text;
  EXPECT_THAT(
      built.stderr_text,
      HasSubstr("distcc-cuda: warning: torch 2.15.0+stand-in (" + root_ +
                "/site/torch) was built for CUDA 13.1, but this build's nvcc is " + release_));
  EXPECT_THAT(built.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached"));
  EXPECT_TRUE(fs::exists(root_ + "/work/k.o"));
}

// PyPI's torch (CUDA 13.2) on this machine's nvcc 13.0: torch's own check
// warns; with the installed 13.2 it has nothing to say, and the extension
// links against the toolkit's runtime and imports.
TEST_F(ToolkitTest, TheRealTorchBuildsAnExtensionWithTheToolkitItNeeds) {
  const char* python_named = std::getenv("DISTCC_TORCH_PYTHON");
  if (python_named == nullptr || *python_named == '\0') {
    GTEST_SKIP() << "needs DISTCC_TORCH_PYTHON (a python with torch: scripts/torch_python)";
  }
  const std::string python = fs::absolute(python_named).string();
  const std::string home = Installed();
  const std::string pkg = root_ + "/ext";
  ASSERT_TRUE(WriteFileAtomically(pkg + "/setup.py", R"(from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
setup(name="scale_ext", ext_modules=[CUDAExtension("scale_ext", ["binding.cpp", "scale.cu"])],
      cmdclass={"build_ext": BuildExtension})
)")
                  .ok());
  // Python's C API only: torch's headers would cost a minute of g++.
  ASSERT_TRUE(WriteFileAtomically(pkg + "/binding.cpp", R"(#include <Python.h>
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "scale_ext", nullptr, -1, nullptr};
PyMODINIT_FUNC PyInit_scale_ext() { return PyModule_Create(&module); }
)")
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(pkg + "/scale.cu", kKernel).ok());
  ProcessResult built = Client({"build", "--state-dir", root_ + "/state", "--toolkit-dir", cache_,
                                "--", python, "setup.py", "build_ext", "--inplace"},
                               pkg, {{"TORCH_CUDA_ARCH_LIST", "10.0"}});
  ASSERT_EQ(built.exit_code, 0) << built.stdout_text << built.stderr_text;
  EXPECT_THAT(built.stderr_text, HasSubstr("was built for CUDA 13.2: using CUDA 13.2.86 at"));
  EXPECT_THAT(built.stdout_text + built.stderr_text, Not(HasSubstr("version mismatch")));
  EXPECT_THAT(built.stderr_text, HasSubstr("nvcc 13.2 (cuda_13.2"));
  ProcessSpec imported;
  imported.argv = {python, "-c", "import torch, scale_ext; print('imported')"};
  imported.working_directory = pkg;
  absl::StatusOr<ProcessResult> ran = RunProcess(imported);
  ASSERT_TRUE(ran.ok());
  EXPECT_EQ(ran->stdout_text, "imported\n") << ran->stderr_text;
}

// A toolkit the coordinator serves: added by its operator, fetched by a
// worker whose machine has another CUDA (13.0) and by a client, each file
// checked; a damaged file in the coordinator's store is never handed out.
TEST_F(ToolkitTest, TheCoordinatorServesAToolkitToAWorkerAndAClient) {
  const std::string home = Installed();
  const std::string cluster_root = root_ + "/cluster";
  const std::string state = cluster_root + "/state";
  fs::create_directories(state);
  ProcessResult added = testing::RunToEnd({testing::BinaryPath("distcc-cuda-coordinator"),
                                           "toolkit", "add", "--state-dir", state, home});
  ASSERT_EQ(added.exit_code, 0) << added.stderr_text;
  EXPECT_THAT(added.stdout_text, HasSubstr("added CUDA 13.2.86 ("));
  auto cluster = testing::LoopbackCluster::Start(
      cluster_root, nvcc_, {{"fetcher", 1, "4GiB", true, {"--served-toolkit", "13.2"}}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_THAT((*cluster)->workers()[0]->Log(), HasSubstr("fetched CUDA 13.2.86 ("));
  EXPECT_THAT((*cluster)->workers()[0]->Log(), HasSubstr("from the coordinator in"));
  EXPECT_THAT((*cluster)->workers()[0]->Log(), HasSubstr("nvcc 13.2 (cuda_13.2"));
  // Adding needs the state dir to itself: not while the coordinator runs.
  ProcessResult busy = testing::RunToEnd({testing::BinaryPath("distcc-cuda-coordinator"), "toolkit",
                                          "add", "--state-dir", state, home});
  EXPECT_EQ(busy.exit_code, 1);
  EXPECT_THAT(busy.stderr_text, HasSubstr("stop the coordinator"));

  // The client's 13.2 (from PyPI) and the served one are the same
  // toolchain: the unit compiles on the worker that fetched it.
  const std::string address = (*cluster)->address();
  ProcessResult built =
      BuildOnCluster(address, {"--toolkit", "13.2", "--toolkit-dir", cache_}, "k.o");
  ASSERT_EQ(built.exit_code, 0) << built.stderr_text;
  EXPECT_THAT(built.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached"));
  EXPECT_THAT(built.stderr_text, HasSubstr("workers   1 (fetcher: 1)"));
  EXPECT_THAT(built.stderr_text, HasSubstr("toolchain nvcc 13.2 (cuda_13.2"));

  ProcessResult status = Client({"status", "--coordinator", address}, root_);
  EXPECT_THAT(status.stdout_text, HasSubstr("toolkit served by the coordinator: CUDA 13.2.86 ("))
      << status.stderr_text;
  EXPECT_THAT(status.stdout_text, HasSubstr("fetched in "));

  // A client takes the cluster's toolkit the same way.
  const std::string mine = root_ + "/from-cluster";
  ProcessResult fetched = Client(
      {"toolkit", "install", "13.2", "--coordinator", address, "--toolkit-dir", mine}, root_);
  ASSERT_EQ(fetched.exit_code, 0) << fetched.stderr_text;
  EXPECT_EQ(LastLine(fetched.stdout_text), mine + "/cuda-13.2.86");
  EXPECT_THAT(fetched.stderr_text, HasSubstr("from the coordinator at " + address));
  ProcessResult listed = Client({"toolkit", "list", "--toolkit-dir", mine}, root_);
  EXPECT_THAT(listed.stdout_text, HasSubstr("files as installed"));
  ProcessResult none = Client(
      {"toolkit", "install", "12.8", "--coordinator", address, "--toolkit-dir", mine}, root_);
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.stderr_text,
              HasSubstr("the coordinator serves no CUDA 12.8 (it serves 13.2.86)"));
  cluster->reset();

  // A file damaged in the coordinator's store: neither a worker nor a client
  // gets the toolkit, and both name the file.
  absl::StatusOr<std::string> manifest_text;
  {
    ProcessResult list = testing::RunToEnd(
        {testing::BinaryPath("distcc-cuda-coordinator"), "toolkit", "list", "--state-dir", state});
    const size_t at = list.stdout_text.find(" manifest ");
    ASSERT_NE(at, std::string::npos) << list.stdout_text;
    const std::string hash = list.stdout_text.substr(at + 10, 64);
    EXPECT_THAT(list.stdout_text, HasSubstr("pin: --served-toolkit 13.2@sha256:" + hash));
    auto store = CasStore::Open(state + "/cas");
    ASSERT_TRUE(store.ok());
    std::string path;
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(state + "/cas")) {
      if (entry.path().filename().string().rfind(hash, 0) == 0) path = entry.path().string();
    }
    ASSERT_FALSE(path.empty()) << "no manifest blob " << hash;
    manifest_text = ReadFile(path);
    ASSERT_TRUE(manifest_text.ok());
    absl::StatusOr<std::vector<ToolkitEntry>> entries = ParseToolkitManifest(*manifest_text);
    ASSERT_TRUE(entries.ok()) << entries.status();
    for (const ToolkitEntry& entry : *entries) {
      if (entry.path != "include/cuda_runtime.h") continue;
      const std::string blob = (*store)->PathOf(entry.digest);
      fs::permissions(blob, fs::perms::owner_write, fs::perm_options::add);
      std::string garbage(static_cast<size_t>(entry.digest.size_bytes), 'x');
      ASSERT_TRUE(WriteFileAtomically(blob, garbage).ok());
    }
  }
  // The same state under a new root: the first coordinator's log is not read again.
  fs::create_directories(root_ + "/damaged");
  fs::rename(state, root_ + "/damaged/state");
  auto damaged = testing::LoopbackCluster::Start(root_ + "/damaged", nvcc_, {});
  ASSERT_TRUE(damaged.ok()) << damaged.status();
  ProcessResult refused = Client({"toolkit", "install", "13.2", "--coordinator",
                                  (*damaged)->address(), "--toolkit-dir", root_ + "/refused"},
                                 root_);
  EXPECT_NE(refused.exit_code, 0) << refused.stderr_text;
  EXPECT_THAT(refused.stderr_text, HasSubstr("toolkit file include/cuda_runtime.h"));
  EXPECT_FALSE(fs::exists(root_ + "/refused/cuda-13.2.86"));
  auto worker = testing::BackgroundProcess::Start(
      {testing::BinaryPath("distcc-cuda-worker"), "--coordinator", (*damaged)->address(), "--name",
       "refused", "--served-toolkit", "13.2", "--work-dir", root_ + "/refused-worker"},
      root_ + "/refused-worker.log");
  ASSERT_TRUE(worker.ok());
  absl::StatusOr<int> ended = (*worker)->Stop(0, absl::Seconds(60));
  EXPECT_THAT((*worker)->Log(), HasSubstr("toolkit file include/cuda_runtime.h"));
  EXPECT_FALSE(fs::exists(root_ + "/refused-worker/toolkits/cuda-13.2.86"));
}

// One worker compiles builds of two toolkits side by side: the coordinator
// serves this machine's CUDA (13.0, its compile part) and 13.2 from PyPI; a
// worker started with --served-toolkit 13.0,13.2 fetches both and takes a
// 13.0 build's unit and a 13.2 build's, each compiled by its own nvcc (the
// objects name the release that compiled them).
TEST_F(ToolkitTest, OneWorkerCompilesTheBuildsOfTwoServedToolkits) {
  const std::string home = Installed();
  const std::string machine = fs::canonical(nvcc_).parent_path().parent_path().string();
  const std::string cluster_root = root_ + "/cluster";
  const std::string state = cluster_root + "/state";
  fs::create_directories(state);
  for (const std::string& folder : {machine, home}) {
    ProcessResult added = testing::RunToEnd({testing::BinaryPath("distcc-cuda-coordinator"),
                                             "toolkit", "add", "--state-dir", state, folder});
    ASSERT_EQ(added.exit_code, 0) << added.stderr_text;
  }
  auto cluster = testing::LoopbackCluster::Start(
      cluster_root, nvcc_,
      {{"both", 1, "4GiB", true, {"--served-toolkit", absl::StrCat(release_, ",13.2")}}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_THAT((*cluster)->workers()[0]->Log(), HasSubstr("fetched CUDA " + release_));
  EXPECT_THAT((*cluster)->workers()[0]->Log(), HasSubstr("fetched CUDA 13.2.86 ("));
  const std::string address = (*cluster)->address();
  ProcessResult status = Client({"status", "--coordinator", address}, root_);
  EXPECT_THAT(status.stdout_text, HasSubstr("and nvcc 13.2 (cuda_13.2"));
  EXPECT_THAT(status.stdout_text, HasSubstr("(served by the coordinator)"));

  ProcessResult newer =
      BuildOnCluster(address, {"--toolkit", "13.2", "--toolkit-dir", cache_}, "k132.o");
  ASSERT_EQ(newer.exit_code, 0) << newer.stderr_text;
  EXPECT_THAT(newer.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached"));
  EXPECT_THAT(newer.stderr_text, HasSubstr("workers   1 (both: 1)"));
  ProcessResult older = BuildOnCluster(address, {}, "k130.o");
  ASSERT_EQ(older.exit_code, 0) << older.stderr_text;
  EXPECT_THAT(older.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached"));
  EXPECT_THAT(older.stderr_text, HasSubstr("workers   1 (both: 1)"));
  absl::StatusOr<std::string> object_132 = ReadFile(root_ + "/work/k132.o");
  absl::StatusOr<std::string> object_130 = ReadFile(root_ + "/work/k130.o");
  ASSERT_TRUE(object_132.ok() && object_130.ok());
  EXPECT_THAT(*object_132, HasSubstr("Cuda compilation tools, release 13.2, V13.2.86"));
  EXPECT_THAT(*object_130, HasSubstr("Cuda compilation tools, release " + release_ + ", V"));
  EXPECT_THAT(*object_130, ::testing::Not(HasSubstr("release 13.2")));
}

}  // namespace
}  // namespace distcc_cuda
