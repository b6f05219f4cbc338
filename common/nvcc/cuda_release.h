// SPDX-License-Identifier: Apache-2.0
// A CUDA release as people and tools write it: "13.2" (any 13.2.x) or
// "13.2.86" (nvcc's own version, `nvcc --version`'s "V13.2.86").
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distcc_cuda {

class CudaRelease {
 public:
  // INVALID_ARGUMENT unless `text` is MAJOR.MINOR or MAJOR.MINOR.PATCH of
  // decimal numbers (at most four digits each).
  static absl::StatusOr<CudaRelease> Parse(absl::string_view text);

  int major() const { return parts_[0]; }
  int minor() const { return parts_[1]; }
  bool has_patch() const { return parts_.size() > 2; }
  // "13.2" or "13.2.86", as parsed.
  std::string ToString() const;
  // "13.2", whatever was parsed.
  std::string MajorMinor() const;
  // Whether `version` (a full version, "13.2.86") is this release: the same
  // major and minor, and the same patch when this one names one.
  bool Admits(const CudaRelease& version) const;
  bool SameMajorMinor(const CudaRelease& other) const {
    return major() == other.major() && minor() == other.minor();
  }
  // Newer first by number, for lists of installed toolkits.
  bool operator<(const CudaRelease& other) const { return parts_ < other.parts_; }
  bool operator==(const CudaRelease& other) const { return parts_ == other.parts_; }

 private:
  explicit CudaRelease(std::vector<int> parts) : parts_(std::move(parts)) {}
  std::vector<int> parts_;
};

}  // namespace distcc_cuda
