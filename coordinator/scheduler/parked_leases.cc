// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/parked_leases.h"

namespace distcc_cuda::coordinator {

void ParkedLeases::Park(std::string worker_id, absl::Time deadline, LeaseCallback callback) {
  parked_.push_back(Parked{std::move(worker_id), deadline, std::move(callback)});
}

void ParkedLeases::Release(const std::string& worker_id, std::vector<LeaseAnswer>& answers) {
  Expire(
      absl::InfinitePast(), [&](const std::string& id) { return id == worker_id; }, answers);
}

void ParkedLeases::Expire(absl::Time now, const Gone& gone, std::vector<LeaseAnswer>& answers) {
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (it->deadline <= now || gone(it->worker_id)) {
      answers.emplace_back(std::move(it->callback), std::nullopt);
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
}

void ParkedLeases::Serve(const Gone& gone, const TakeFor& take, const std::function<bool()>& more,
                         std::vector<LeaseAnswer>& answers) {
  for (auto it = parked_.begin(); it != parked_.end() && more();) {
    if (gone(it->worker_id)) {
      answers.emplace_back(std::move(it->callback), std::nullopt);
      it = parked_.erase(it);
      continue;
    }
    std::optional<v1::Task> task = take(it->worker_id);
    if (task) {
      answers.emplace_back(std::move(it->callback), std::move(task));
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace distcc_cuda::coordinator
