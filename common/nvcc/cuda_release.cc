// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/cuda_release.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace distcc_cuda {

absl::StatusOr<CudaRelease> CudaRelease::Parse(absl::string_view text) {
  std::vector<absl::string_view> words = absl::StrSplit(text, '.');
  std::vector<int> parts;
  bool numbers = words.size() == 2 || words.size() == 3;
  for (absl::string_view word : words) {
    int value = 0;
    const bool digits =
        !word.empty() && word.size() <= 4 &&
        std::all_of(word.begin(), word.end(), [](char c) { return absl::ascii_isdigit(c); });
    numbers = numbers && digits && absl::SimpleAtoi(word, &value);
    parts.push_back(value);
  }
  if (!numbers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a CUDA release; write it as 13.2 (any 13.2.x) or 13.2.86"));
  }
  return CudaRelease(std::move(parts));
}

std::string CudaRelease::ToString() const { return absl::StrJoin(parts_, "."); }

std::string CudaRelease::MajorMinor() const { return absl::StrCat(major(), ".", minor()); }

bool CudaRelease::Admits(const CudaRelease& version) const {
  if (!SameMajorMinor(version)) return false;
  return !has_patch() || (version.has_patch() && version.parts_[2] == parts_[2]);
}

}  // namespace distcc_cuda
