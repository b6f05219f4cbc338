// SPDX-License-Identifier: Apache-2.0
#include "client/toolkit/build_toolkit.h"

#include <filesystem>
#include <optional>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/toolkit/cuda_release.h"
#include "client/toolkit/framework_check.h"
#include "client/toolkit/pypi_toolkit.h"
#include "client/toolkit/toolkit_store.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/toolchain.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

// The framework a build is for, and where it was found.
struct Framework {
  std::optional<FrameworkBuild> torch;
  std::optional<CMakeCacheFacts> cmake;
  std::string python;  // whose torch it is ("" for a CMake cache's)
};

// A toolkit that replaces the build's nvcc.
struct Chosen {
  std::string nvcc;
  std::string cuda_home;
  std::string version;  // "13.2.86", for messages
};

absl::StatusOr<Framework> FrameworkOf(const ToolkitRequest& request) {
  const PythonLookup& environment = request.environment;
  Framework framework;
  framework.cmake = CMakeCacheOf(request.command, request.working_directory);
  if (framework.cmake.has_value() && !framework.cmake->torch_dir.empty()) {
    // Torch_DIR is torch/share/cmake/Torch.
    framework.torch = TorchIn(
        fs::path(framework.cmake->torch_dir).parent_path().parent_path().parent_path().string());
    return framework;
  }
  framework.python = PythonOfCommand(request.command, environment, request.working_directory);
  if (framework.python.empty() && request.toolkit == "auto") {
    framework.python = PythonOfCommand({"python3"}, environment, request.working_directory);
  }
  if (framework.python.empty()) return framework;
  absl::StatusOr<std::optional<FrameworkBuild>> torch =
      TorchOf(framework.python, request.working_directory);
  // A Python that cannot run fails the command itself, saying why.
  if (!torch.ok() && request.toolkit == "auto") return torch.status();
  if (torch.ok()) framework.torch = *torch;
  return framework;
}

// --toolkit FOLDER or --toolkit NVCC.
absl::StatusOr<Chosen> ToolkitAt(const std::string& named, const std::string& working_directory) {
  const std::string path = AbsolutePath(named, working_directory);
  std::error_code error;
  const bool folder = fs::is_directory(path, error);
  const std::string nvcc = folder ? path + "/bin/nvcc" : path;
  if (!IsExecutableFile(nvcc)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--toolkit ", named,
                     " is neither auto, a CUDA release (13.2, 13.2.86), a CUDA folder "
                     "with bin/nvcc, nor an nvcc"));
  }
  ASSIGN_OR_RETURN(NvccRelease said, AskNvccRelease(nvcc));
  const std::string home = folder ? path : fs::path(nvcc).parent_path().parent_path().string();
  return Chosen{nvcc, home, said.version.empty() ? said.release : said.version};
}

// The toolkit --toolkit names, installed from PyPI when it is a release not
// installed yet; nullopt without --toolkit.
absl::StatusOr<std::optional<Chosen>> ExplicitToolkit(const ToolkitRequest& request,
                                                      const Framework& framework,
                                                      ToolkitStore& store, std::ostream& progress) {
  if (request.toolkit.empty()) return std::nullopt;
  std::string release = request.toolkit;
  if (request.toolkit == "auto") {
    if (!framework.torch.has_value() || framework.torch->cuda.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--toolkit auto builds with the CUDA release torch was built with, but ",
          !framework.torch.has_value()
              ? absl::StrCat(framework.python.empty() ? "the command" : framework.python,
                             " has no torch")
              : absl::StrCat("torch ", framework.torch->version, " is not a CUDA build"),
          "; name the release instead (--toolkit 13.2)"));
    }
    release = framework.torch->cuda;
  }
  absl::StatusOr<CudaRelease> wanted = CudaRelease::Parse(release);
  if (!wanted.ok()) return ToolkitAt(request.toolkit, request.working_directory);
  std::optional<InstalledToolkit> toolkit = store.Find(*wanted);
  if (!toolkit.has_value()) {
    ASSIGN_OR_RETURN(toolkit, store.Install(*wanted, request.python, progress));
  }
  return Chosen{toolkit->nvcc(), toolkit->cuda_home, toolkit->version.ToString()};
}

// What to run so that the build gets CUDA `needed`.
std::string FixFor(const CudaRelease& needed, const Framework& framework, const ToolkitStore& store,
                   const std::vector<std::string>& command) {
  const bool fixed_by_cmake =
      framework.cmake.has_value() && !framework.cmake->cuda_compiler.empty();
  if (fixed_by_cmake) {
    std::optional<InstalledToolkit> installed = store.Find(needed);
    if (installed.has_value()) {
      return absl::StrCat("reconfigure ", framework.cmake->folder,
                          " with -DCMAKE_CUDA_COMPILER=", installed->nvcc());
    }
    if (!PyPiHasCompiler(needed)) return WhereToGet(needed);
    return absl::StrCat(
        "run `distcc-cuda toolkit install ", needed.MajorMinor(), "` and reconfigure ",
        framework.cmake->folder,
        " with -DCMAKE_CUDA_COMPILER=FOLDER/bin/nvcc, FOLDER the line it prints last");
  }
  if (!PyPiHasCompiler(needed)) return WhereToGet(needed);
  const std::string words = absl::StrJoin(command, " ");
  return absl::StrCat("run `distcc-cuda build --toolkit auto -- ",
                      words.size() <= 100 ? words : "...", "` (it installs CUDA ",
                      needed.MajorMinor(), "'s compiler from PyPI once, then builds with it)");
}

// The nvcc the build uses unless a toolkit replaces it.
absl::StatusOr<std::string> BuildNvcc(const ToolkitRequest& request, const Framework& framework,
                                      const std::optional<Chosen>& chosen) {
  const std::string cmake_nvcc = framework.cmake.has_value() ? framework.cmake->cuda_compiler : "";
  if (chosen.has_value() && !cmake_nvcc.empty() && AbsolutePath(cmake_nvcc) != chosen->nvcc) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the CMake build in ", framework.cmake->folder, " is configured with ", cmake_nvcc,
        ", and --toolkit cannot change a configured build: reconfigure it with "
        "-DCMAKE_CUDA_COMPILER=",
        chosen->nvcc));
  }
  if (chosen.has_value()) return chosen->nvcc;
  if (!cmake_nvcc.empty()) return cmake_nvcc;
  return request.nvcc;
}

std::string UsingLine(const FrameworkBuild* torch, const Chosen& chosen,
                      const std::string& instead) {
  return absl::StrCat(torch != nullptr ? absl::StrCat("torch ", torch->version,
                                                      " was built for CUDA ", torch->cuda, ": ")
                                       : "",
                      "building with CUDA ", chosen.version, " (", chosen.cuda_home, ")",
                      instead.empty() ? "" : absl::StrCat(" instead of ", instead),
                      " as CUDA_HOME, PATH and PYTORCH_NVCC");
}

}  // namespace

absl::StatusOr<BuildToolkit> ChooseBuildToolkit(const ToolkitRequest& request,
                                                std::ostream& progress) {
  ASSIGN_OR_RETURN(Framework framework, FrameworkOf(request));
  ToolkitStore store(request.toolkit_dir);
  ASSIGN_OR_RETURN(std::optional<Chosen> chosen,
                   ExplicitToolkit(request, framework, store, progress));
  BuildToolkit build;
  ASSIGN_OR_RETURN(build.nvcc, BuildNvcc(request, framework, chosen));
  if (chosen.has_value()) build.cuda_home = chosen->cuda_home;
  const FrameworkBuild* torch = framework.torch.has_value() ? &*framework.torch : nullptr;
  absl::StatusOr<CudaRelease> needed =
      torch != nullptr ? CudaRelease::Parse(torch->cuda) : absl::NotFoundError("no torch");
  if (!needed.ok()) {
    if (chosen.has_value()) build.notes.push_back(UsingLine(nullptr, *chosen, ""));
    return build;
  }
  ASSIGN_OR_RETURN(NvccRelease said, AskNvccRelease(build.nvcc));
  ASSIGN_OR_RETURN(CudaRelease have, CudaRelease::Parse(said.release));
  if (have.SameMajorMinor(*needed)) {
    if (chosen.has_value()) build.notes.push_back(UsingLine(torch, *chosen, ""));
    return build;
  }
  const std::string nvcc_named = absl::StrCat("nvcc ", said.release, " (", build.nvcc, ")");
  const bool fixed = request.nvcc_named ||
                     (framework.cmake.has_value() && !framework.cmake->cuda_compiler.empty());
  if (std::optional<InstalledToolkit> installed = store.Find(*needed);
      installed.has_value() && !chosen.has_value() && !fixed) {
    Chosen matching{installed->nvcc(), installed->cuda_home, installed->version.ToString()};
    build.nvcc = matching.nvcc;
    build.cuda_home = matching.cuda_home;
    build.notes.push_back(UsingLine(torch, matching, nvcc_named));
    return build;
  }
  const std::string mismatch = absl::StrCat(
      "torch ", torch->version, " (", torch->folder, ") was built for CUDA ", needed->MajorMinor(),
      ", but this build's nvcc is ", said.release, " (", build.nvcc, ")");
  if (needed->major() != have.major()) {
    return absl::FailedPreconditionError(
        absl::StrCat(mismatch,
                     ", and torch refuses another major release: nothing was run. To "
                     "fix it, ",
                     FixFor(*needed, framework, store, request.command)));
  }
  build.notes.push_back(absl::StrCat("warning: ", mismatch,
                                     "; torch only warns about another minor release. To build "
                                     "with ",
                                     needed->MajorMinor(), ", ",
                                     FixFor(*needed, framework, store, request.command)));
  return build;
}

std::vector<std::pair<std::string, std::string>> ToolkitEnvironment(const BuildToolkit& toolkit,
                                                                    const std::string& path) {
  if (toolkit.cuda_home.empty()) return {};
  const std::string bin = toolkit.cuda_home + "/bin";
  return {{"CUDA_HOME", toolkit.cuda_home},
          {"CUDA_PATH", toolkit.cuda_home},
          {"CUDACXX", toolkit.nvcc},
          {"PATH", path.empty() ? bin : absl::StrCat(bin, ":", path)}};
}

}  // namespace distcc_cuda::client
