// SPDX-License-Identifier: Apache-2.0
#include "common/base/cancellation.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

namespace distcc_cuda {

CancelToken::CancelToken() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

CancelToken::~CancelToken() {
  if (fd_ >= 0) close(fd_);
}

void CancelToken::Cancel(const std::string& reason) {
  std::vector<std::function<void()>> callbacks;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_.load(std::memory_order_relaxed)) return;
    reason_ = reason;
    cancelled_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
  }
  if (fd_ >= 0) {
    uint64_t one = 1;
    // Never blocks (EFD_NONBLOCK); the counter only needs to be non-zero.
    [[maybe_unused]] ssize_t written = write(fd_, &one, sizeof(one));
  }
  for (auto& callback : callbacks) callback();
}

std::string CancelToken::reason() const {
  absl::MutexLock lock(&mu_);
  return reason_;
}

bool CancelToken::WaitFor(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(this, &CancelToken::cancelled), timeout);
  return cancelled();
}

void CancelToken::OnCancel(std::function<void()> callback) const {
  {
    absl::MutexLock lock(&mu_);
    if (!cancelled_.load(std::memory_order_relaxed)) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

CancelWatch::CancelWatch(const CancelToken* token, std::function<void()> on_cancel) {
  if (token == nullptr) return;
  ended_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this, token, on_cancel = std::move(on_cancel)] {
    while (!ended_.load(std::memory_order_acquire)) {
      if (token->cancelled()) {
        on_cancel();
        return;
      }
      // Either eventfd wakes the poll; without them (none could be made)
      // the flags are looked at every 100 ms.
      pollfd ready[2] = {{token->fd(), POLLIN, 0}, {ended_fd_, POLLIN, 0}};
      poll(ready, 2, 100);
    }
  });
}

CancelWatch::~CancelWatch() {
  if (!thread_.joinable()) return;
  ended_.store(true, std::memory_order_release);
  if (ended_fd_ >= 0) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t written = write(ended_fd_, &one, sizeof(one));
  }
  thread_.join();
  if (ended_fd_ >= 0) close(ended_fd_);
}

}  // namespace distcc_cuda
