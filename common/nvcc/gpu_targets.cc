// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/gpu_targets.h"

#include <filesystem>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/process/subprocess.h"

namespace distcc_cuda {
namespace {

// "sm_100a" -> cubin, 100, 'a'; "compute_90" -> PTX, 90.
struct Image {
  bool ptx = false;
  int number = 0;
  char suffix = '\0';
};

std::optional<Image> ParseImage(absl::string_view name) {
  Image image;
  if (absl::ConsumePrefix(&name, "sm_")) {
    image.ptx = false;
  } else if (absl::ConsumePrefix(&name, "compute_")) {
    image.ptx = true;
  } else {
    return std::nullopt;
  }
  if (!name.empty() && (name.back() == 'a' || name.back() == 'f')) {
    image.suffix = name.back();
    name.remove_suffix(1);
  }
  if (!absl::SimpleAtoi(name, &image.number) || image.number < 10) return std::nullopt;
  return image;
}

std::string Sm(int capability) { return absl::StrCat("sm_", capability); }

// The values of one option in its spellings: "-arch X", "-arch=X".
std::vector<std::string> ValuesOf(const std::vector<std::string>& arguments,
                                  const std::vector<std::string>& spellings) {
  std::vector<std::string> values;
  for (size_t i = 0; i < arguments.size(); ++i) {
    for (const std::string& spelling : spellings) {
      if (arguments[i] == spelling && i + 1 < arguments.size()) {
        values.push_back(arguments[i + 1]);
      } else if (absl::StartsWith(arguments[i], spelling + "=")) {
        values.push_back(arguments[i].substr(spelling.size() + 1));
      }
    }
  }
  return values;
}

// "[sm_100,compute_100]", "\"sm_100,compute_100\"" or "sm_100" -> the names.
std::vector<std::string> CodeList(absl::string_view codes) {
  codes = absl::StripAsciiWhitespace(codes);
  while (!codes.empty() &&
         (codes.front() == '[' || codes.front() == '"' || codes.front() == '\'')) {
    codes.remove_prefix(1);
  }
  while (!codes.empty() && (codes.back() == ']' || codes.back() == '"' || codes.back() == '\'')) {
    codes.remove_suffix(1);
  }
  std::vector<std::string> names;
  for (absl::string_view code : absl::StrSplit(codes, ',', absl::SkipEmpty())) {
    names.emplace_back(absl::StripAsciiWhitespace(code));
  }
  return names;
}

}  // namespace

absl::StatusOr<std::vector<TargetGpu>> ParseTargetGpus(absl::string_view list) {
  std::vector<TargetGpu> gpus;
  for (absl::string_view piece : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    piece = absl::StripAsciiWhitespace(piece);
    absl::string_view number = piece;
    int capability = 0;
    bool ok = false;
    if (absl::ConsumePrefix(&number, "sm_")) {
      ok = absl::SimpleAtoi(number, &capability);
    } else if (size_t dot = number.find('.'); dot != absl::string_view::npos) {
      int major = 0, minor = 0;
      ok = absl::SimpleAtoi(number.substr(0, dot), &major) &&
           absl::SimpleAtoi(number.substr(dot + 1), &minor) && minor >= 0 && minor <= 9;
      capability = major * 10 + minor;
    } else {
      ok = absl::SimpleAtoi(number, &capability);
    }
    if (!ok || capability < 10 || capability > 999) {
      return absl::InvalidArgumentError(
          absl::StrCat("--target-gpus: '", piece,
                       "' is not a GPU architecture; write sm_120, 12.0 or 120 (RTX PRO 6000 "
                       "Blackwell), sm_100 (B200), sm_90 (H100)"));
    }
    gpus.push_back(TargetGpu{Sm(capability), capability});
  }
  return gpus;
}

std::vector<TargetGpu> DetectLocalGpus(const std::string& nvcc) {
  std::vector<TargetGpu> gpus;
  ProcessSpec smi;
  smi.argv = {"nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"};
  smi.timeout = absl::Seconds(20);
  absl::StatusOr<ProcessResult> ran = RunProcess(smi);
  if (ran.ok() && ran->exit_code == 0) {
    for (absl::string_view line : absl::StrSplit(ran->stdout_text, '\n', absl::SkipEmpty())) {
      size_t comma = line.rfind(',');
      if (comma == absl::string_view::npos) continue;
      absl::StatusOr<std::vector<TargetGpu>> parsed =
          ParseTargetGpus(absl::StripAsciiWhitespace(line.substr(comma + 1)));
      if (!parsed.ok() || parsed->size() != 1) continue;
      gpus.push_back(TargetGpu{std::string(absl::StripAsciiWhitespace(line.substr(0, comma))),
                               (*parsed)[0].capability});
    }
    if (!gpus.empty()) return gpus;
  }
  // The toolkit's own query (what -arch=native uses): "100" or "100,120".
  ProcessSpec query;
  query.argv = {(std::filesystem::path(nvcc).parent_path() / "__nvcc_device_query").string()};
  query.timeout = absl::Seconds(20);
  ran = RunProcess(query);
  if (!ran.ok() || ran->exit_code != 0) return gpus;
  std::set<int> seen;
  for (absl::string_view piece :
       absl::StrSplit(ran->stdout_text, absl::ByAnyChar(", \n"), absl::SkipEmpty())) {
    int capability = 0;
    if (absl::SimpleAtoi(piece, &capability) && capability >= 10 &&
        seen.insert(capability).second) {
      gpus.push_back(TargetGpu{absl::StrCat("GPU (", Sm(capability), ")"), capability});
    }
  }
  return gpus;
}

std::optional<std::vector<std::string>> DeviceImagesOf(const std::vector<std::string>& arguments) {
  std::vector<std::string> images;
  for (const std::string& gencode : ValuesOf(arguments, {"-gencode", "--generate-code"})) {
    size_t code = gencode.find("code=", gencode.find(','));
    if (code == std::string::npos) return std::nullopt;
    for (std::string& name : CodeList(gencode.substr(code + 5))) images.push_back(name);
  }
  std::vector<std::string> codes;
  for (const std::string& value : ValuesOf(arguments, {"-code", "--gpu-code"})) {
    for (std::string& name : CodeList(value)) codes.push_back(name);
  }
  for (const std::string& value : ValuesOf(arguments, {"-arch", "--gpu-architecture"})) {
    for (const std::string& arch : CodeList(value)) {
      if (arch == "native" || arch == "all" || arch == "all-major") return std::nullopt;
      if (!codes.empty()) continue;
      // -arch=sm_XY alone is -gencode arch=compute_XY,code=[sm_XY,compute_XY].
      images.push_back(arch);
      if (absl::StartsWith(arch, "sm_")) images.push_back("compute_" + arch.substr(3));
    }
  }
  images.insert(images.end(), codes.begin(), codes.end());
  // LTO IR (lto_XY) is linked later, never loaded.
  images.erase(std::remove_if(images.begin(), images.end(),
                              [](const std::string& name) { return !ParseImage(name); }),
               images.end());
  if (images.empty()) return std::nullopt;  // nvcc's default target: not ours to judge
  std::sort(images.begin(), images.end());
  images.erase(std::unique(images.begin(), images.end()), images.end());
  return images;
}

bool CanLoad(const std::vector<std::string>& images, int capability) {
  const int major = capability / 10, minor = capability % 10;
  for (const std::string& name : images) {
    std::optional<Image> image = ParseImage(name);
    if (!image) continue;
    const int image_major = image->number / 10, image_minor = image->number % 10;
    const bool same_family = image_major == major && image_minor <= minor;
    bool loads = false;
    if (image->suffix == 'a') {
      loads = image->number == capability;
    } else if (!image->ptx || image->suffix == 'f') {
      loads = same_family;
    } else {
      loads = image->number <= capability;  // PTX: compiled by the driver
    }
    if (loads) return true;
  }
  return false;
}

std::vector<std::string> ArchMismatches(const std::vector<std::string>& images,
                                        const std::vector<TargetGpu>& gpus) {
  std::vector<std::string> lines;
  std::vector<std::string> described;
  for (const std::string& name : images) {
    described.push_back(absl::StrCat(name, absl::StartsWith(name, "sm_") ? " cubin" : " PTX"));
  }
  std::set<int> said;
  for (const TargetGpu& gpu : gpus) {
    if (CanLoad(images, gpu.capability) || !said.insert(gpu.capability).second) continue;
    const int c = gpu.capability;
    lines.push_back(absl::StrCat(gpu.name, gpu.name == Sm(c) ? "" : absl::StrCat(" (", Sm(c), ")"),
                                 " cannot load what this build makes (",
                                 absl::StrJoin(described, ", "), "): add ", Sm(c),
                                 " to its targets (nvcc: -gencode arch=compute_", c,
                                 ",code=", Sm(c), "; PyTorch: TORCH_CUDA_ARCH_LIST with ", c / 10,
                                 ".", c % 10, "; flash-attention: FLASH_ATTN_CUDA_ARCHS with ", c,
                                 "; CMake: CMAKE_CUDA_ARCHITECTURES with ", c, ")"));
  }
  return lines;
}

namespace {

std::shared_future<std::vector<TargetGpu>> Known(std::vector<TargetGpu> gpus) {
  std::promise<std::vector<TargetGpu>> known;
  known.set_value(std::move(gpus));
  return known.get_future().share();
}

}  // namespace

ArchCheck::ArchCheck(std::vector<TargetGpu> gpus, bool strict)
    : ArchCheck(Known(std::move(gpus)), strict) {}

absl::StatusOr<std::vector<std::string>> ArchCheck::Check(
    const std::vector<std::string>& arguments) {
  if (!gpus_.valid()) return std::vector<std::string>();  // none said
  const std::vector<TargetGpu>& gpus = gpus_.get();
  if (gpus.empty()) return std::vector<std::string>();
  std::optional<std::vector<std::string>> images = DeviceImagesOf(arguments);
  if (!images) return std::vector<std::string>();
  std::vector<std::string> lines = ArchMismatches(*images, gpus);
  if (strict_ && !lines.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(absl::StrJoin(lines, "; "), " (--strict-arch: nothing is compiled)"));
  }
  absl::MutexLock lock(&mu_);
  std::vector<std::string> fresh;
  for (std::string& line : lines) {
    if (said_.insert(line).second) fresh.push_back(std::move(line));
  }
  return fresh;
}

}  // namespace distcc_cuda
