// SPDX-License-Identifier: Apache-2.0
// A coordinator and two workers in-process on 127.0.0.1:0 with the fake
// compiler, as an operator runs them (metrics and dashboard on loopback):
// the fixture of the metrics, status --watch and dashboard tests.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/base/files.h"
#include "coordinator/coordinator.h"
#include "tests/support/test_paths.h"
#include "worker/worker.h"

namespace distcc_cuda::testing {

class OperatedClusterTest : public ::testing::Test {
 protected:
  static constexpr int64_t kMiB = int64_t{1} << 20;

  // Starts the coordinator with `options` (its state under a new root) and
  // workers worker-a and worker-b of one slot, each capped at `cap` by the
  // watchdog (the same memory kills on every machine, root or not), with
  // /metrics on loopback; worker-b says its toolkit was served by the
  // coordinator (what a worker with --served-toolkit registers with), so
  // that status pages show both kinds. The compiles run unsandboxed (--insecure-no-sandbox),
  // so that a unit can wait for a file the test writes when it has seen
  // what it looks for (FAKE_COMPILE_WAIT_FOR): the sandbox is not what these
  // tests are about, and the cluster tests cover it.
  void StartCluster(const std::string& prefix, coordinator::CoordinatorOptions options,
                    int64_t cap) {
    root_ = NewTempDir(prefix);
    options.state_dir = root_ + "/coordinator";
    auto started = coordinator::Coordinator::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(*started);
    for (const char* name : {"worker-a", "worker-b"}) {
      worker::WorkerOptions worker;
      worker.coordinator_address = coordinator_->address();
      worker.name = name;
      worker.slots = 1;
      worker.memory_cap_bytes = cap;
      worker.force_watchdog = true;
      worker.sandbox = false;
      worker.nvcc_path = FakeNvccPath();
      worker.work_dir = root_ + "/" + name;
      worker.metrics_listen = "127.0.0.1:0";
      if (std::string(name) == "worker-b") {
        worker.toolkit_source = "served by the coordinator: CUDA 13.2.86, fetched in 2.2s";
      }
      auto running = worker::Worker::Start(worker);
      ASSERT_TRUE(running.ok()) << running.status();
      workers_.push_back(std::move(*running));
    }
  }

  // The directive that holds a compile (touched memory and all) until
  // Release(): put it in a unit's source.
  std::string HeldUntilRelease() const { return "FAKE_COMPILE_WAIT_FOR(" + root_ + "/release)"; }
  void Release() { EXPECT_TRUE(WriteFileAtomically(root_ + "/release", "").ok()); }

  std::string root_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::vector<std::unique_ptr<worker::Worker>> workers_;
};

}  // namespace distcc_cuda::testing
