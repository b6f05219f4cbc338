// SPDX-License-Identifier: Apache-2.0
#include "common/base/bounded_executor.h"

namespace distcc_cuda {

BoundedExecutor::BoundedExecutor(int threads, size_t queue_limit) : queue_limit_(queue_limit) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

BoundedExecutor::~BoundedExecutor() { Shutdown(); }

void BoundedExecutor::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

bool BoundedExecutor::Submit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || queue_.size() >= queue_limit_) return false;
  queue_.push_back(std::move(task));
  return true;
}

void BoundedExecutor::Loop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](BoundedExecutor* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void RunOnOrHere(BoundedExecutor* executor, const std::function<void()>& task) {
  if (executor == nullptr || !executor->Submit(task)) task();
}

}  // namespace distcc_cuda
