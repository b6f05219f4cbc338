// SPDX-License-Identifier: Apache-2.0
#include "coordinator/planning/planning_quota.h"

namespace distcc_cuda::coordinator {

std::shared_ptr<PlanningQuota> PlanningQuota::Make(int per_client) {
  return std::shared_ptr<PlanningQuota>(new PlanningQuota(per_client));
}

std::shared_ptr<void> PlanningQuota::Take(const std::string& client) {
  {
    absl::MutexLock lock(&mu_);
    int& held = held_[client];
    if (per_client_ > 0 && held >= per_client_) return nullptr;
    ++held;
  }
  std::shared_ptr<PlanningQuota> self = shared_from_this();
  // The handle points at the quota only to keep it alive; its deleter
  // gives the place back.
  return std::shared_ptr<void>(self.get(), [self, client](void*) { self->Release(client); });
}

void PlanningQuota::Release(const std::string& client) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(client);
  if (it != held_.end() && --it->second <= 0) held_.erase(it);
}

}  // namespace distcc_cuda::coordinator
