// SPDX-License-Identifier: Apache-2.0
// The WorkerService: registration, heartbeats, leases and results.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"
#include "common/base/bounded_executor.h"
#include "common/store/cas_store.h"
#include "coordinator/scheduler/scheduler.h"
#include "coordinator/trust/access_control.h"
#include "distcc_cuda/v1/worker.grpc.pb.h"

namespace distcc_cuda::coordinator {

// Every method arrives as bytes: each has a size that fits its purpose
// (kWorkerMessageLimits) and is judged by what it would cost parsed
// (coordinator/request_cost) before it is parsed, so that one stolen worker
// key cannot make the coordinator parse hundreds of megabytes of empty
// elements.
using WorkerServiceBase = v1::WorkerService::WithRawCallbackMethod_RegisterWorker<
    v1::WorkerService::WithRawCallbackMethod_Heartbeat<
        v1::WorkerService::WithRawCallbackMethod_LeaseTask<
            v1::WorkerService::WithRawCallbackMethod_ReportResult<
                v1::WorkerService::WithRawCallbackMethod_DeregisterWorker<
                    v1::WorkerService::CallbackService>>>>>;

// The largest message each worker call may be.
struct WorkerMessageLimits {
  int64_t register_bytes = 64 << 10;
  // Twice a worker's slots plus 16 task ids (the most a heartbeat may list)
  // of 1,024 slots take about 100 KB.
  int64_t heartbeat_bytes = 1 << 20;
  int64_t lease_bytes = 4 << 10;
  int64_t deregister_bytes = 4 << 10;
  // A result's outputs and its compiler's messages (at most --max-output,
  // 1 MiB, per stream).
  int64_t report_bytes = 8 << 20;
};

class WorkerService final : public WorkerServiceBase {
 public:
  // Every call needs the worker role in `access`; worker ids are bound to
  // the caller's principal; a report's outputs must be in `cas`. Reports
  // are taken on `reports` (may be null: on the gRPC thread), not on the
  // reactor's thread: taking one writes the result cache's record, the
  // history and the log, and may plan a split. When its queue is full a
  // report is taken on the gRPC thread, as before.
  WorkerService(const AccessControl* access, BuildScheduler* scheduler, const CasStore* cas,
                absl::Duration heartbeat_interval, WorkerMessageLimits limits = {},
                BoundedExecutor* reports = nullptr)
      : access_(access),
        scheduler_(scheduler),
        cas_(cas),
        heartbeat_interval_(heartbeat_interval),
        limits_(limits),
        reports_(reports) {}

  // Each takes its v1:: request as bytes and answers its v1:: response.
  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* raw,
                                           grpc::ByteBuffer* raw_response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* raw,
                                      grpc::ByteBuffer* raw_response) override;
  grpc::ServerUnaryReactor* LeaseTask(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* raw,
                                      grpc::ByteBuffer* raw_response) override;
  grpc::ServerUnaryReactor* ReportResult(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* raw,
                                         grpc::ByteBuffer* raw_response) override;
  grpc::ServerUnaryReactor* DeregisterWorker(grpc::CallbackServerContext* context,
                                             const grpc::ByteBuffer* raw,
                                             grpc::ByteBuffer* raw_response) override;

 private:
  // The worker calls' steps: who calls, and their request read.
  absl::StatusOr<Principal> Admit(grpc::CallbackServerContext& context, const grpc::ByteBuffer& raw,
                                  int64_t max_bytes, absl::string_view action,
                                  google::protobuf::Message& request) const;
  absl::StatusOr<v1::RegisterWorkerResponse> Register(const v1::RegisterWorkerRequest& request,
                                                      const Principal& principal);
  absl::StatusOr<v1::ReportResultResponse> Report(const v1::ReportResultRequest& request,
                                                  const Principal& principal);

  const AccessControl* access_;
  BuildScheduler* scheduler_;
  const CasStore* cas_;
  absl::Duration heartbeat_interval_;
  WorkerMessageLimits limits_;
  BoundedExecutor* const reports_;
};

}  // namespace distcc_cuda::coordinator
