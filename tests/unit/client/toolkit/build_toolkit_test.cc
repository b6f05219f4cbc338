// SPDX-License-Identifier: Apache-2.0
// Which toolkit a build compiles with (client/toolkit/): releases, torch's
// version file, the command's Python, a CMake cache, the manifest of an
// installed toolkit, the store and the decision. The nvccs here are scripts
// that answer --version as nvcc does; tests/e2e/toolkit_test.cc runs the
// real ones.
#include "client/toolkit/build_toolkit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/toolkit/framework_check.h"
#include "client/toolkit/toolkit_store.h"
#include "common/base/files.h"
#include "common/nvcc/cuda_release.h"
#include "common/store/toolkit_manifest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::client {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// torch 2.15.0's version.py, as PyPI's wheel has it.
constexpr char kTorchVersionFile[] = R"(from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '2.15.0+cu132'
debug = False
cuda: Optional[str] = '13.2'
git_version = 'd0f2af8b66b20da4baa50644c0cd3f887a2eae2e'
hip: Optional[str] = None
)";

void WriteProgram(const std::string& path, const std::string& text) {
  ASSERT_TRUE(WriteFileAtomically(path, text).ok());
  fs::permissions(path, fs::perms::owner_all);
}

// A script that answers `--version` as nvcc `version` does.
void WriteNvcc(const std::string& path, const std::string& version) {
  const std::string release = version.substr(0, version.rfind('.'));
  WriteProgram(path, absl::StrCat("#!/bin/sh\necho 'Cuda compilation tools, release ", release,
                                  ", V", version, "'\necho 'Build cuda_", release, ".r", release,
                                  "/compiler.1_0'\n"));
}

// A stand-in torch package built for `cuda` under `site`, whose import fails
// (the check must not import it).
std::string WriteTorch(const std::string& site, const std::string& cuda) {
  const std::string torch = site + "/torch";
  EXPECT_TRUE(WriteFileAtomically(torch + "/__init__.py",
                                  "raise ImportError('distcc-cuda imported torch')\n")
                  .ok());
  EXPECT_TRUE(WriteFileAtomically(
                  torch + "/version.py",
                  absl::StrCat("__version__ = '2.15.0'\ncuda: Optional[str] = '", cuda, "'\n"))
                  .ok());
  return torch;
}

// An installed toolkit of `version` in `store`: a fake nvcc and a manifest.
std::string WriteInstalledToolkit(const std::string& store, const std::string& version) {
  const std::string home = absl::StrCat(store, "/cuda-", version);
  WriteNvcc(home + "/bin/nvcc", version);
  absl::StatusOr<std::string> manifest = ManifestOf(home);
  EXPECT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_TRUE(WriteFileAtomically(home + "/" + kToolkitManifestName, *manifest).ok());
  return home;
}

TEST(CudaReleaseTest, ParsesReleasesAndVersionsAndRefusesTheRest) {
  absl::StatusOr<CudaRelease> release = CudaRelease::Parse("13.2");
  ASSERT_TRUE(release.ok());
  EXPECT_FALSE(release->has_patch());
  absl::StatusOr<CudaRelease> version = CudaRelease::Parse("13.2.86");
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(version->ToString(), "13.2.86");
  EXPECT_EQ(version->MajorMinor(), "13.2");
  EXPECT_TRUE(release->Admits(*version));
  EXPECT_TRUE(version->Admits(*version));
  EXPECT_FALSE(version->Admits(*CudaRelease::Parse("13.2.78")));
  EXPECT_FALSE(release->Admits(*CudaRelease::Parse("13.1.80")));
  EXPECT_TRUE(*CudaRelease::Parse("13.2.78") < *version);
  EXPECT_TRUE(*version < *CudaRelease::Parse("13.10.1"));
  for (const char* bad : {"13", "13.x", "13.2.86.1", "", "../13.2", "13.2.", "99999.1"}) {
    absl::StatusOr<CudaRelease> refused = CudaRelease::Parse(bad);
    EXPECT_FALSE(refused.ok()) << bad;
    if (!refused.ok()) {
      EXPECT_THAT(refused.status().message(), HasSubstr("13.2.86")) << bad;
    }
  }
}

TEST(FrameworkCheckTest, ReadsTorchsVersionFile) {
  std::optional<FrameworkBuild> torch = ParseTorchVersionFile(kTorchVersionFile, "/t");
  ASSERT_TRUE(torch.has_value());
  EXPECT_EQ(torch->version, "2.15.0+cu132");
  EXPECT_EQ(torch->cuda, "13.2");
  EXPECT_EQ(torch->folder, "/t");
  // Older torch writes `cuda = '12.8'`; a CPU build says None.
  EXPECT_EQ(ParseTorchVersionFile("__version__ = '2.7.0'\ncuda = '12.8'\n", "/t")->cuda, "12.8");
  EXPECT_EQ(ParseTorchVersionFile("__version__ = '2.7.0+cpu'\ncuda = None\n", "/t")->cuda, "");
  EXPECT_FALSE(ParseTorchVersionFile("cuda = '12.8'\n", "/t").has_value());
}

TEST(FrameworkCheckTest, FindsTheCommandsPython) {
  const std::string root = testing::NewTempDir("python-of-");
  const std::string bin = root + "/bin";
  WriteProgram(bin + "/python3.11", "#!/bin/sh\n");
  WriteProgram(bin + "/pip", absl::StrCat("#!", bin, "/python3.11\nimport pip\n"));
  // pip's form for an interpreter path too long for #!.
  WriteProgram(bin + "/pip3",
               "#!/bin/sh\n'''exec' \"/very/long/venv/bin/python\" \"$0\" \"$@\"\n' '''\n");
  WriteProgram(bin + "/pip3.11", "#!/usr/bin/env python3.11\n");
  const PythonLookup path{bin, ""};
  EXPECT_EQ(PythonOfCommand({"python3.11", "setup.py", "build_ext"}, path, root),
            bin + "/python3.11");
  EXPECT_EQ(PythonOfCommand({"pip", "install", "."}, path, root), bin + "/python3.11");
  EXPECT_EQ(PythonOfCommand({"pip3", "install", "."}, path, root), "/very/long/venv/bin/python");
  EXPECT_EQ(PythonOfCommand({"pip3.11", "install", "."}, path, root), bin + "/python3.11");
  EXPECT_EQ(
      PythonOfCommand({"uv", "pip", "install", "--python", "/opt/py/bin/python", "."}, path, root),
      "/opt/py/bin/python");
  EXPECT_EQ(PythonOfCommand({"uv", "pip", "install", "."}, PythonLookup{bin, "/venv"}, root),
            "/venv/bin/python");
  EXPECT_EQ(PythonOfCommand({"sh", "-c", "pip install ."}, path, root), "");
  EXPECT_EQ(PythonOfCommand({"make"}, path, root), "");
}

TEST(FrameworkCheckTest, ReadsACMakeBuildsCache) {
  const std::string root = testing::NewTempDir("cmake-cache-");
  ASSERT_TRUE(WriteFileAtomically(root + "/out/CMakeCache.txt",
                                  "// comment\nCMAKE_CUDA_COMPILER:FILEPATH=/opt/cuda/bin/nvcc\n"
                                  "Torch_DIR:PATH=/site/torch/share/cmake/Torch\n")
                  .ok());
  std::optional<CMakeCacheFacts> facts = CMakeCacheOf({"cmake", "--build", "out"}, root);
  ASSERT_TRUE(facts.has_value());
  EXPECT_EQ(facts->folder, root + "/out");
  EXPECT_EQ(facts->cuda_compiler, "/opt/cuda/bin/nvcc");
  EXPECT_EQ(facts->torch_dir, "/site/torch/share/cmake/Torch");
  EXPECT_TRUE(CMakeCacheOf({"ninja", "-C", root + "/out"}, "/").has_value());
  EXPECT_TRUE(CMakeCacheOf({"make"}, root + "/out").has_value());
  EXPECT_FALSE(CMakeCacheOf({"make"}, root).has_value());
  EXPECT_FALSE(CMakeCacheOf({"cmake", "-S", ".", "-B", "out"}, root).has_value());
  EXPECT_EQ(ParseCMakeCache("Torch_DIR:PATH=Torch_DIR-NOTFOUND\n", "/b").torch_dir, "");
}

TEST(ToolkitStoreTest, FindsTheNewestOfAReleaseAndRemovesIt) {
  const std::string store_dir = testing::NewTempDir("toolkits-");
  ToolkitStore store(store_dir);
  EXPECT_THAT(store.List(), IsEmpty());
  WriteInstalledToolkit(store_dir, "13.2.78");
  const std::string newest = WriteInstalledToolkit(store_dir, "13.2.86");
  WriteInstalledToolkit(store_dir, "13.1.80");
  // Not installed: no manifest (an install that died), or no version.
  WriteNvcc(store_dir + "/cuda-13.3.73/bin/nvcc", "13.3.73");
  WriteNvcc(store_dir + "/cuda-latest/bin/nvcc", "13.3.73");
  std::vector<std::string> versions;
  for (const InstalledToolkit& toolkit : store.List()) {
    versions.push_back(toolkit.version.ToString());
  }
  EXPECT_THAT(versions, ElementsAre("13.2.86", "13.2.78", "13.1.80"));
  EXPECT_EQ(store.Find(*CudaRelease::Parse("13.2"))->cuda_home, newest);
  EXPECT_EQ(store.Find(*CudaRelease::Parse("13.2.78"))->version.ToString(), "13.2.78");
  EXPECT_FALSE(store.Find(*CudaRelease::Parse("13.3")).has_value());

  std::ostringstream said;
  absl::StatusOr<std::vector<InstalledToolkit>> removed =
      store.Remove(*CudaRelease::Parse("13.2"), said);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->size(), 2u);
  EXPECT_FALSE(fs::exists(newest));
  EXPECT_EQ(store.List().size(), 1u);
  EXPECT_EQ(store.Remove(*CudaRelease::Parse("13.2"), said).status().code(),
            absl::StatusCode::kNotFound);
  // PyPI has no compiler of CUDA 12: refused before anything is fetched.
  std::ostringstream progress;
  absl::StatusOr<InstalledToolkit> refused =
      store.Install(*CudaRelease::Parse("12.8"), "python3", progress);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              AllOf(HasSubstr("PyPI has no CUDA 12.8 compiler"), HasSubstr("--toolkit")));
  EXPECT_EQ(progress.str(), "");
}

class ChooseBuildToolkitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::NewTempDir("choose-toolkit-");
    WriteNvcc(root_ + "/system/bin/nvcc", "13.0.88");
    request_.nvcc = root_ + "/system/bin/nvcc";
    request_.working_directory = root_;
    request_.toolkit_dir = root_ + "/toolkits";
    request_.python = "python3";
    const char* path = std::getenv("PATH");
    request_.environment = {path != nullptr ? path : "/usr/bin:/bin", ""};
    // The command's Python finds the stand-in torch through PYTHONPATH.
    setenv("PYTHONPATH", (root_ + "/site").c_str(), 1);
  }
  void TearDown() override { unsetenv("PYTHONPATH"); }

  absl::StatusOr<BuildToolkit> Choose(const std::vector<std::string>& command) {
    request_.command = command;
    std::ostringstream progress;
    return ChooseBuildToolkit(request_, progress);
  }

  std::string root_;
  ToolkitRequest request_;
};

TEST_F(ChooseBuildToolkitTest, AnInstalledToolkitOfTorchsReleaseReplacesTheNvcc) {
  WriteTorch(root_ + "/site", "13.2");
  const std::string home = WriteInstalledToolkit(root_ + "/toolkits", "13.2.86");
  absl::StatusOr<BuildToolkit> toolkit = Choose({"python3", "setup.py", "build_ext"});
  ASSERT_TRUE(toolkit.ok()) << toolkit.status();
  EXPECT_EQ(toolkit->nvcc, home + "/bin/nvcc");
  EXPECT_EQ(toolkit->cuda_home, home);
  ASSERT_EQ(toolkit->notes.size(), 1u);
  EXPECT_THAT(toolkit->notes[0],
              AllOf(HasSubstr("torch 2.15.0 was built for CUDA 13.2"),
                    HasSubstr("using CUDA 13.2.86 at " + home),
                    HasSubstr(", not nvcc 13.0 at " + root_ + "/system/bin/nvcc")));
  auto environment = ToolkitEnvironment(*toolkit, "/usr/bin");
  EXPECT_THAT(environment,
              ElementsAre(std::pair<std::string, std::string>{"CUDA_HOME", home},
                          std::pair<std::string, std::string>{"CUDA_PATH", home},
                          std::pair<std::string, std::string>{"CUDACXX", home + "/bin/nvcc"},
                          std::pair<std::string, std::string>{"PATH", home + "/bin:/usr/bin"}));
  // Named by --nvcc, the nvcc stays, with a warning (13.2 and 13.0: a minor).
  request_.nvcc_named = true;
  toolkit = Choose({"python3", "setup.py", "build_ext"});
  ASSERT_TRUE(toolkit.ok()) << toolkit.status();
  EXPECT_EQ(toolkit->nvcc, root_ + "/system/bin/nvcc");
  EXPECT_THAT(toolkit->notes, ElementsAre(HasSubstr("warning: torch 2.15.0")));
}

TEST_F(ChooseBuildToolkitTest, AnotherMajorWithoutAToolkitStopsNamingBothAndTheFix) {
  WriteTorch(root_ + "/site", "12.8");
  absl::StatusOr<BuildToolkit> toolkit =
      Choose({"python3", "-m", "pip", "install", "--no-build-isolation", "."});
  ASSERT_EQ(toolkit.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(toolkit.status().message(),
              AllOf(HasSubstr("was built for CUDA 12.8"),
                    HasSubstr("this build's nvcc is 13.0 (" + root_ + "/system/bin/nvcc)"),
                    HasSubstr("nothing was run"), HasSubstr("PyPI has no CUDA 12.8 compiler"),
                    HasSubstr("--toolkit /usr/local/cuda-12.8")));
  EXPECT_EQ(toolkit.status().message().find('\n'), std::string::npos);
  // A CUDA 13 release PyPI has: the fix is --toolkit auto.
  WriteTorch(root_ + "/site", "14.0");
  toolkit = Choose({"python3", "setup.py", "build_ext"});
  EXPECT_THAT(toolkit.status().message(), HasSubstr("distcc-cuda build --toolkit auto -- "));
}

TEST_F(ChooseBuildToolkitTest, AnotherMinorIsAWarningAndOtherCommandsAreNotChecked) {
  WriteTorch(root_ + "/site", "13.1");
  absl::StatusOr<BuildToolkit> toolkit = Choose({"python3", "setup.py", "build_ext"});
  ASSERT_TRUE(toolkit.ok()) << toolkit.status();
  EXPECT_EQ(toolkit->nvcc, root_ + "/system/bin/nvcc");
  EXPECT_THAT(toolkit->notes,
              ElementsAre(AllOf(HasSubstr("warning: torch 2.15.0"), HasSubstr("CUDA 13.1"),
                                HasSubstr("--toolkit auto"))));
  EXPECT_TRUE(toolkit->cuda_home.empty());
  WriteTorch(root_ + "/site", "12.8");
  toolkit = Choose({"sh", "-c", "true"});
  ASSERT_TRUE(toolkit.ok()) << toolkit.status();
  EXPECT_THAT(toolkit->notes, IsEmpty());
}

TEST_F(ChooseBuildToolkitTest, TheToolkitFlagTakesAReleaseAFolderOrAuto) {
  const std::string home = WriteInstalledToolkit(root_ + "/toolkits", "13.2.86");
  WriteTorch(root_ + "/site", "13.2");
  request_.toolkit = "auto";
  absl::StatusOr<BuildToolkit> toolkit = Choose({"sh", "-c", "true"});  // python3's torch
  ASSERT_TRUE(toolkit.ok()) << toolkit.status();
  EXPECT_EQ(toolkit->cuda_home, home);
  request_.toolkit = "13.2";
  toolkit = Choose({"python3", "setup.py", "build_ext"});
  ASSERT_TRUE(toolkit.ok()) << toolkit.status();
  EXPECT_EQ(toolkit->nvcc, home + "/bin/nvcc");
  request_.toolkit = root_ + "/system";
  toolkit = Choose({"sh", "-c", "true"});
  ASSERT_TRUE(toolkit.ok()) << toolkit.status();
  EXPECT_EQ(toolkit->cuda_home, root_ + "/system");
  EXPECT_THAT(toolkit->notes, ElementsAre(HasSubstr("using CUDA 13.0.88 at " + root_ + "/system")));
  request_.toolkit = root_ + "/nowhere";
  EXPECT_THAT(Choose({"true"}).status().message(), HasSubstr("is neither auto, a CUDA release"));
  // auto with a torch of a release PyPI lacks, not installed.
  WriteTorch(root_ + "/site", "12.8");
  request_.toolkit = "auto";
  EXPECT_THAT(Choose({"python3", "x.py"}).status().message(),
              HasSubstr("PyPI has no CUDA 12.8 compiler"));
  fs::remove_all(root_ + "/site");
  EXPECT_THAT(Choose({"python3", "x.py"}).status().message(), HasSubstr("has no torch"));
}

TEST_F(ChooseBuildToolkitTest, ACMakeCacheFixesTheCompilerSoTheFixIsToReconfigure) {
  const std::string torch = WriteTorch(root_ + "/site", "12.8");
  ASSERT_TRUE(WriteFileAtomically(
                  root_ + "/out/CMakeCache.txt",
                  absl::StrCat("CMAKE_CUDA_COMPILER:FILEPATH=", root_,
                               "/system/bin/nvcc\nTorch_DIR:PATH=", torch, "/share/cmake/Torch\n"))
                  .ok());
  unsetenv("PYTHONPATH");  // the cache's torch, not python3's
  absl::StatusOr<BuildToolkit> toolkit = Choose({"cmake", "--build", "out"});
  ASSERT_EQ(toolkit.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(toolkit.status().message(),
              AllOf(HasSubstr("torch 2.15.0 (" + torch + ") was built for CUDA 12.8"),
                    HasSubstr("nvcc is 13.0")));
  WriteTorch(root_ + "/site", "13.2");
  const std::string home = WriteInstalledToolkit(root_ + "/toolkits", "13.2.86");
  toolkit = Choose({"cmake", "--build", "out"});
  ASSERT_TRUE(toolkit.ok()) << toolkit.status();
  EXPECT_EQ(toolkit->nvcc, root_ + "/system/bin/nvcc");
  EXPECT_THAT(toolkit->notes,
              ElementsAre(HasSubstr("reconfigure " + root_ +
                                    "/out with -DCMAKE_CUDA_COMPILER=" + home + "/bin/nvcc")));
}

TEST_F(ChooseBuildToolkitTest, PipsIsolatedBuildOnlyWarnsForItsTorchMayBeAnother) {
  WriteTorch(root_ + "/site", "12.8");
  absl::StatusOr<BuildToolkit> toolkit = Choose({"python3", "-m", "pip", "install", "."});
  ASSERT_TRUE(toolkit.ok()) << toolkit.status();
  EXPECT_THAT(toolkit->notes, ElementsAre(AllOf(HasSubstr("warning: torch 2.15.0"),
                                                HasSubstr("isolated environment"))));
  EXPECT_TRUE(BuildsInIsolation({"pip", "install", "flash-attn"}));
  EXPECT_TRUE(BuildsInIsolation({"uv", "pip", "install", "."}));
  EXPECT_TRUE(BuildsInIsolation({"python3", "-m", "build"}));
  EXPECT_FALSE(BuildsInIsolation({"pip", "install", "--no-build-isolation", "."}));
  EXPECT_FALSE(BuildsInIsolation({"python3", "-m", "build", "--no-isolation"}));
  EXPECT_FALSE(BuildsInIsolation({"python3", "setup.py", "build_ext"}));
  EXPECT_FALSE(BuildsInIsolation({"pipx", "install", "."}));
}

TEST_F(ChooseBuildToolkitTest, WithoutAnNvccHereAnInstalledToolkitOfTorchsReleaseIsUsed) {
  WriteTorch(root_ + "/site", "13.2");
  request_.nvcc = absl::NotFoundError("no nvcc at /usr/local/cuda/bin/nvcc");
  EXPECT_THAT(Choose({"python3", "setup.py", "build_ext"}).status().message(),
              HasSubstr("no nvcc at"));
  const std::string home = WriteInstalledToolkit(root_ + "/toolkits", "13.2.86");
  absl::StatusOr<BuildToolkit> toolkit = Choose({"python3", "setup.py", "build_ext"});
  ASSERT_TRUE(toolkit.ok()) << toolkit.status();
  EXPECT_EQ(toolkit->cuda_home, home);
}

TEST_F(ChooseBuildToolkitTest, AutoInstallsNothingWhenTheNvccIsTorchsReleaseAlready) {
  WriteTorch(root_ + "/site", "13.0");
  request_.toolkit = "auto";
  // PyPI is never asked: the store is empty and the nvcc is 13.0.
  absl::StatusOr<BuildToolkit> toolkit = Choose({"python3", "setup.py", "build_ext"});
  ASSERT_TRUE(toolkit.ok()) << toolkit.status();
  EXPECT_EQ(toolkit->nvcc, root_ + "/system/bin/nvcc");
  EXPECT_TRUE(toolkit->cuda_home.empty());
  EXPECT_THAT(toolkit->notes, IsEmpty());
}

// pip stood in for by a script (the real PyPI install is in
// tests/e2e/toolkit_test.cc): a failed install leaves nothing behind.
TEST(ToolkitStoreTest, AFailedInstallLeavesNothingBehind) {
  const std::string root = testing::NewTempDir("failed-install-");
  const std::string store_dir = root + "/toolkits";
  ToolkitStore store(store_dir);
  // "python -m pip install ... --target DIR SPECS": fails, having written.
  WriteProgram(root + "/pip-fails",
               "#!/bin/sh\nwhile [ \"$1\" != --target ]; do shift; done\nmkdir -p \"$2/nvidia\"\n"
               "echo 'ERROR: No matching distribution found for cuda-toolkit' >&2\nexit 1\n");
  std::ostringstream progress;
  absl::StatusOr<InstalledToolkit> failed =
      store.Install(*CudaRelease::Parse("13.2"), root + "/pip-fails", progress);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(failed.status().message(),
              AllOf(HasSubstr("No matching distribution found"), HasSubstr("is PyPI reachable")));
  // Wheels without cicc: not a compiler.
  WriteProgram(root + "/pip-partial",
               "#!/bin/sh\nwhile [ \"$1\" != --target ]; do shift; done\n"
               "mkdir -p \"$2/nvidia/cu13/bin\"\ntouch \"$2/nvidia/cu13/bin/nvcc\"\n");
  failed = store.Install(*CudaRelease::Parse("13.2"), root + "/pip-partial", progress);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(failed.status().message(), HasSubstr("lack bin/ptxas"));
  WriteProgram(root + "/no-pip",
               "#!/bin/sh\necho '/usr/bin/python3: No module named pip' >&2\nexit 1\n");
  EXPECT_THAT(
      store.Install(*CudaRelease::Parse("13.2"), root + "/no-pip", progress).status().message(),
      HasSubstr("has no pip"));
  std::vector<std::string> left;
  for (const fs::directory_entry& entry : fs::directory_iterator(store_dir)) {
    left.push_back(entry.path().filename().string());
  }
  EXPECT_THAT(left, ElementsAre("lock"));
  EXPECT_THAT(store.List(), IsEmpty());
}

}  // namespace
}  // namespace distcc_cuda::client
