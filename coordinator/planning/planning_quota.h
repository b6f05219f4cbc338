// SPDX-License-Identifier: Apache-2.0
// How many requests each client has being planned at once (a build or a
// part of one, queued or running on the planners), so that no client can
// fill the planners' queue and leave every other client waiting behind
// minutes of its grids (--max-plans-per-client).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"

namespace distcc_cuda::coordinator {

class PlanningQuota : public std::enable_shared_from_this<PlanningQuota> {
 public:
  // At most `per_client` requests of one client at once; 0: no limit.
  static std::shared_ptr<PlanningQuota> Make(int per_client);

  // One of `client`'s places, held until the returned handle is destroyed
  // (it may outlive this quota's owner); null when the client holds them
  // all.
  std::shared_ptr<void> Take(const std::string& client);

  int per_client() const { return per_client_; }

 private:
  explicit PlanningQuota(int per_client) : per_client_(per_client) {}
  void Release(const std::string& client);

  const int per_client_;
  absl::Mutex mu_;
  std::map<std::string, int> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace distcc_cuda::coordinator
