// SPDX-License-Identifier: Apache-2.0
// What the fuzz targets share: stopping on a broken invariant, so that
// libFuzzer keeps the input as a crash, and the input as text.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace distcc_cuda::fuzz {

// Aborts with `what` when `condition` is false. Not assert(): it must hold in
// the RelWithDebInfo builds the fuzzers run as, where NDEBUG is defined.
inline void Check(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

inline std::string InputText(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace distcc_cuda::fuzz
