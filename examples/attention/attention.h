// SPDX-License-Identifier: Apache-2.0
//
// C++ declarations of the attention instantiation set. Include this (not
// attention_kernels.cuh) to call instantiations that are compiled in other
// translation units: it declares the launcher template without defining it,
// so calling RunAttentionForward<...> here leaves an external reference that
// the linker resolves against the generated instantiation units.

#ifndef DISTCC_CUDA_EXAMPLES_ATTENTION_ATTENTION_H_
#define DISTCC_CUDA_EXAMPLES_ATTENTION_ATTENTION_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "attention_api.h"

// Short names used by the instantiation text of kernels.toml, e.g.
// RunAttentionForward<bf16, 128, true>.
using fp16 = half;
using bf16 = __nv_bfloat16;

// Enqueues forward attention for element type T (fp16 or bf16), head
// dimension kHeadDim (a multiple of 32, at most 256) and mask kCausal on
// `stream`; see attention_forward() in attention_api.h for the tensor layout,
// the mask and the returned codes. Defined in attention_kernels.cuh and
// explicitly instantiated, one combination per compile unit.
template <typename T, int kHeadDim, bool kCausal>
cudaError_t RunAttentionForward(const AttentionParams& params, cudaStream_t stream);

#endif  // DISTCC_CUDA_EXAMPLES_ATTENTION_ATTENTION_H_
