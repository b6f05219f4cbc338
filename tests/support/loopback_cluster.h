// SPDX-License-Identifier: Apache-2.0
// A coordinator and workers as real processes on 127.0.0.1, for end-to-end
// tests: the binaries users run, with their state under one folder.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/support/background_process.h"

namespace distcc_cuda::testing {

struct LoopbackWorker {
  std::string name;
  int slots = 1;
  std::string memory_cap = "4GiB";
  // false: --insecure-no-sandbox, for tests about something else than the
  // sandbox that run thousands of compiles.
  bool sandbox = true;
  std::vector<std::string> arguments = {};  // more flags, after the others
};

class LoopbackCluster {
 public:
  // Starts distcc-cuda-coordinator on 127.0.0.1:0 and each worker with
  // `nvcc`; returns once every worker registered. Logs and state under
  // `root`. An error carrying the log of the process that did not come up.
  static absl::StatusOr<std::unique_ptr<LoopbackCluster>> Start(
      const std::string& root, const std::string& nvcc, const std::vector<LoopbackWorker>& workers,
      const std::vector<std::string>& coordinator_arguments = {});

  const std::string& address() const { return address_; }
  BackgroundProcess& coordinator() { return *coordinator_; }
  std::vector<std::unique_ptr<BackgroundProcess>>& workers() { return workers_; }

 private:
  std::string address_;
  std::unique_ptr<BackgroundProcess> coordinator_;
  std::vector<std::unique_ptr<BackgroundProcess>> workers_;  // stopped first
};

}  // namespace distcc_cuda::testing
