// SPDX-License-Identifier: Apache-2.0
//
// Definitions of the attention instantiation set: the forward kernel template
// and the body of the RunAttentionForward launcher declared in attention.h.
// Include this only in compile units that instantiate the launcher; each
// generated unit is this include plus one explicit instantiation, e.g.
//
//   #include "attention_kernels.cuh"
//   template cudaError_t RunAttentionForward<bf16, 128, true>(
//       const AttentionParams&, cudaStream_t);
//
// The kernel is deliberately simple (a few seconds of nvcc per unit): one warp
// per query row, keys streamed through shared memory in tiles of 32 (one key
// per lane for QK^T, one head dimension slice per lane for PV), online softmax
// in the exp2 domain, float accumulation throughout.

#ifndef DISTCC_CUDA_EXAMPLES_ATTENTION_ATTENTION_KERNELS_CUH_
#define DISTCC_CUDA_EXAMPLES_ATTENTION_ATTENTION_KERNELS_CUH_

#ifndef __CUDACC__
#error "attention_kernels.cuh needs nvcc; host code includes attention.h"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attention.h"

namespace attention_internal {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarpMask = 0xffffffffu;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
// Query rows per block: one per warp.
constexpr int kBlockM = kWarps;
// Keys per shared-memory tile: one per lane when computing scores.
constexpr int kBlockN = kWarpSize;
// Largest gridDim.y / gridDim.z, which carry heads and batch.
constexpr int kMaxGridYZ = 65535;
constexpr float kLog2e = 1.4426950408889634f;

// Conversions spelled with intrinsics rather than the implicit operators, which
// builds defining __CUDA_NO_HALF_CONVERSIONS__ (e.g. PyTorch's) turn off.
template <typename T>
struct Numeric;

template <>
struct Numeric<half> {
  static __device__ __forceinline__ float ToFloat(half x) { return __half2float(x); }
  static __device__ __forceinline__ half FromFloat(float x) { return __float2half_rn(x); }
};

template <>
struct Numeric<__nv_bfloat16> {
  static __device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 FromFloat(float x) {
    return __float2bfloat16_rn(x);
  }
};

__device__ __forceinline__ float WarpMax(float x) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    x = fmaxf(x, __shfl_xor_sync(kFullWarpMask, x, offset));
  }
  return x;
}

__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    x += __shfl_xor_sync(kFullWarpMask, x, offset);
  }
  return x;
}

// Grid: (ceil(seqlen_q / kBlockM), heads, batch); block: kThreads.
// scale_log2 is the softmax scale times log2(e), so that exp2f can be used.
template <typename T, int kHeadDim, bool kCausal>
__global__ void __launch_bounds__(kThreads)
    AttentionForwardKernel(const T* __restrict__ q, const T* __restrict__ k,
                           const T* __restrict__ v, T* __restrict__ o, int heads, int seqlen_q,
                           int seqlen_k, float scale_log2) {
  static_assert(kHeadDim > 0 && kHeadDim % kWarpSize == 0 && kHeadDim <= 256,
                "kHeadDim must be a multiple of 32 in [32, 256]");
  static_assert(sizeof(T) == 2, "T must be a 16-bit type (fp16 or bf16)");
  constexpr int kDimsPerLane = kHeadDim / kWarpSize;
  // Padding by one 32-bit word makes the tile's row stride an odd number of
  // words, so the 32 lanes reading column d of 32 different key rows (QK^T)
  // hit 32 different banks.
  constexpr int kTileStride = kHeadDim + 2;

  // At kHeadDim = 256: 4 KiB + 2 * 16.1 KiB = 37120 bytes (ptxas -v), under
  // the 48 KiB static limit.
  __shared__ float q_tile[kBlockM][kHeadDim];
  __shared__ T k_tile[kBlockN][kTileStride];
  __shared__ T v_tile[kBlockN][kTileStride];

  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int row_begin = blockIdx.x * kBlockM;
  const int row = row_begin + warp;
  // Uniform across a warp, so warp collectives below may sit under it.
  const bool row_valid = row < seqlen_q;
  // Bottom-right aligned causal mask: query i sees key j iff j <= i + diag.
  const int diag = seqlen_k - seqlen_q;

  // [batch, seqlen, heads, head_dim]: consecutive positions are heads *
  // kHeadDim elements apart.
  const int64_t pos_stride = static_cast<int64_t>(heads) * kHeadDim;
  const int64_t q_base = (static_cast<int64_t>(batch) * seqlen_q * heads + head) * kHeadDim;
  const int64_t kv_base = (static_cast<int64_t>(batch) * seqlen_k * heads + head) * kHeadDim;

  for (int d = lane; d < kHeadDim; d += kWarpSize) {
    q_tile[warp][d] =
        row_valid ? Numeric<T>::ToFloat(q[q_base + row * pos_stride + d]) * scale_log2 : 0.0f;
  }

  // Keys past key_end are hidden from every row of this block.
  int key_end = seqlen_k;
  if (kCausal) {
    const int last_row = min(row_begin + kBlockM, seqlen_q) - 1;
    key_end = max(0, min(seqlen_k, last_row + diag + 1));
  }

  float acc[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) acc[i] = 0.0f;
  float row_max = -INFINITY;  // running max of scores, log2 domain
  float row_sum = 0.0f;       // running sum of exp2(score - row_max)

  for (int tile_begin = 0; tile_begin < key_end; tile_begin += kBlockN) {
    // Hidden keys are zero-filled: their probability is 0, and 0 * garbage
    // from uninitialised shared memory could be NaN.
    for (int idx = threadIdx.x; idx < kBlockN * kHeadDim; idx += kThreads) {
      const int j = idx / kHeadDim;
      const int d = idx % kHeadDim;
      const int key = tile_begin + j;
      T k_val = Numeric<T>::FromFloat(0.0f);
      T v_val = k_val;
      if (key < key_end) {
        const int64_t offset = kv_base + key * pos_stride + d;
        k_val = k[offset];
        v_val = v[offset];
      }
      k_tile[j][d] = k_val;
      v_tile[j][d] = v_val;
    }
    __syncthreads();

    if (row_valid) {
      const int key = tile_begin + lane;
      const bool visible = key < key_end && (!kCausal || key <= row + diag);
      float score = -INFINITY;
      if (visible) {
        float dot = 0.0f;
#pragma unroll 8
        for (int d = 0; d < kHeadDim; ++d) {
          dot += q_tile[warp][d] * Numeric<T>::ToFloat(k_tile[lane][d]);
        }
        score = dot;
      }
      const float tile_max = WarpMax(score);
      // Skip tiles this row cannot see at all, which also keeps row_max
      // finite below (no inf - inf).
      if (tile_max != -INFINITY) {
        const float new_max = fmaxf(row_max, tile_max);
        const float correction = exp2f(row_max - new_max);  // 0 on first use
        const float p = exp2f(score - new_max);             // 0 if hidden
        row_sum = row_sum * correction + WarpSum(p);
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) acc[i] *= correction;
#pragma unroll 4
        for (int j = 0; j < kBlockN; ++j) {
          const float p_j = __shfl_sync(kFullWarpMask, p, j);
#pragma unroll
          for (int i = 0; i < kDimsPerLane; ++i) {
            acc[i] += p_j * Numeric<T>::ToFloat(v_tile[j][lane + i * kWarpSize]);
          }
        }
        row_max = new_max;
      }
    }
    __syncthreads();
  }

  if (row_valid) {
    // A row that saw no key (causal with seqlen_q > seqlen_k) writes zeros.
    const float inv_sum = row_sum > 0.0f ? 1.0f / row_sum : 0.0f;
    T* o_row = o + q_base + row * pos_stride;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      o_row[lane + i * kWarpSize] = Numeric<T>::FromFloat(acc[i] * inv_sum);
    }
  }
}

}  // namespace attention_internal

template <typename T, int kHeadDim, bool kCausal>
cudaError_t RunAttentionForward(const AttentionParams& params, cudaStream_t stream) {
  namespace ai = attention_internal;
  if (params.batch < 0 || params.heads < 0 || params.seqlen_q < 0 || params.seqlen_k < 0 ||
      !std::isfinite(params.scale)) {
    return cudaErrorInvalidValue;
  }
  if (params.batch > ai::kMaxGridYZ || params.heads > ai::kMaxGridYZ) {
    return cudaErrorInvalidConfiguration;
  }
  if (params.batch == 0 || params.heads == 0 || params.seqlen_q == 0) {
    return cudaSuccess;  // empty output: nothing to compute
  }
  if (params.q == nullptr || params.k == nullptr || params.v == nullptr || params.o == nullptr) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid((params.seqlen_q - 1) / ai::kBlockM + 1, params.heads, params.batch);
  ai::AttentionForwardKernel<T, kHeadDim, kCausal><<<grid, ai::kThreads, 0, stream>>>(
      static_cast<const T*>(params.q), static_cast<const T*>(params.k),
      static_cast<const T*>(params.v), static_cast<T*>(params.o), params.heads, params.seqlen_q,
      params.seqlen_k, params.scale * ai::kLog2e);
  return cudaGetLastError();
}

#endif  // DISTCC_CUDA_EXAMPLES_ATTENTION_ATTENTION_KERNELS_CUH_
