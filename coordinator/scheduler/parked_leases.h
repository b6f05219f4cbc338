// SPDX-License-Identifier: Apache-2.0
// Workers' lease requests that wait for a unit (each worker's long poll),
// oldest first, until a unit is handed to them, their wait runs out, their
// worker leaves or their call is cancelled. Not thread-safe: the scheduler
// holds them under its lock, and answers them (calls back) after it.
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "distcc_cuda/v1/worker.pb.h"

namespace distcc_cuda::coordinator {

// Called with the leased task, or nullopt when the wait ran out.
using LeaseCallback = std::function<void(std::optional<v1::Task>)>;
// A request answered: its callback with what it is to be called with.
using LeaseAnswer = std::pair<LeaseCallback, std::optional<v1::Task>>;

class ParkedLeases {
 public:
  // What the queue offers a worker now (nullopt: nothing it may take).
  using TakeFor = std::function<std::optional<v1::Task>(const std::string& worker_id)>;
  // Whether a worker has left (its requests are answered with nothing).
  using Gone = std::function<bool(const std::string& worker_id)>;

  void Park(std::string worker_id, absl::Time deadline, LeaseCallback callback);
  // Answers `worker_id`'s requests with nothing (its call was cancelled).
  void Release(const std::string& worker_id, std::vector<LeaseAnswer>& answers);
  // Answers with nothing the requests whose wait ran out by `now` or whose
  // worker is gone.
  void Expire(absl::Time now, const Gone& gone, std::vector<LeaseAnswer>& answers);
  // Offers each request, oldest first, what `take` has for its worker,
  // while `more` says units wait; a gone worker's request is answered with
  // nothing on the way.
  void Serve(const Gone& gone, const TakeFor& take, const std::function<bool()>& more,
             std::vector<LeaseAnswer>& answers);

  size_t size() const { return parked_.size(); }

 private:
  struct Parked {
    std::string worker_id;
    absl::Time deadline;
    LeaseCallback callback;
  };
  std::deque<Parked> parked_;
};

}  // namespace distcc_cuda::coordinator
