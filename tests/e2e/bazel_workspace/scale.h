// SPDX-License-Identifier: Apache-2.0
// Device kernel template included by kernel.cu, so the remote action has a header input.
#pragma once

template <typename T>
__global__ void scale(T* data, T factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}
