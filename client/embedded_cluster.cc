// SPDX-License-Identifier: Apache-2.0
#include "client/embedded_cluster.h"

#include "common/host_resources.h"
#include "common/memory_cap.h"
#include "common/status.h"

namespace distcc_cuda::client {

absl::StatusOr<std::unique_ptr<EmbeddedCluster>> EmbeddedCluster::Start(
    const std::string& state_dir, const std::string& nvcc, int slots) {
  auto cluster = std::make_unique<EmbeddedCluster>();
  coordinator::CoordinatorOptions coordinator_options;
  coordinator_options.listen_address = "127.0.0.1:0";
  coordinator_options.state_dir = state_dir + "/coordinator";
  ASSIGN_OR_RETURN(cluster->coordinator_, coordinator::Coordinator::Start(coordinator_options));
  worker::WorkerOptions worker_options;
  worker_options.coordinator_address = cluster->coordinator_->address();
  worker_options.name = "local";
  worker_options.slots = slots > 0 ? slots : UsableCores();
  worker_options.memory_cap_bytes = DefaultMemoryCap().bytes;
  worker_options.nvcc_path = nvcc;
  worker_options.work_dir = state_dir + "/worker";
  ASSIGN_OR_RETURN(cluster->worker_, worker::Worker::Start(worker_options));
  cluster->slots_ = worker_options.slots;
  cluster->memory_cap_bytes_ = worker_options.memory_cap_bytes;
  return cluster;
}

}  // namespace distcc_cuda::client
