// SPDX-License-Identifier: Apache-2.0
#include "tests/support/test_paths.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/process/subprocess.h"
#include "common/store/cas_store.h"

namespace distcc_cuda::testing {

std::string SourceDir() { return DISTCC_SOURCE_DIR; }

std::string BinaryPath(const std::string& name) {
  return std::string(DISTCC_BINARY_DIR) + "/bin/" + name;
}

std::string FakeNvccPath() { return std::string(DISTCC_BINARY_DIR) + "/tests/fake_nvcc"; }

absl::Status InstallExecutable(const std::string& source, const std::string& destination) {
  ProcessSpec install;
  install.argv = {"install", "-D", "-m", "0755", source, destination};
  ASSIGN_OR_RETURN(ProcessResult ran, RunProcess(install));
  if (ran.exit_code != 0) {
    return absl::InternalError(absl::StrCat("install ", destination, ": ", ran.stderr_text));
  }
  return absl::OkStatus();
}

namespace {

// Writes `text` as the executable `path`, through InstallExecutable.
absl::Status WriteExecutable(const std::string& path, const std::string& text) {
  const std::string draft = path + ".draft";
  RETURN_IF_ERROR(WriteFileAtomically(draft, text));
  RETURN_IF_ERROR(InstallExecutable(draft, path));
  std::filesystem::remove(draft);
  return absl::OkStatus();
}

}  // namespace

std::string FakeNvccWithRelease(const std::string& dir, const std::string& release) {
  std::string bin = dir + "/cuda-" + release + "/bin";
  std::string nvcc = bin + "/nvcc";
  // The fake compiler lives inside the toolkit, as a real toolkit's programs
  // do: a worker's sandbox holds the toolkit and nothing beside it.
  absl::Status written = InstallExecutable(FakeNvccPath(), bin + "/fake_nvcc");
  if (written.ok()) {
    written = WriteExecutable(nvcc, absl::StrCat("#!/bin/sh\nFAKE_NVCC_RELEASE=", release,
                                                 " exec \"$(dirname \"$0\")/fake_nvcc\" \"$@\"\n"));
  }
  if (!written.ok()) ADD_FAILURE() << "cannot write " << nvcc << ": " << written;
  return nvcc;
}

std::string WriteNvccWrapper(const std::string& path, const std::string& nvcc,
                             const std::string& before) {
  absl::Status written =
      WriteExecutable(path, absl::StrCat("#!/bin/sh\n", before, "exec ", nvcc, " \"$@\"\n"));
  if (!written.ok()) ADD_FAILURE() << "cannot write " << path << ": " << written;
  return path;
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

int64_t StoreBytes(const std::string& root) {
  int64_t bytes = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root, error)) {
    if (entry.is_regular_file(error) && entry.path().string().rfind(root + "/tmp/", 0) != 0) {
      bytes += BlobDiskCost(static_cast<int64_t>(entry.file_size(error)));
    }
  }
  return bytes;
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace distcc_cuda::testing
