// SPDX-License-Identifier: Apache-2.0
#include "coordinator/reapi/reapi_execution_service.h"

#include <atomic>
#include <optional>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/status.h"
#include "coordinator/planning/planning_quota.h"
#include "coordinator/reapi/reapi_action.h"
#include "coordinator/reapi/reapi_cas_service.h"
#include "coordinator/reapi/reapi_operations.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::coordinator {
namespace {

// The platform an Action asks for: its own, or (REAPI before 2.2) its
// Command's.
const reapi::Platform& PlatformOf(const reapi::Action& action, const reapi::Command& command) {
  return action.has_platform() ? action.platform() : command.platform();
}

// What an Execute needs to know of its Action before it plans it.
struct ReadAction {
  reapi::Action action;
  reapi::Command command;
  v1::ToolchainFingerprint toolchain;
};

absl::StatusOr<ReadAction> ReadActionOf(const reapi::Digest& digest, const Planning& planning) {
  ReadAction read;
  RETURN_IF_ERROR(ReadMessageBlob(*planning.cas, digest, "the action", read.action));
  RETURN_IF_ERROR(ReadMessageBlob(*planning.cas, read.action.command_digest(),
                                  "the action's command", read.command));
  ASSIGN_OR_RETURN(read.toolchain, ChooseToolchain(PlatformOf(read.action, read.command),
                                                   planning.scheduler->Toolchains()));
  return read;
}

// The result this coordinator earned for the Action `action_hash` with
// `toolchain`, if it still has it whole: its unit's result, by the alias
// Execute left (forgotten or revoked with the unit's own entry).
std::optional<v1::TaskResult> EarnedResult(const Planning& planning, const std::string& action_hash,
                                           const v1::ToolchainFingerprint& toolchain) {
  std::optional<v1::TaskResult> found = planning.results->LookupAlias(action_hash);
  if (!found || found->toolchain_digest() != toolchain.digest()) return std::nullopt;
  return found;
}

// Whether `result` may answer its Action from now on: a compile that ran to
// the end and succeeded.
bool Cacheable(const v1::TaskResult& result) {
  return result.outcome() == v1::TASK_COMPLETED && result.exit_code() == 0;
}

// Takes the events of an Action's one-unit build to its operation. Events
// come under the scheduler's lock: the stages are noted at once, the
// unit's end (its stdout and stderr stored, its alias written) on `io`.
class ExecutionEvents {
 public:
  // `alias_of`: the unit's action digest, to be the Action's alias; "" when
  // the Action is not to be cached.
  ExecutionEvents(std::shared_ptr<ReapiOperation> operation, const Planning& planning,
                  std::string action_hash, std::string alias_of, CasPin* pin, ReapiMetrics* metrics,
                  BoundedExecutor* io)
      : operation_(std::move(operation)),
        planning_(planning),
        action_hash_(std::move(action_hash)),
        alias_of_(std::move(alias_of)),
        pin_(pin),
        metrics_(metrics),
        io_(io),
        unit_seen_(std::make_shared<std::atomic<bool>>(false)) {}

  void operator()(const v1::BuildEvent& event) {
    if (event.has_accepted()) {
      operation_->Stage(reapi::ExecutionStage::QUEUED);
    } else if (event.has_unit_started()) {
      operation_->Stage(reapi::ExecutionStage::EXECUTING);
    } else if (event.has_unit_finished()) {
      *unit_seen_ = true;
      RunOnOrHere(io_,
                  [self = *this, finished = event.unit_finished()] { self.Finished(finished); });
    } else if (event.has_finished() && !*unit_seen_) {
      absl::Status failed = absl::InternalError(
          absl::StrCat("the action's build ended without a result: ", event.finished().message()));
      metrics_->Ended(failed);
      operation_->Fail(failed);
    }
  }

 private:
  void Finished(const v1::BuildEvent::UnitFinished& finished) const {
    const v1::TaskResult& result = finished.result();
    std::vector<Digest> outputs;
    for (const v1::OutputFile& output : result.outputs()) {
      outputs.push_back(FromProto(output.digest()));
    }
    pin_->Add(outputs);
    absl::StatusOr<reapi::ExecuteResponse> response =
        ExecuteResponseOf(result, finished.unit(), finished.cached(), *planning_.cas);
    if (!response.ok()) {
      metrics_->Ended(response.status());
      operation_->Fail(response.status());
      return;
    }
    if (finished.cached()) {
      metrics_->Cached();
    } else {
      metrics_->Compiled();
    }
    // The Action's own cache entry: only for a result a worker earned.
    if (!alias_of_.empty() && Cacheable(result)) {
      planning_.results->RecordAlias(action_hash_, alias_of_);
    }
    operation_->Finish(*response);
  }

  std::shared_ptr<ReapiOperation> operation_;
  Planning planning_;
  std::string action_hash_;
  std::string alias_of_;
  CasPin* pin_;
  ReapiMetrics* metrics_;
  BoundedExecutor* io_;
  std::shared_ptr<std::atomic<bool>> unit_seen_;  // shared by the sink's copies
};

// An action's memory figure is its units' prediction where nothing like
// them was measured here (the defaults, or a profile of their kind).
void TakeHint(int64_t peak_bytes, std::vector<PlannedUnit>& units) {
  for (PlannedUnit& planned : units) {
    if (planned.demand.basis > PredictionBasis::kPrior) continue;
    planned.demand.peak_bytes = peak_bytes;
    planned.demand.source = "the action's platform";
  }
}

// Reads, checks and plans the Action of `request` and hands its unit to
// the scheduler; the operation ends when the unit does. An error is what
// the operation ends with.
absl::Status StartExecution(const reapi::ExecuteRequest& request, const Planning& planning,
                            const std::shared_ptr<ReapiOperation>& operation, ReapiMetrics* metrics,
                            BoundedExecutor* io) {
  ASSIGN_OR_RETURN(ReadAction read, ReadActionOf(request.action_digest(), planning));
  const std::string& action_hash = request.action_digest().hash();
  const bool cache = !read.action.do_not_cache();
  if (cache && !request.skip_cache_lookup()) {
    if (std::optional<v1::TaskResult> earned =
            EarnedResult(planning, action_hash, read.toolchain)) {
      v1::CompileUnit named;
      named.set_name(action_hash.substr(0, 12));
      ASSIGN_OR_RETURN(reapi::ExecuteResponse response,
                       ExecuteResponseOf(*earned, named, /*cached=*/true, *planning.cas));
      metrics->Cached();
      operation->Finish(response);
      return absl::OkStatus();
    }
  }
  // Pinned before anything is written: the converted folders too.
  CasPin* pin = operation->Hold(planning.cas->Pin({}));
  ASSIGN_OR_RETURN(Digest root, ConvertInputRoot(*planning.cas, read.action.input_root_digest(),
                                                 planning.limits, *pin));
  ASSIGN_OR_RETURN(v1::SubmitBuildRequest build, UnitBuildOf(read.command, root, read.toolchain));
  Planning opening = planning;
  opening.opening = true;
  ASSIGN_OR_RETURN(PlannedPart part, PlanPart(build, opening, *pin));
  ASSIGN_OR_RETURN(std::optional<int64_t> hint, MemoryHint(PlatformOf(read.action, read.command)));
  if (hint) TakeHint(*hint, part.units);
  if (!cache || request.skip_cache_lookup()) part.cached.clear();
  // do_not_cache: its result stays out of the unit's cache too.
  for (PlannedUnit& planned : part.units) planned.cacheable = planned.cacheable && cache;
  const std::string alias_of =
      cache && part.units.size() == 1 ? part.units[0].action_digest : std::string();
  ExecutionEvents events(operation, planning, action_hash, alias_of, pin, metrics, io);
  absl::StatusOr<std::string> id = planning.scheduler->SubmitBuild(
      build.build_name(), read.toolchain, std::move(part.units), std::move(part.cached),
      [events](v1::BuildEvent event) mutable { events(event); }, absl::Now());
  if (id.ok()) spdlog::info("REAPI {} runs as build {}", operation->name(), *id);
  return id.status();
}

}  // namespace

ReapiMetrics::ReapiMetrics(prometheus::Registry& registry) {
  auto& executions = prometheus::BuildCounter()
                         .Name("distcc_cuda_reapi_executions_total")
                         .Help(
                             "Remote Execution API actions executed, by how they ended: "
                             "compiled on a worker, answered from the cache, refused "
                             "(an argument, a missing blob, no worker with the toolchain) or "
                             "failed")
                         .Register(registry);
  compiled_ = &executions.Add({{"outcome", "compiled"}});
  cached_ = &executions.Add({{"outcome", "cached"}});
  refused_ = &executions.Add({{"outcome", "refused"}});
  failed_ = &executions.Add({{"outcome", "failed"}});
  auto& lookups = prometheus::BuildCounter()
                      .Name("distcc_cuda_reapi_action_cache_lookups_total")
                      .Help(
                          "Remote Execution API action-cache lookups (GetActionResult), by "
                          "whether an earned result was found")
                      .Register(registry);
  hits_ = &lookups.Add({{"result", "hit"}});
  misses_ = &lookups.Add({{"result", "miss"}});
}

void ReapiMetrics::Ended(const absl::Status& why) {
  bool refused = absl::IsInvalidArgument(why) || absl::IsFailedPrecondition(why);
  (refused ? refused_ : failed_)->Increment();
}

ReapiExecution::ReapiExecution(const AccessControl* access, Planning planning,
                               BoundedExecutor* planner, BoundedExecutor* io, ReapiMetrics* metrics)
    : access_(access),
      planning_(std::move(planning)),
      planner_(planner),
      io_(io),
      metrics_(metrics),
      quota_(PlanningQuota::Make(planning_.limits.max_plans_per_client)),
      operations_(std::make_shared<ReapiOperations>()) {}

ReapiExecution::~ReapiExecution() = default;

grpc::ServerWriteReactor<google::longrunning::Operation>* ReapiExecution::Execute(
    grpc::CallbackServerContext* context, const reapi::ExecuteRequest* request) {
  using Reactor = grpc::ServerWriteReactor<google::longrunning::Operation>;
  absl::StatusOr<Principal> principal =
      access_->Authorize(*context, {PeerRole::kClient}, "execute actions");
  if (!principal.ok()) return RefuseCall<Reactor>(ToGrpcStatus(principal.status()));
  // Nothing of a malformed digest is kept, not even as an operation.
  if (absl::Status valid = ValidateDigest(FromReapi(request->action_digest())); !valid.ok()) {
    return RefuseCall<Reactor>(ToGrpcStatus(Annotate(valid, "the action's digest")));
  }
  // As many at once per client as builds being planned (--max-plans-per-client).
  std::shared_ptr<void> place = quota_->Take(principal->name);
  if (place == nullptr) {
    return RefuseCall<Reactor>(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat(
            "client '", principal->name, "' has ", quota_->per_client(),
            " actions or builds being planned already, the most one client may have at "
            "once (--max-plans-per-client of distcc-cuda-coordinator); retry in a moment")));
  }
  std::shared_ptr<ReapiOperation> operation = operations_->Start(request->action_digest());
  Reactor* stream = operation->Follow();
  // The request is the call's: copied for the task, which may outlive it.
  bool queued = planner_->Submit([planning = planning_, operation, request = *request,
                                  metrics = metrics_, io = io_, place = std::move(place)] {
    absl::Status started = StartExecution(request, planning, operation, metrics, io);
    if (!started.ok()) {
      metrics->Ended(started);
      operation->Fail(started);
    }
  });
  if (!queued) {
    absl::Status busy = absl::ResourceExhaustedError(
        "the coordinator is planning too many builds at once; retry in a moment");
    metrics_->Ended(busy);
    operation->Fail(busy);
  }
  return stream;
}

grpc::ServerWriteReactor<google::longrunning::Operation>* ReapiExecution::WaitExecution(
    grpc::CallbackServerContext* context, const reapi::WaitExecutionRequest* request) {
  using Reactor = grpc::ServerWriteReactor<google::longrunning::Operation>;
  if (absl::Status allowed = AuthorizeReapiClient(*access_, *context, "follow executions");
      !allowed.ok()) {
    return RefuseCall<Reactor>(ToGrpcStatus(allowed));
  }
  std::shared_ptr<ReapiOperation> operation = operations_->Find(request->name());
  if (operation == nullptr) {
    return RefuseCall<Reactor>(grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("no operation '", absl::CHexEscape(request->name().substr(0, 100)),
                     "' here: it was never started on this coordinator, or it ended long ago or "
                     "before a restart; execute the action again")));
  }
  return operation->Follow();
}

grpc::ServerUnaryReactor* ReapiActionCache::GetActionResult(
    grpc::CallbackServerContext* context, const reapi::GetActionResultRequest* request,
    reapi::ActionResult* response) {
  // The store and the cache are read from disk: on io_.
  return ServeReapiCall(
      *access_, context, "read the action cache", io_, [this, request, response]() -> absl::Status {
        absl::StatusOr<ReadAction> read = ReadActionOf(request->action_digest(), planning_);
        // An Action this coordinator cannot read or run has no result here.
        if (!read.ok()) return absl::NotFoundError(read.status().message());
        std::optional<v1::TaskResult> earned =
            EarnedResult(planning_, request->action_digest().hash(), read->toolchain);
        metrics_->Lookup(earned.has_value());
        if (!earned) return absl::NotFoundError("no result for this action");
        v1::CompileUnit named;
        named.set_name(request->action_digest().hash().substr(0, 12));
        ASSIGN_OR_RETURN(*response, ActionResultOf(*earned, named, *planning_.cas));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ReapiActionCache::UpdateActionResult(
    grpc::CallbackServerContext* context, const reapi::UpdateActionResultRequest*,
    reapi::ActionResult*) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      "this action cache holds only results that distcc-cuda's workers earned; clients do not "
      "write it (Bazel: --noremote_upload_local_results)"));
  return reactor;
}

}  // namespace distcc_cuda::coordinator
