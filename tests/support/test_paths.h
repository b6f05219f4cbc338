// SPDX-License-Identifier: Apache-2.0
// Where tests find the source tree, the built binaries and scratch space.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace distcc_cuda::testing {

// The repository root.
std::string SourceDir();
// build/bin/NAME: distcc-cuda, distcc-cuda-coordinator, distcc-cuda-worker.
std::string BinaryPath(const std::string& name);
// build/tests/fake_nvcc, the fake compiler.
std::string FakeNvccPath();
// Copies `source` to the executable `destination` (made with its folders,
// mode 0755) in a process of its own: a file this process opened for
// writing would be inherited, still open, by a child another thread starts
// at that moment, and the file could not be executed ("Text file busy")
// until that child executes its own program.
absl::Status InstallExecutable(const std::string& source, const std::string& destination);
// A toolkit folder in `dir` whose bin/nvcc is the fake compiler reporting
// `release` (a script around it): a second toolchain with its own
// fingerprint. Returns the path of that bin/nvcc.
std::string FakeNvccWithRelease(const std::string& dir, const std::string& release);
// /usr/local/cuda/bin/nvcc if it exists, else "".
std::string RealNvccPath();
// Writes an executable script at `path` that runs `before` (shell lines)
// and then execs `nvcc` with its arguments, as some images put in
// /usr/local/bin/nvcc. Returns `path`; a test failure if it cannot.
std::string WriteNvccWrapper(const std::string& path, const std::string& nvcc,
                             const std::string& before = "");
// A new empty folder for one test, under the test temp dir; removed when the
// test program's tests are done.
std::string NewTempDir(const std::string& prefix);

// What the blobs in the content store at `root` take on disk, as the store
// counts it against its limit (BlobDiskCost of each; its tmp/ left out).
int64_t StoreBytes(const std::string& root);

// A loopback TCP port free right now, for a server a test starts (and
// restarts) at a known address; 0 if none could be had.
int FreeLoopbackPort();

}  // namespace distcc_cuda::testing
