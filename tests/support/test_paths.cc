// SPDX-License-Identifier: Apache-2.0
#include "tests/support/test_paths.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/files.h"

namespace distcc_cuda::testing {

std::string SourceDir() { return DISTCC_SOURCE_DIR; }

std::string BinaryPath(const std::string& name) {
  return std::string(DISTCC_BINARY_DIR) + "/bin/" + name;
}

std::string FakeNvccPath() { return std::string(DISTCC_BINARY_DIR) + "/tests/fake_nvcc"; }

std::string FakeNvccWithRelease(const std::string& dir, const std::string& release) {
  std::string bin = dir + "/cuda-" + release + "/bin";
  std::string nvcc = bin + "/nvcc";
  // The fake compiler lives inside the toolkit, as a real toolkit's programs
  // do: a worker's sandbox holds the toolkit and nothing beside it.
  absl::StatusOr<std::string> fake = ReadFile(FakeNvccPath());
  absl::Status written = fake.ok() ? WriteFileAtomically(bin + "/fake_nvcc", *fake) : fake.status();
  if (written.ok()) {
    written =
        WriteFileAtomically(nvcc, absl::StrCat("#!/bin/sh\nFAKE_NVCC_RELEASE=", release,
                                               " exec \"$(dirname \"$0\")/fake_nvcc\" \"$@\"\n"));
  }
  if (!written.ok() || chmod(nvcc.c_str(), 0755) != 0 ||
      chmod((bin + "/fake_nvcc").c_str(), 0755) != 0) {
    ADD_FAILURE() << "cannot write " << nvcc << ": " << written;
  }
  return nvcc;
}

std::string RealNvccPath() {
  const std::string nvcc = "/usr/local/cuda/bin/nvcc";
  return IsExecutableFile(nvcc) ? nvcc : "";
}

namespace {

// Removes the folders NewTempDir made once the test program's tests are done,
// so repeated runs do not fill /tmp.
class TempDirCleanup : public ::testing::Environment {
 public:
  void Add(const std::string& dir) {
    absl::MutexLock lock(&mu_);
    dirs_.push_back(dir);
  }
  void TearDown() override {
    absl::MutexLock lock(&mu_);
    for (const std::string& dir : dirs_) RemoveAll(dir).IgnoreError();
    dirs_.clear();
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> dirs_;
};

TempDirCleanup* Cleanup() {
  // Owned by GoogleTest once registered.
  static TempDirCleanup* cleanup = [] {
    auto* environment = new TempDirCleanup();
    ::testing::AddGlobalTestEnvironment(environment);
    return environment;
  }();
  return cleanup;
}

// Registers the environment before RUN_ALL_TESTS, so its TearDown runs.
[[maybe_unused]] TempDirCleanup* const kRegistered = Cleanup();

}  // namespace

std::string NewTempDir(const std::string& prefix) {
  absl::StatusOr<std::string> dir = MakeTempDirectory(::testing::TempDir(), prefix);
  EXPECT_TRUE(dir.ok()) << dir.status();
  // Reachable by a worker's sandbox user, as a source tree or a toolkit on a
  // real machine is (mkdtemp makes it private).
  if (dir.ok()) chmod(dir->c_str(), 0755);
  if (dir.ok()) Cleanup()->Add(*dir);
  return dir.ok() ? *dir : "";
}

}  // namespace distcc_cuda::testing
