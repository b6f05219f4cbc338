// SPDX-License-Identifier: Apache-2.0
// A unit for bots that run the fake nvcc (tests/fakes/fake_nvcc.cc): each
// compile holds 200 MiB for 3 s, so two at once overflow a 300 MiB cap.
// FAKE_TOUCH_MIB=200 FAKE_SLEEP_MS=3000
__global__ void heavy(float* x) { x[0] = 1.0f; }
