// SPDX-License-Identifier: Apache-2.0
// CUDA sources that more than one test compiles with the real nvcc.
#pragma once

namespace distcc_cuda::testing {

// Nine lines whose only host function is an explicit specialization: nvcc
// names its internal device entities (cuda::std's customization points, the
// static variable) after its process id and the source's modification time,
// _INTERNAL_<path hash>_7_nine_cu_<time hash>_<pid>, as in every
// flash-attention instantiation file.
inline constexpr char kPidNamedUnit[] = R"(#include <cuda/std/iterator>
static __device__ float scale_value;
template <int N> __global__ void k(float *p) {
  float a[N] = {};
  p[threadIdx.x] = scale_value * (cuda::std::end(a) - a);
}
template <int N> void launch(float *p);
template <> void launch<3>(float *p) { k<3><<<1, 32>>>(p); }
)";

}  // namespace distcc_cuda::testing
