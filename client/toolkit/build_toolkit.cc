// SPDX-License-Identifier: Apache-2.0
#include "client/toolkit/build_toolkit.h"

#include <filesystem>
#include <optional>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/toolkit/framework_check.h"
#include "client/toolkit/pypi_toolkit.h"
#include "client/toolkit/toolkit_store.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/cuda_release.h"
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
    // The build's nvcc is torch's release already: nothing to install.
    absl::StatusOr<CudaRelease> needed = CudaRelease::Parse(release);
    absl::StatusOr<NvccRelease> said =
        request.nvcc.ok() ? AskNvccRelease(*request.nvcc) : request.nvcc.status();
    absl::StatusOr<CudaRelease> have =
        said.ok() ? CudaRelease::Parse(said->release) : said.status();
    if (needed.ok() && have.ok() && have->SameMajorMinor(*needed)) return std::nullopt;
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

// The compiler a CMake cache fixes, when it is an nvcc ("" otherwise: none,
// or clang).
std::string CMakeNvcc(const Framework& framework) {
  if (!framework.cmake.has_value()) return "";
  const std::string& compiler = framework.cmake->cuda_compiler;
  return fs::path(compiler).filename() == "nvcc" ? compiler : "";
}

bool SameFile(const std::string& a, const std::string& b) {
  std::error_code error;
  return a == b || fs::equivalent(a, b, error);
}

std::string UsingLine(const FrameworkBuild* torch, const Chosen& chosen,
                      const std::string& instead) {
  return absl::StrCat(torch != nullptr ? absl::StrCat("torch ", torch->version,
                                                      " was built for CUDA ", torch->cuda, ": ")
                                       : "",
                      "using CUDA ", chosen.version, " at ", chosen.cuda_home,
                      instead.empty() ? "" : absl::StrCat(", not ", instead),
                      " (CUDA_HOME, CUDA_PATH, CUDACXX, PATH and PYTORCH_NVCC point at it)");
}

// A build's nvcc replaced by the installed toolkit `installed`.
BuildToolkit Switched(const FrameworkBuild* torch, const InstalledToolkit& installed,
                      const std::string& instead) {
  Chosen matching{installed.nvcc(), installed.cuda_home, installed.version.ToString()};
  return BuildToolkit{matching.nvcc, matching.cuda_home, {UsingLine(torch, matching, instead)}};
}

// The build's nvcc, against torch's release `needed`: nothing to say, a
// switch to an installed toolkit, a warning, or a stop.
absl::StatusOr<BuildToolkit> CheckAgainstTorch(const ToolkitRequest& request,
                                               const Framework& framework,
                                               const ToolkitStore& store,
                                               const std::optional<Chosen>& chosen,
                                               const CudaRelease& needed) {
  const FrameworkBuild* torch = &*framework.torch;
  const std::string cmake_nvcc = CMakeNvcc(framework);
  std::optional<InstalledToolkit> installed = store.Find(needed);
  const bool fixed = request.nvcc_named || !cmake_nvcc.empty();
  BuildToolkit build;
  if (chosen.has_value()) {
    build = {chosen->nvcc, chosen->cuda_home, {}};
  } else if (!request.nvcc.ok()) {
    // No nvcc here: an installed toolkit of torch's release will do.
    if (installed.has_value() && cmake_nvcc.empty()) return Switched(torch, *installed, "");
    return request.nvcc.status();
  } else {
    build.nvcc = *request.nvcc;
  }
  // What the build compiles with: a configured CMake build, its cache's.
  const std::string compiles = !chosen.has_value() && !cmake_nvcc.empty() ? cmake_nvcc : build.nvcc;
  ASSIGN_OR_RETURN(NvccRelease said, AskNvccRelease(compiles));
  ASSIGN_OR_RETURN(CudaRelease have, CudaRelease::Parse(said.release));
  if (have.SameMajorMinor(needed)) {
    if (chosen.has_value()) build.notes.push_back(UsingLine(torch, *chosen, ""));
    return build;
  }
  const std::string named = absl::StrCat("nvcc ", said.release, " at ", compiles);
  if (installed.has_value() && !chosen.has_value() && !fixed) {
    return Switched(torch, *installed, named);
  }
  const std::string mismatch = absl::StrCat(
      "torch ", torch->version, " (", torch->folder, ") was built for CUDA ", needed.MajorMinor(),
      ", but this build's nvcc is ", said.release, " (", compiles, ")");
  const std::string fix = FixFor(needed, framework, store, request.command);
  // pip and uv may build against another torch, in an environment of their own.
  const bool isolated = BuildsInIsolation(request.command);
  if (needed.major() != have.major() && !isolated) {
    return absl::FailedPreconditionError(absl::StrCat(
        mismatch, ", and torch refuses another major release: nothing was run. To fix it, ", fix));
  }
  build.notes.push_back(absl::StrCat(
      "warning: ", mismatch,
      isolated ? " (the command builds in an isolated environment, whose torch may be another)"
               : "; torch only warns about another minor release",
      ". To build with ", needed.MajorMinor(), ", ", fix));
  return build;
}

}  // namespace

absl::StatusOr<BuildToolkit> ChooseBuildToolkit(const ToolkitRequest& request,
                                                std::ostream& progress) {
  ASSIGN_OR_RETURN(Framework framework, FrameworkOf(request));
  ToolkitStore store(request.toolkit_dir);
  ASSIGN_OR_RETURN(std::optional<Chosen> chosen,
                   ExplicitToolkit(request, framework, store, progress));
  const std::string cmake_nvcc = CMakeNvcc(framework);
  if (chosen.has_value() && !cmake_nvcc.empty() && !SameFile(cmake_nvcc, chosen->nvcc)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the CMake build in ", framework.cmake->folder, " is configured with ", cmake_nvcc,
        ", and --toolkit cannot change a configured build: reconfigure it with "
        "-DCMAKE_CUDA_COMPILER=",
        chosen->nvcc));
  }
  absl::StatusOr<CudaRelease> needed = framework.torch.has_value()
                                           ? CudaRelease::Parse(framework.torch->cuda)
                                           : absl::NotFoundError("no torch");
  if (needed.ok()) return CheckAgainstTorch(request, framework, store, chosen, *needed);
  if (!chosen.has_value()) {
    ASSIGN_OR_RETURN(std::string nvcc, request.nvcc);
    return BuildToolkit{nvcc, "", {}};
  }
  return BuildToolkit{chosen->nvcc, chosen->cuda_home, {UsingLine(nullptr, *chosen, "")}};
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
