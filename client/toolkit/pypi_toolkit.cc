// SPDX-License-Identifier: Apache-2.0
#include "client/toolkit/pypi_toolkit.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/process/subprocess.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

// What a CUDA_HOME must hold for nvcc to compile and torch to link.
constexpr const char* kCompilerParts[] = {"bin/nvcc",
                                          "bin/ptxas",
                                          "bin/fatbinary",
                                          "bin/nvlink",
                                          "bin/cudafe++",
                                          "nvvm/bin/cicc",
                                          "include/cuda_runtime.h",
                                          "include/crt/host_config.h",
                                          "include/cuda/std",
                                          "lib"};

// The last `count` lines of `text`, for a message.
std::string LastLines(const std::string& text, size_t count) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
  if (lines.size() > count) lines.erase(lines.begin(), lines.end() - count);
  return absl::StrJoin(lines, " | ");
}

// Where the wheels put the toolkit: nvidia/cu13 for CUDA 13.
absl::StatusOr<std::string> UnpackedToolkit(const std::string& wheels, const CudaRelease& release) {
  const std::string folder = absl::StrCat(wheels, "/nvidia/cu", release.major());
  std::error_code error;
  if (!fs::is_directory(folder, error)) {
    return absl::InternalError(absl::StrCat("PyPI's wheels for CUDA ", release.ToString(),
                                            " did not unpack into ", folder,
                                            "; their layout changed: please report it"));
  }
  // CCCL (cuda/std, cub, thrust) is in include/cccl in the CUDA 13 wheels,
  // where their nvcc looks; NVIDIA's installers put it in include/.
  for (const char* part : kCompilerParts) {
    const std::string path = folder + "/" + part;
    if (fs::exists(path, error)) continue;
    if (std::string(part) == "include/cuda/std" &&
        fs::exists(folder + "/include/cccl/cuda/std", error)) {
      continue;
    }
    return absl::InternalError(absl::StrCat("PyPI's wheels for CUDA ", release.ToString(), " lack ",
                                            part, " (looked in ", folder, ")"));
  }
  return folder;
}

// lib64 beside lib, and the unversioned libcudart.so that -lcudart finds.
absl::Status AddLinkNames(const std::string& cuda_home, const CudaRelease& release) {
  std::error_code error;
  if (!fs::exists(cuda_home + "/lib64", error)) {
    fs::create_directory_symlink("lib", cuda_home + "/lib64", error);
  }
  const std::string versioned = absl::StrCat("libcudart.so.", release.major());
  std::error_code missing;
  if (!error && fs::exists(cuda_home + "/lib/" + versioned, missing) &&
      !fs::exists(cuda_home + "/lib/libcudart.so", missing)) {
    fs::create_symlink(versioned, cuda_home + "/lib/libcudart.so", error);
  }
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot add lib64 and libcudart.so to ", cuda_home, ": ", error.message()));
  }
  return absl::OkStatus();
}

}  // namespace

bool PyPiHasCompiler(const CudaRelease& release) { return release.major() >= 13; }

std::string WhereToGet(const CudaRelease& release) {
  return absl::StrCat(
      "install CUDA ", release.MajorMinor(),
      " from NVIDIA (developer.nvidia.com/cuda-toolkit-archive, or the nvidia/cuda:",
      release.MajorMinor(),
      ".x-devel image) and build with --toolkit FOLDER, e.g. --toolkit "
      "/usr/local/cuda-",
      release.MajorMinor(),
      ", or take it from a cluster that serves it: distcc-cuda toolkit "
      "install ",
      release.MajorMinor(), " --coordinator HOST:PORT (PyPI has no CUDA ", release.MajorMinor(),
      " compiler: its cu12 wheels hold no nvcc)");
}

absl::Status FetchFromPyPi(const CudaRelease& release, const std::string& scratch,
                           const std::string& python) {
  // The cuda-toolkit package pins the parts of one release exactly; a full
  // version picks the cuda-toolkit whose nvcc is that version.
  std::vector<std::string> wanted = {
      absl::StrCat("cuda-toolkit[nvcc,cccl]==", release.MajorMinor(), ".*")};
  if (release.has_patch()) wanted.push_back("nvidia-cuda-nvcc==" + release.ToString());
  const std::string wheels = scratch + "/wheels";
  ProcessSpec pip;
  pip.argv = {python,       "-m",
              "pip",        "install",
              "--quiet",    "--disable-pip-version-check",
              "--no-input", "--only-binary=:all:",
              "--target",   wheels};
  pip.argv.insert(pip.argv.end(), wanted.begin(), wanted.end());
  pip.environment = {{"PIP_ROOT_USER_ACTION", "ignore"}};
  pip.timeout = absl::Minutes(30);
  ASSIGN_OR_RETURN(ProcessResult result, RunProcess(pip));
  if (result.exit_code != 0 && absl::StrContains(result.stderr_text, "No module named pip")) {
    return absl::FailedPreconditionError(
        absl::StrCat(python, " has no pip; name a Python that has one with --python"));
  }
  if (result.exit_code != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "`", absl::StrJoin(pip.argv, " "), "` failed (", DescribeTermination(result),
        "): ", LastLines(result.stderr_text + result.stdout_text, 3),
        "; is PyPI reachable, and is ", release.ToString(), " a CUDA release it has?"));
  }
  ASSIGN_OR_RETURN(std::string unpacked, UnpackedToolkit(wheels, release));
  const std::string cuda_home = scratch + "/cuda";
  std::error_code error;
  fs::rename(unpacked, cuda_home, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot move ", unpacked, " to ", cuda_home, ": ", error.message()));
  }
  RETURN_IF_ERROR(AddLinkNames(cuda_home, release));
  return RemoveAll(wheels);
}

}  // namespace distcc_cuda::client
