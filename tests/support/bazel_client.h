// SPDX-License-Identifier: Apache-2.0
// Debian's Bazel 4.2.3 (bazel-bootstrap) as the e2e tests run it: a Bazel of
// its own under a test folder (--batch: no server left behind), building
// tests/e2e/bazel_workspace with every action on a remote executor.
#pragma once

#include <string>
#include <vector>

namespace distcc_cuda::testing {

// The Bazel client itself; the bazel wrapper beside it reads .bazelversion.
inline constexpr char kBazel[] = "/usr/bin/bazel-4";

// `bazel-4 ... build` with its output under `root` and remote execution on
// `executor` (grpc://HOST:PORT) for `instance`, without local fallback;
// the targets and any other flags follow.
std::vector<std::string> BazelRemoteBuild(const std::string& root, const std::string& executor,
                                          const std::string& instance);

// Where Bazel put `name` (an output of tests/e2e/bazel_workspace) for a
// build under `root`.
std::string BazelOutput(const std::string& root, const std::string& name);

}  // namespace distcc_cuda::testing
