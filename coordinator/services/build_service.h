// SPDX-License-Identifier: Apache-2.0
// The BuildService: accepts builds, streams their progress, reports status.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/base/bounded_executor.h"
#include "common/store/cas_store.h"
#include "coordinator/planning/build_planner.h"
#include "coordinator/planning/planning_quota.h"
#include "coordinator/planning/result_cache.h"
#include "coordinator/scheduler/scheduler.h"
#include "coordinator/services/memory_release.h"
#include "coordinator/trust/access_control.h"
#include "distcc_cuda/v1/build.grpc.pb.h"

namespace distcc_cuda::coordinator {

// What planning made of one submitted part of a build (or a whole build).
struct PlannedPart {
  std::vector<PlannedUnit> units;
  std::map<int, v1::TaskResult> cached;  // by index in `units`
  std::vector<std::string> notes;        // what the user should know
  int entries = 0;                       // units and sets as submitted
};

// What planning a part needs of the coordinator.
struct Planning {
  CasStore* cas;
  ResultCache* results;
  const PeakHistory* history;
  UnitSizeChoices* unit_sizes;
  BuildScheduler* scheduler;  // the workers' capacity
  BuildLimits limits;
  ClientLeft client_left;  // whether the part's client has gone (may be null)
  // A build's opening request (not a later part): when it names inputs
  // the store lacks and no worker has its toolchain, the toolchain is what
  // is refused, so that its client does not upload for nothing.
  bool opening = false;
};

// What the BuildService does with a submitted build, or a part of one,
// before its units go to the scheduler: plans `submitted`, pinning its
// inputs with `pin` for as long as the build runs. A part all of whose
// units are cached is answered from the result cache without reading its
// trees (a launcher sends its unit before uploading its inputs); the
// results found are the ones answered, so none can go between. Otherwise
// its trees are read and checked once and stay trees, expanded by the
// workers that compile them. The errors of ReadBuildPlan, BuildInputs::Read
// and PlanBuild; CANCELLED (and a line in the log) when its client left
// while it was planned.
absl::StatusOr<PlannedPart> PlanPart(const v1::SubmitBuildRequest& submitted,
                                     const Planning& planning, CasPin& pin);

// A part of an open build as a request of its own, for PlanPart: the
// build's name, toolchain and split (`header`) with the part's workspace
// root, units, sets and plan.
v1::SubmitBuildRequest PartRequest(const v1::SubmitBuildRequest& header,
                                   const v1::AddUnitsRequest& part);

// SubmitBuild and AddUnits arrive as bytes: what they would cost parsed is
// judged from those (coordinator/request_cost) on the planning executor
// before they become messages.
using BuildServiceBase = v1::BuildService::WithRawCallbackMethod_SubmitBuild<
    v1::BuildService::WithRawCallbackMethod_AddUnits<v1::BuildService::CallbackService>>;

class BuildService final : public BuildServiceBase {
 public:
  // Builds are planned on `planner`, never inside a reactor. Every call
  // needs the client role in `access`.
  BuildService(const AccessControl* access, CasStore* cas, ResultCache* results,
               const PeakHistory* history, UnitSizeChoices* unit_sizes, BuildScheduler* scheduler,
               BoundedExecutor* planner, BuildLimits limits = {},
               MemoryRelease* memory_release = nullptr)
      : access_(access),
        cas_(cas),
        results_(results),
        history_(history),
        unit_sizes_(unit_sizes),
        scheduler_(scheduler),
        planner_(planner),
        limits_(limits),
        memory_release_(memory_release),
        quota_(PlanningQuota::Make(limits.max_plans_per_client)),
        open_builds_(MakeOpenBuilds()) {}

  grpc::ServerUnaryReactor* GetClusterStatus(grpc::CallbackServerContext* context,
                                             const v1::GetClusterStatusRequest* request,
                                             v1::ClusterStatus* response) override;
  // A v1::SubmitBuildRequest in, v1::BuildEvent out.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* SubmitBuild(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* raw) override;
  // A v1::AddUnitsRequest in, a v1::AddUnitsResponse out.
  grpc::ServerUnaryReactor* AddUnits(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* raw,
                                     grpc::ByteBuffer* raw_response) override;

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
  MemoryRelease* const memory_release_;
  // Shared with the planning tasks, which hold a place each.
  const std::shared_ptr<PlanningQuota> quota_;
  // One of `client`'s planning places, or RESOURCE_EXHAUSTED saying that it
  // has them all.
  absl::StatusOr<std::shared_ptr<void>> PlanningPlace(const std::string& client) const;
  // Notes a request of `bytes` for the memory release if it is large.
  void NoteIfLarge(size_t bytes) const;
  // The planning work of AddUnits: `request` added to its open build.
  absl::StatusOr<int> AddToOpenBuild(const v1::AddUnitsRequest& request, const std::string& client,
                                     const ClientLeft& client_left);
  static std::shared_ptr<OpenBuilds> MakeOpenBuilds();
  // Shared with the streams, which leave it when their call ends.
  const std::shared_ptr<OpenBuilds> open_builds_;
};

}  // namespace distcc_cuda::coordinator
