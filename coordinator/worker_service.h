// SPDX-License-Identifier: Apache-2.0
// The WorkerService: registration, heartbeats, leases and results.
#pragma once

#include "common/cas_store.h"
#include "coordinator/access_control.h"
#include "coordinator/scheduler.h"
#include "distcc_cuda/v1/worker.grpc.pb.h"

namespace distcc_cuda::coordinator {

class WorkerService final : public v1::WorkerService::CallbackService {
 public:
  // Every call needs the worker role in `access`; worker ids are bound to
  // the caller's principal; a report's outputs must be in `cas`.
  WorkerService(const AccessControl* access, BuildScheduler* scheduler, const CasStore* cas,
                absl::Duration heartbeat_interval)
      : access_(access),
        scheduler_(scheduler),
        cas_(cas),
        heartbeat_interval_(heartbeat_interval) {}

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
  grpc::ServerUnaryReactor* DeregisterWorker(grpc::CallbackServerContext* context,
                                             const v1::DeregisterWorkerRequest* request,
                                             v1::DeregisterWorkerResponse* response) override;

 private:
  const AccessControl* access_;
  BuildScheduler* scheduler_;
  const CasStore* cas_;
  absl::Duration heartbeat_interval_;
};

}  // namespace distcc_cuda::coordinator
