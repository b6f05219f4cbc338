// SPDX-License-Identifier: Apache-2.0
#include "client/plan/link_step.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"

namespace distcc_cuda::client {

absl::StatusOr<CudaRuntime> ParseCudaRuntime(const std::string& text) {
  if (text == "shared") return CudaRuntime::kShared;
  if (text == "static") return CudaRuntime::kStatic;
  if (text == "none") return CudaRuntime::kNone;
  return absl::InvalidArgumentError(absl::StrCat(
      "cudart = \"", text,
      "\" is not one of \"shared\" (libcudart.so, as PyTorch extensions need), \"static\" or "
      "\"none\""));
}

absl::StatusOr<LinkRecipe> ParseLinkCommand(const std::string& text) {
  LinkRecipe recipe;
  recipe.command = absl::StrSplit(text, ' ', absl::SkipEmpty());
  if (recipe.command.empty()) {
    return absl::InvalidArgumentError(
        "--link-command is empty; give the link as you would run it, e.g. "
        "--link-command='g++ -shared {objects} -L/usr/local/cuda/lib64 -lcudart -o {output}'");
  }
  auto count = [&](const std::string& word) {
    return std::count(recipe.command.begin(), recipe.command.end(), word);
  };
  if (count("{objects}") != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--link-command must hold {objects} once, as a word of its own, where the objects go; "
        "got: ",
        text));
  }
  if (count("{output}") > 1) {
    return absl::InvalidArgumentError("--link-command holds {output} more than once");
  }
  if (count("{output}") == 0) {
    recipe.command.push_back("-o");
    recipe.command.push_back("{output}");
  }
  return recipe;
}

std::string CudaLibraryFolder(const std::string& nvcc) {
  std::filesystem::path toolkit =
      std::filesystem::path(AbsolutePath(nvcc)).parent_path().parent_path();
  std::string lib64 = (toolkit / "lib64").string();
  if (std::filesystem::is_directory(lib64)) return lib64;
  return (toolkit / "targets" / "x86_64-linux" / "lib").string();
}

std::vector<std::string> LinkArguments(const LinkRecipe& recipe,
                                       const std::vector<std::string>& objects,
                                       const std::string& output, const std::string& nvcc) {
  std::vector<std::string> argv;
  if (!recipe.command.empty()) {
    for (const std::string& word : recipe.command) {
      if (word == "{objects}") {
        argv.insert(argv.end(), objects.begin(), objects.end());
      } else if (word == "{output}") {
        argv.push_back(output);
      } else {
        argv.push_back(word);
      }
    }
    return argv;
  }
  const bool with_nvcc = recipe.linker == "nvcc";
  argv = {with_nvcc ? nvcc : recipe.linker, "-shared"};
  if (with_nvcc) {
    argv.push_back("-cudart");
    argv.push_back(recipe.cudart == CudaRuntime::kShared   ? "shared"
                   : recipe.cudart == CudaRuntime::kStatic ? "static"
                                                           : "none");
  }
  if (!recipe.soname.empty()) {
    argv.push_back(with_nvcc ? absl::StrCat("-Xlinker=-soname,", recipe.soname)
                             : absl::StrCat("-Wl,-soname,", recipe.soname));
  }
  argv.insert(argv.end(), recipe.flags.begin(), recipe.flags.end());
  argv.insert(argv.end(), objects.begin(), objects.end());
  for (const std::string& folder : recipe.library_dirs) argv.push_back("-L" + folder);
  if (!with_nvcc && recipe.cudart != CudaRuntime::kNone) {
    argv.push_back("-L" + CudaLibraryFolder(nvcc));
    if (recipe.cudart == CudaRuntime::kShared) {
      argv.push_back("-lcudart");
    } else {
      for (const char* library : {"-lcudart_static", "-ldl", "-lrt", "-lpthread"}) {
        argv.push_back(library);
      }
    }
  }
  for (const std::string& library : recipe.libraries) argv.push_back("-l" + library);
  argv.push_back("-o");
  argv.push_back(output);
  return argv;
}

std::string DescribeLink(const std::vector<std::string>& argv,
                         const std::vector<std::string>& objects) {
  std::vector<std::string> words;
  bool counted = false;
  for (const std::string& word : argv) {
    if (std::find(objects.begin(), objects.end(), word) != objects.end()) {
      if (!counted) words.push_back(absl::StrCat("[", objects.size(), " objects]"));
      counted = true;
      continue;
    }
    words.push_back(word);
  }
  return absl::StrJoin(words, " ");
}

}  // namespace distcc_cuda::client
