// SPDX-License-Identifier: Apache-2.0
//
// Runs every combination the attention library dispatches (fp16/bf16 x head
// dims x causal) on the GPU through its C API and compares each output with
// a CPU reference computed in double from the same rounded inputs. Needs a
// GPU the library has code for. Prints one line per combination; exits 0
// only if all match. Built and run by scripts/gpu_check.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "../attention_api.h"

namespace {

struct Shape {
  int batch, heads, seqlen_q, seqlen_k;
};

// Rounds through the 16-bit type, as the GPU will see the value.
float Round(int dtype, float x) {
  return dtype == kAttentionDtypeFp16 ? __half2float(__float2half(x))
                                      : __bfloat162float(__float2bfloat16(x));
}

unsigned short Bits(int dtype, float x) {
  if (dtype == kAttentionDtypeFp16) {
    __half h = __float2half(x);
    return *reinterpret_cast<unsigned short*>(&h);
  }
  __nv_bfloat16 b = __float2bfloat16(x);
  return *reinterpret_cast<unsigned short*>(&b);
}

float Value(int dtype, unsigned short bits) {
  if (dtype == kAttentionDtypeFp16) return __half2float(*reinterpret_cast<__half*>(&bits));
  return __bfloat162float(*reinterpret_cast<__nv_bfloat16*>(&bits));
}

// o = softmax(scale q k^T + bottom-right causal mask) v, per row, in double.
std::vector<double> Reference(const Shape& s, int d, bool causal, const std::vector<float>& q,
                              const std::vector<float>& k, const std::vector<float>& v,
                              float scale) {
  std::vector<double> o(static_cast<size_t>(s.batch) * s.seqlen_q * s.heads * d, 0.0);
  int diag = s.seqlen_k - s.seqlen_q;
  for (int b = 0; b < s.batch; ++b) {
    for (int h = 0; h < s.heads; ++h) {
      for (int i = 0; i < s.seqlen_q; ++i) {
        size_t qi = ((static_cast<size_t>(b) * s.seqlen_q + i) * s.heads + h) * d;
        int end = causal ? std::min(s.seqlen_k, i + diag + 1) : s.seqlen_k;
        if (end <= 0) continue;  // sees no key: zeros
        std::vector<double> p(end);
        double max = -INFINITY;
        for (int j = 0; j < end; ++j) {
          size_t kj = ((static_cast<size_t>(b) * s.seqlen_k + j) * s.heads + h) * d;
          double dot = 0;
          for (int x = 0; x < d; ++x) dot += static_cast<double>(q[qi + x]) * k[kj + x];
          p[j] = dot * scale;
          max = std::max(max, p[j]);
        }
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - max));
        for (int j = 0; j < end; ++j) {
          size_t vj = ((static_cast<size_t>(b) * s.seqlen_k + j) * s.heads + h) * d;
          for (int x = 0; x < d; ++x) o[qi + x] += p[j] / sum * v[vj + x];
        }
      }
    }
  }
  return o;
}

#define CHECK_CUDA(call)                                                 \
  do {                                                                   \
    cudaError_t error = (call);                                          \
    if (error != cudaSuccess) {                                          \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(error));                           \
      std::exit(2);                                                      \
    }                                                                    \
  } while (0)

// One combination on one shape; returns the largest absolute error.
double Run(int dtype, int d, bool causal, const Shape& s, std::mt19937& random) {
  size_t nq = static_cast<size_t>(s.batch) * s.seqlen_q * s.heads * d;
  size_t nk = static_cast<size_t>(s.batch) * s.seqlen_k * s.heads * d;
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> q(nq), k(nk), v(nk);
  std::vector<unsigned short> qb(nq), kb(nk), vb(nk), ob(nq);
  for (size_t i = 0; i < nq; ++i) qb[i] = Bits(dtype, q[i] = Round(dtype, uniform(random)));
  for (size_t i = 0; i < nk; ++i) kb[i] = Bits(dtype, k[i] = Round(dtype, uniform(random)));
  for (size_t i = 0; i < nk; ++i) vb[i] = Bits(dtype, v[i] = Round(dtype, uniform(random)));
  void *dq, *dk, *dv, *dout;
  CHECK_CUDA(cudaMalloc(&dq, nq * 2));
  CHECK_CUDA(cudaMalloc(&dk, nk * 2));
  CHECK_CUDA(cudaMalloc(&dv, nk * 2));
  CHECK_CUDA(cudaMalloc(&dout, nq * 2));
  CHECK_CUDA(cudaMemcpy(dq, qb.data(), nq * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dk, kb.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dv, vb.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(dout, 0xff, nq * 2));  // NaNs where nothing is written
  float scale = 1.0f / std::sqrt(static_cast<float>(d));
  AttentionParams params{dq, dk, dv, dout, s.batch, s.heads, s.seqlen_q, s.seqlen_k, scale};
  CHECK_CUDA(static_cast<cudaError_t>(attention_forward(dtype, d, causal, &params, nullptr)));
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUDA(cudaMemcpy(ob.data(), dout, nq * 2, cudaMemcpyDeviceToHost));
  for (void* p : {dq, dk, dv, dout}) CHECK_CUDA(cudaFree(p));
  std::vector<double> want = Reference(s, d, causal, q, k, v, scale);
  double worst = 0;
  for (size_t i = 0; i < nq; ++i) {
    double error = std::fabs(Value(dtype, ob[i]) - want[i]);
    if (std::isnan(error)) return NAN;  // an element never written (or a NaN computed)
    worst = std::max(worst, error);
  }
  return worst;
}

}  // namespace

int main() {
  cudaDeviceProp device;
  CHECK_CUDA(cudaGetDeviceProperties(&device, 0));
  std::printf("%s on %s (sm_%d%d)\n", attention_version(), device.name, device.major, device.minor);
  // Rows that see every key, and (seqlen_q > seqlen_k) causal rows that see none.
  const Shape shapes[] = {{2, 3, 37, 53}, {1, 2, 64, 16}};
  std::mt19937 random(12345);
  int total = 0, good = 0;
  for (int dtype : {kAttentionDtypeFp16, kAttentionDtypeBf16}) {
    // Output rounding alone: half an ulp of values up to 1 (fp16 2^-11, bf16
    // 2^-8), with room for float accumulation.
    double tolerance = dtype == kAttentionDtypeFp16 ? 4e-3 : 2e-2;
    for (int d : {32, 64, 96, 128, 192, 256}) {
      for (bool causal : {false, true}) {
        double worst = 0;
        for (const Shape& s : shapes) {
          double error = Run(dtype, d, causal, s, random);
          if (std::isnan(error) || error > worst) worst = error;
          if (std::isnan(worst)) break;
        }
        bool ok = !std::isnan(worst) && worst <= tolerance;
        ++total;
        good += ok;
        std::printf("%s %-4s hdim %3d causal %d: max |error| %.2e (tolerance %.0e) %s\n",
                    ok ? "ok  " : "FAIL", dtype == kAttentionDtypeFp16 ? "fp16" : "bf16", d, causal,
                    worst, tolerance, ok ? "" : "<-- differs from the CPU reference");
      }
    }
  }
  // Bad input is refused, not run.
  AttentionParams params{};
  bool refused =
      attention_forward(kAttentionDtypeFp16, 48, 0, &params, nullptr) == cudaErrorInvalidValue;
  std::printf("%s head_dim 48 refused with cudaErrorInvalidValue\n", refused ? "ok  " : "FAIL");
  std::printf("%d of %d combinations match the CPU reference\n", good, total);
  return good == total && refused ? 0 : 1;
}
