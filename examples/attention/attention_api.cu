// SPDX-License-Identifier: Apache-2.0
//
// The C entry points of the attention extension. This unit only dispatches:
// it includes the declarations in attention.h, never attention_kernels.cuh, so
// every RunAttentionForward<...> below is an external reference that the link
// resolves against the 24 generated instantiation units (kernels.toml).

#include <cuda_runtime_api.h>

#include "attention.h"
#include "attention_api.h"

#define ATTENTION_STRINGIFY_IMPL(x) #x
#define ATTENTION_STRINGIFY(x) ATTENTION_STRINGIFY_IMPL(x)

namespace {

constexpr char kVersion[] =
    "distcc-cuda attention example 1.0 (fp16,bf16 x head_dim "
    "32,64,96,128,192,256 x causal,non-causal; built with CUDA "
    "runtime " ATTENTION_STRINGIFY(CUDART_VERSION) ")";

// Must agree with the axes in kernels.toml: a combination dispatched here but
// missing from the manifest fails the link with an undefined reference.
template <typename T, bool kCausal>
cudaError_t DispatchHeadDim(int head_dim, const AttentionParams& params, cudaStream_t stream) {
  switch (head_dim) {
    case 32:
      return RunAttentionForward<T, 32, kCausal>(params, stream);
    case 64:
      return RunAttentionForward<T, 64, kCausal>(params, stream);
    case 96:
      return RunAttentionForward<T, 96, kCausal>(params, stream);
    case 128:
      return RunAttentionForward<T, 128, kCausal>(params, stream);
    case 192:
      return RunAttentionForward<T, 192, kCausal>(params, stream);
    case 256:
      return RunAttentionForward<T, 256, kCausal>(params, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t DispatchCausal(int head_dim, bool causal, const AttentionParams& params,
                           cudaStream_t stream) {
  return causal ? DispatchHeadDim<T, true>(head_dim, params, stream)
                : DispatchHeadDim<T, false>(head_dim, params, stream);
}

}  // namespace

extern "C" int attention_forward(int dtype, int head_dim, int causal, const AttentionParams* params,
                                 cudaStream_t stream) {
  if (params == nullptr) return cudaErrorInvalidValue;
  switch (dtype) {
    case kAttentionDtypeFp16:
      return DispatchCausal<fp16>(head_dim, causal != 0, *params, stream);
    case kAttentionDtypeBf16:
      return DispatchCausal<bf16>(head_dim, causal != 0, *params, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

extern "C" const char* attention_version(void) { return kVersion; }
