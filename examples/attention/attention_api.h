// SPDX-License-Identifier: Apache-2.0
//
// C interface of the example attention extension (libattention_sm100.so).
// Usable from C, C++ and FFI layers such as Python ctypes; it needs only the
// CUDA runtime API header for cudaStream_t.

#ifndef DISTCC_CUDA_EXAMPLES_ATTENTION_ATTENTION_API_H_
#define DISTCC_CUDA_EXAMPLES_ATTENTION_ATTENTION_API_H_

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

// Element types accepted by attention_forward().
enum AttentionDtype {
  kAttentionDtypeFp16 = 0,  // IEEE half (__half)
  kAttentionDtypeBf16 = 1,  // bfloat16 (__nv_bfloat16)
};

// One forward attention problem. All tensors are dense, device-resident and
// laid out as [batch, seqlen, heads, head_dim] (head_dim contiguous), with the
// element type chosen at dispatch. q and o have seqlen_q rows, k and v have
// seqlen_k rows. o must not alias q, k or v.
typedef struct AttentionParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  int batch;     // >= 0, at most 65535
  int heads;     // >= 0, at most 65535
  int seqlen_q;  // >= 0
  int seqlen_k;  // >= 0
  float scale;   // softmax scale applied to QK^T, usually 1/sqrt(head_dim)
} AttentionParams;

// Computes o = softmax(scale * q k^T [+ causal mask]) v on `stream`, with
// float accumulation. dtype is an AttentionDtype; head_dim is one of 32, 64,
// 96, 128, 192, 256; causal is 0 or non-zero. The causal mask is aligned to
// the bottom-right corner: query i sees key j iff j <= i + seqlen_k - seqlen_q;
// a query row that sees no key gets zeros. Returns a cudaError_t as int:
// cudaSuccess (0) once the kernel is enqueued (or when there is nothing to
// do), cudaErrorInvalidValue for a null `params`, an unsupported
// dtype/head_dim or bad params, cudaErrorInvalidConfiguration when batch or
// heads exceed the grid limit, or the launch error otherwise. Asynchronous:
// kernel execution errors surface on later synchronisation.
int attention_forward(int dtype, int head_dim, int causal, const AttentionParams* params,
                      cudaStream_t stream);

// Returns a static, NUL-terminated string naming this library, its
// instantiation set and the CUDA runtime it was built against. Never NULL.
const char* attention_version(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // DISTCC_CUDA_EXAMPLES_ATTENTION_ATTENTION_API_H_
