// SPDX-License-Identifier: Apache-2.0
#include "common/base/version.h"

#include "absl/strings/str_cat.h"

namespace distcc_cuda {

// Set for this file alone (common/CMakeLists.txt), so that a new version
// recompiles one file.
const char* Version() { return DISTCC_CUDA_VERSION; }

std::string VersionLine(const std::string& program) {
  return absl::StrCat(program, " ", Version());
}

}  // namespace distcc_cuda
