// SPDX-License-Identifier: Apache-2.0
// The BuildService: accepts builds, streams their progress, reports status.
#pragma once

#include <memory>

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
        limits_(limits),
        open_builds_(MakeOpenBuilds()) {}

  grpc::ServerUnaryReactor* GetClusterStatus(grpc::CallbackServerContext* context,
                                             const v1::GetClusterStatusRequest* request,
                                             v1::ClusterStatus* response) override;
  grpc::ServerWriteReactor<v1::BuildEvent>* SubmitBuild(
      grpc::CallbackServerContext* context, const v1::SubmitBuildRequest* request) override;
  grpc::ServerUnaryReactor* AddUnits(grpc::CallbackServerContext* context,
                                     const v1::AddUnitsRequest* request,
                                     v1::AddUnitsResponse* response) override;

  // The builds submitted with more units to follow whose stream is open.
  class OpenBuilds;

 private:
  const AccessControl* access_;
  CasStore* cas_;
  ResultCache* results_;
  const PeakHistory* history_;
  UnitSizeChoices* unit_sizes_;
  BuildScheduler* scheduler_;
  BoundedExecutor* planner_;
  const BuildLimits limits_;
  static std::shared_ptr<OpenBuilds> MakeOpenBuilds();
  // Shared with the streams, which leave it when their call ends.
  const std::shared_ptr<OpenBuilds> open_builds_;
};

}  // namespace distcc_cuda::coordinator
