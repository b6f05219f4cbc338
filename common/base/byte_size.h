// SPDX-License-Identifier: Apache-2.0
// Memory sizes as people write them: "6GiB", "512M", "1.5 GiB", "4096".
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distcc_cuda {

// Parses a size with an optional unit (B, K/KB/KiB, M/MB/MiB, G/GB/GiB,
// T/TB/TiB; all binary multiples). INVALID_ARGUMENT naming the text otherwise.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// Formats bytes for people: "512 MiB", "5.8 GiB".
std::string FormatByteSize(int64_t bytes);

}  // namespace distcc_cuda
