// SPDX-License-Identifier: Apache-2.0
// Which GPUs can load what a compile makes: the device images its -gencode,
// -arch and -code options ask for (cubins and PTX), the GPUs of this machine
// (nvidia-smi, or the toolkit's __nvcc_device_query) or named by the user,
// and the check between them. RTX PRO 6000 Blackwell cards are sm_120: a
// build for sm_100 alone (TORCH_CUDA_ARCH_LIST=10.0) cannot run on them.
#pragma once

#include <future>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace distcc_cuda {

// A GPU that will load the result.
struct TargetGpu {
  std::string name;    // "NVIDIA RTX PRO 6000 Blackwell Server Edition", or "sm_120"
  int capability = 0;  // major * 10 + minor: 120 for compute capability 12.0
};

// "sm_120,10.0,90" -> the GPUs of those capabilities (sm_XY, compute
// capability X.Y, or XY). INVALID_ARGUMENT naming a piece of another form.
absl::StatusOr<std::vector<TargetGpu>> ParseTargetGpus(absl::string_view list);

// The GPUs of this machine: `nvidia-smi --query-gpu=name,compute_cap` (from
// PATH), else `__nvcc_device_query` beside `nvcc`. Empty when neither
// answers (no GPU, no driver): nothing to check against.
std::vector<TargetGpu> DetectLocalGpus(const std::string& nvcc);

// The device images a compile with these nvcc arguments puts in its object:
// "sm_100" (a cubin), "compute_100" (PTX), with any a/f suffix. nullopt
// when the arguments do not say (-arch=native, all, all-major).
std::optional<std::vector<std::string>> DeviceImagesOf(const std::vector<std::string>& arguments);

// Whether a GPU of `capability` can run one of `images`: a cubin of its
// major version and no higher minor (sm_XYa only on exactly XY), or PTX of
// no higher capability, which the driver compiles at load time (compute_XYa
// only on XY, compute_XYf only within the major version).
bool CanLoad(const std::vector<std::string>& images, int capability);

// One line per GPU of `gpus` that can load none of `images`, naming the GPU
// and what to add (for nvcc, PyTorch, flash-attention and CMake). Empty when
// every GPU can load the build.
std::vector<std::string> ArchMismatches(const std::vector<std::string>& images,
                                        const std::vector<TargetGpu>& gpus);

// The check a build runs on each compile's arguments before it compiles:
// warns once per GPU and set of images; with `strict`, refuses.
class ArchCheck {
 public:
  ArchCheck(std::vector<TargetGpu> gpus, bool strict);
  // The GPUs as they become known: the first Check waits for them (the
  // local GPUs' detection, nvidia-smi among it, runs beside the build's
  // start instead of before it). An empty future: none.
  ArchCheck(std::shared_future<std::vector<TargetGpu>> gpus, bool strict)
      : gpus_(std::move(gpus)), strict_(strict) {}

  // The warnings not said before for a compile with `arguments` (nvcc's).
  // With `strict`, FAILED_PRECONDITION carrying them whenever a GPU cannot
  // load what the compile makes. Thread-safe.
  absl::StatusOr<std::vector<std::string>> Check(const std::vector<std::string>& arguments);

 private:
  const std::shared_future<std::vector<TargetGpu>> gpus_;
  const bool strict_;
  absl::Mutex mu_;
  std::set<std::string> said_ ABSL_GUARDED_BY(mu_);
};

}  // namespace distcc_cuda
