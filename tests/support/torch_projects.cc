// SPDX-License-Identifier: Apache-2.0
#include "tests/support/torch_projects.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "tests/support/cuda_sources.h"

namespace distcc_cuda::testing {

namespace fs = std::filesystem;

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
  EXPECT_TRUE(WriteFileAtomically(pkg + "/csrc/twice.h", kTwiceHeader).ok());
  EXPECT_TRUE(WriteFileAtomically(pkg + "/csrc/binding.cpp",
                                  absl::StrCat("#include <Python.h>\n", kTinyModule))
                  .ok());
  EXPECT_TRUE(WriteFileAtomically(pkg + "/csrc/scale.cu",
                                  "#include <c10/macros/Macros.h>\n"
                                  "#include <torch/headeronly/version.h>\n#include \"twice.h\"\n"
                                  "__device__ int torch_minor = TORCH_VERSION_MINOR;\n"
                                  "__global__ void scale(float* x) { x[threadIdx.x] = "
                                  "Twice(x[threadIdx.x]) + torch_minor * 0.0f; }\n")
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

std::pair<std::string, std::string> TorchPythonAndUv() {
  const char* python = std::getenv("DISTCC_TORCH_PYTHON");
  const char* uv = std::getenv("DISTCC_UV");
  if (python == nullptr || *python == '\0' || uv == nullptr || *uv == '\0') return {};
  return {fs::absolute(python).string(), fs::absolute(uv).string()};
}

void ExpectImports(const std::string& python, const std::string& target) {
  ProcessSpec imported;
  imported.argv = {python, "-c",
                   absl::StrCat("import sys; sys.path.insert(0, '", target,
                                "'); import torch, tiny_ext; print(tiny_ext.kernels())")};
  absl::StatusOr<ProcessResult> ran = RunProcess(imported);
  ASSERT_TRUE(ran.ok());
  EXPECT_EQ(ran->stdout_text, "2\n") << target << ": " << ran->stderr_text;
}

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

void LinkVenv(const std::string& original, const std::string& venv) {
  fs::create_directories(fs::path(venv).parent_path());
  fs::copy(original, venv,
           fs::copy_options::recursive | fs::copy_options::create_hard_links |
               fs::copy_options::copy_symlinks);
}

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

}  // namespace distcc_cuda::testing
