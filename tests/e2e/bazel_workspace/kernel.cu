// SPDX-License-Identifier: Apache-2.0
// Small CUDA source for the Bazel e2e test: one explicit instantiation of the scale kernel.
#include "scale.h"

template __global__ void scale<float>(float* data, float factor, int n);
