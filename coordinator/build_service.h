// SPDX-License-Identifier: Apache-2.0
// The BuildService: accepts builds, streams their progress, reports status.
#pragma once

#include "common/bounded_executor.h"
#include "common/cas_store.h"
#include "coordinator/access_control.h"
#include "coordinator/build_planner.h"
#include "coordinator/result_cache.h"
#include "coordinator/scheduler.h"
#include "distcc_cuda/v1/build.grpc.pb.h"

namespace distcc_cuda::coordinator {

class BuildService final : public v1::BuildService::CallbackService {
 public:
  // Builds are planned on `planner`, never inside a reactor. Every call
  // needs the client role in `access`.
  BuildService(const AccessControl* access, CasStore* cas, ResultCache* results,
               const PeakHistory* history, UnitSizeChoices* unit_sizes, BuildScheduler* scheduler,
               BoundedExecutor* planner, BuildLimits limits = {})
      : access_(access),
        cas_(cas),
        results_(results),
        history_(history),
        unit_sizes_(unit_sizes),
        scheduler_(scheduler),
        planner_(planner),
        limits_(limits) {}

  grpc::ServerUnaryReactor* GetClusterStatus(grpc::CallbackServerContext* context,
                                             const v1::GetClusterStatusRequest* request,
                                             v1::ClusterStatus* response) override;
  grpc::ServerWriteReactor<v1::BuildEvent>* SubmitBuild(
      grpc::CallbackServerContext* context, const v1::SubmitBuildRequest* request) override;

 private:
  const AccessControl* access_;
  CasStore* cas_;
  ResultCache* results_;
  const PeakHistory* history_;
  UnitSizeChoices* unit_sizes_;
  BuildScheduler* scheduler_;
  BoundedExecutor* planner_;
  const BuildLimits limits_;
};

}  // namespace distcc_cuda::coordinator
