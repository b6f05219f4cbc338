// SPDX-License-Identifier: Apache-2.0
// A one-way "stop now" flag that threads can wait on and that a poll loop can
// watch as a file descriptor (an eventfd). The worker gives one to every
// running task, so that a cancel from the coordinator kills the task's
// processes at once; the client gives one to a build, so that Ctrl-C cancels
// it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace distcc_cuda {

class CancelToken {
 public:
  CancelToken();
  ~CancelToken();
  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  // Cancels, with a reason for messages; only the first reason is kept.
  // Runs the callbacks added with OnCancel (on this thread). Async-signal
  // unsafe: call from a thread, never from a signal handler.
  void Cancel(const std::string& reason);
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  std::string reason() const;
  // Readable (POLLIN) once cancelled; -1 if no eventfd could be made (then
  // pollers must also check cancelled() now and then).
  int fd() const { return fd_; }
  // Waits up to `timeout`; true if cancelled.
  bool WaitFor(absl::Duration timeout) const;
  // Runs `callback` when the token is cancelled, or now if it already is.
  // Const: whoever may watch the token may ask to hear of its cancel.
  void OnCancel(std::function<void()> callback) const;

 private:
  int fd_ = -1;
  std::atomic<bool> cancelled_{false};
  mutable absl::Mutex mu_;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<std::function<void()>> callbacks_ ABSL_GUARDED_BY(mu_);
};

// Runs `on_cancel` once, on a thread of its own, if `token` is cancelled
// while the watch lives (a build's Ctrl-C ending a stream or a command).
// Ending the watch wakes that thread: the destructor returns at once, not
// after a poll interval. A null token watches nothing and starts no thread.
class CancelWatch {
 public:
  CancelWatch(const CancelToken* token, std::function<void()> on_cancel);
  ~CancelWatch();
  CancelWatch(const CancelWatch&) = delete;
  CancelWatch& operator=(const CancelWatch&) = delete;

 private:
  int ended_fd_ = -1;  // an eventfd written when the watch ends
  std::atomic<bool> ended_{false};
  std::thread thread_;
};

}  // namespace distcc_cuda
