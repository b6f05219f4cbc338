// SPDX-License-Identifier: Apache-2.0
// CUDA sources that more than one test compiles with the real nvcc.
#pragma once

#include <string>

#include "absl/strings/str_cat.h"

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

// twice.h, the header the launcher's test projects include.
inline constexpr char kTwiceHeader[] =
    "#pragma once\ninline __device__ float Twice(float x) { return 2 * x; }\n";

// A unit that keeps cicc and ptxas busy for minutes (each instantiation
// about a second): it is always cancelled long before it ends.
inline std::string SlowUnit(int instantiations) {
  std::string source = R"(template <int N>
__global__ void Slow(float* x) {
  float a = x[threadIdx.x];
#pragma unroll
  for (int i = 0; i < 64; ++i) a = sinf(a * (N + i)) + x[(i * N) % 61];
  x[threadIdx.x] = a;
}
)";
  for (int i = 0; i < instantiations; ++i) {
    absl::StrAppend(&source, "template __global__ void Slow<", i, ">(float*);\n");
  }
  return source;
}

}  // namespace distcc_cuda::testing
