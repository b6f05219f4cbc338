// SPDX-License-Identifier: Apache-2.0
// A fixed set of threads with a bounded queue, for work that must not run
// inside a gRPC reactor (planning a build: hashing and writing generated
// sources). When the queue is full, Submit says so instead of growing.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace distcc_cuda {

class BoundedExecutor {
 public:
  // Starts `threads` threads that take at most `queue_limit` waiting tasks.
  BoundedExecutor(int threads, size_t queue_limit);
  // Calls Shutdown().
  ~BoundedExecutor();
  BoundedExecutor(const BoundedExecutor&) = delete;
  BoundedExecutor& operator=(const BoundedExecutor&) = delete;

  // Queues `task`; false (and `task` is not run) when the queue is full.
  bool Submit(std::function<void()> task);

  // Refuses new tasks, runs every task already accepted and joins the
  // threads. Idempotent.
  void Shutdown();

 private:
  void Loop();

  const size_t queue_limit_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// Runs `task` on `executor`, or here, at once, when there is none or it
// takes no more (full, or shut down): for work that should leave a gRPC
// reactor's thread but must not be dropped.
void RunOnOrHere(BoundedExecutor* executor, const std::function<void()>& task);

}  // namespace distcc_cuda
