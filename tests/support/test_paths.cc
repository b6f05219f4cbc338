// SPDX-License-Identifier: Apache-2.0
#include "tests/support/test_paths.h"

#include <gtest/gtest.h>

#include "common/files.h"

namespace distcc_cuda::testing {

std::string SourceDir() { return DISTCC_SOURCE_DIR; }

std::string BinaryPath(const std::string& name) {
  return std::string(DISTCC_BINARY_DIR) + "/bin/" + name;
}

std::string FakeNvccPath() { return std::string(DISTCC_BINARY_DIR) + "/tests/fake_nvcc"; }

std::string RealNvccPath() {
  const std::string nvcc = "/usr/local/cuda/bin/nvcc";
  return IsExecutableFile(nvcc) ? nvcc : "";
}

std::string NewTempDir(const std::string& prefix) {
  absl::StatusOr<std::string> dir = MakeTempDirectory(::testing::TempDir(), prefix);
  EXPECT_TRUE(dir.ok()) << dir.status();
  return dir.ok() ? *dir : "";
}

}  // namespace distcc_cuda::testing
