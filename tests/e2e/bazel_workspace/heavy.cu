// SPDX-License-Identifier: Apache-2.0
// A unit for bots that run the fake nvcc (tests/fakes/fake_nvcc.cc): each
// compile holds 200 MiB for 8 s, so two at once overflow a 300 MiB cap.
// That long, the two overlap even when the engine hands out the second a
// few seconds after the first (a loaded CI machine: seen 3.3 s later).
// FAKE_TOUCH_MIB=200 FAKE_SLEEP_MS=8000
__global__ void heavy(float* x) { x[0] = 1.0f; }
