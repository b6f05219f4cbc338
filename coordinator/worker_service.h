// SPDX-License-Identifier: Apache-2.0
// The WorkerService: registration, heartbeats, leases and results.
#pragma once

#include "coordinator/scheduler.h"
#include "distcc_cuda/v1/worker.grpc.pb.h"

namespace distcc_cuda::coordinator {

class WorkerService final : public v1::WorkerService::CallbackService {
 public:
  WorkerService(BuildScheduler* scheduler, absl::Duration heartbeat_interval)
      : scheduler_(scheduler), heartbeat_interval_(heartbeat_interval) {}

  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* context,
                                           const v1::RegisterWorkerRequest* request,
                                           v1::RegisterWorkerResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* LeaseTask(grpc::CallbackServerContext* context,
                                      const v1::LeaseTaskRequest* request,
                                      v1::LeaseTaskResponse* response) override;
  grpc::ServerUnaryReactor* ReportResult(grpc::CallbackServerContext* context,
                                         const v1::ReportResultRequest* request,
                                         v1::ReportResultResponse* response) override;

 private:
  BuildScheduler* scheduler_;
  absl::Duration heartbeat_interval_;
};

}  // namespace distcc_cuda::coordinator
