// SPDX-License-Identifier: Apache-2.0
#include "common/base/byte_size.h"

#include <cctype>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace distcc_cuda {

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  size_t split = 0;
  while (split < trimmed.size() &&
         (std::isdigit(static_cast<unsigned char>(trimmed[split])) || trimmed[split] == '.')) {
    ++split;
  }
  double number = 0;
  std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(trimmed.substr(split)));
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a memory size; write e.g. 6GiB, 512MiB or 8G"));
  };
  if (split == 0 || !absl::SimpleAtod(trimmed.substr(0, split), &number)) {
    return bad();
  }
  double multiplier;
  if (unit.empty() || unit == "b") {
    multiplier = 1;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    multiplier = 1024.0;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    multiplier = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    multiplier = 1024.0 * 1024 * 1024;
  } else if (unit == "t" || unit == "tb" || unit == "tib") {
    multiplier = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return bad();
  }
  double bytes = number * multiplier;
  if (!(bytes < 9.0e18)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is too large for a memory size"));
  }
  return static_cast<int64_t>(std::llround(bytes));
}

std::string FormatByteSize(int64_t bytes) {
  constexpr double kKiB = 1024.0;
  double b = static_cast<double>(bytes);
  if (b >= kKiB * kKiB * kKiB) return absl::StrFormat("%.1f GiB", b / (kKiB * kKiB * kKiB));
  if (b >= kKiB * kKiB) return absl::StrFormat("%.0f MiB", b / (kKiB * kKiB));
  if (b >= kKiB) return absl::StrFormat("%.0f KiB", b / kKiB);
  return absl::StrCat(bytes, " B");
}

}  // namespace distcc_cuda
