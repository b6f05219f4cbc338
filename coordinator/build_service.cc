// SPDX-License-Identifier: Apache-2.0
#include "coordinator/build_service.h"

#include <deque>
#include <map>
#include <memory>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "common/digest.h"
#include "common/status.h"
#include "coordinator/build_inputs.h"
#include "coordinator/build_planner.h"

namespace distcc_cuda::coordinator {
namespace {

// Streams one build's events to its client, one write in flight. The
// scheduler pushes events through a handle that outlives the reactor.
class BuildEventStream final : public grpc::ServerWriteReactor<v1::BuildEvent> {
 public:
  // Lets the scheduler push events after the call may have ended.
  // Also keeps the build's blobs in the store while the build runs: its
  // inputs, and its outputs as they come back, until the client has them.
  struct Handle {
    absl::Mutex mu;
    BuildEventStream* stream ABSL_GUARDED_BY(mu) = nullptr;
    std::unique_ptr<CasPin> pin;  // set before the build starts
    void Push(const v1::BuildEvent& event) {
      if (event.has_unit_finished() && pin != nullptr) {
        std::vector<Digest> outputs;
        for (const auto& output : event.unit_finished().result().outputs()) {
          outputs.push_back(FromProto(output.digest()));
        }
        pin->Add(outputs);
      }
      absl::MutexLock lock(&mu);
      if (stream != nullptr) stream->Push(event);
    }
  };

  BuildEventStream(BuildScheduler* scheduler)
      : scheduler_(scheduler), handle_(std::make_shared<Handle>()) {
    absl::MutexLock lock(&handle_->mu);
    handle_->stream = this;
  }

  // Plans the build and hands it to the scheduler. Runs on the planning
  // executor, not in a reactor; the call cannot end before it returns.
  void Start(const v1::SubmitBuildRequest& submitted, CasStore* cas, ResultCache* results,
             const PeakHistory* history, UnitSizeChoices* unit_sizes, const BuildLimits& limits) {
    absl::StatusOr<v1::SubmitBuildRequest> read = ReadBuildPlan(submitted, *cas, limits);
    if (!read.ok()) {
      StartDone("", read.status());
      return;
    }
    const v1::SubmitBuildRequest& request = *read;
    auto is_cached = [results](const std::string& action_digest) {
      return results->Lookup(action_digest).has_value();
    };
    // Nothing to compile: answered from the result cache without reading
    // the trees (a launcher sends its unit before uploading its inputs).
    // The results found are the ones answered, so none can go between.
    std::map<std::string, v1::TaskResult> hits;
    auto hit = [&](const std::string& action_digest) {
      std::optional<v1::TaskResult> result = results->Lookup(action_digest);
      if (result) hits[action_digest] = *std::move(result);
      return result.has_value();
    };
    if (std::optional<std::vector<PlannedUnit>> units =
            PlanCachedBuild(request, history, limits, hit, cas)) {
      std::map<int, v1::TaskResult> cached;
      for (size_t i = 0; i < units->size(); ++i) cached[i] = hits[(*units)[i].action_digest];
      Schedule(request, std::move(*units), std::move(cached), {});
      return;
    }
    // The input trees stay trees: read and checked once here, expanded by
    // the workers that compile them.
    absl::StatusOr<std::unique_ptr<BuildInputs>> trees = BuildInputs::Read(request, *cas, limits);
    if (!trees.ok()) {
      StartDone("", trees.status());
      return;
    }
    std::vector<Digest> inputs = (*trees)->blobs();
    for (const v1::CompileUnit& unit : request.units()) {
      for (const v1::InputFile& input : unit.inputs()) inputs.push_back(FromProto(input.digest()));
    }
    for (const v1::InstantiationSet& set : request.instantiation_sets()) {
      for (const v1::InputFile& input : set.inputs()) inputs.push_back(FromProto(input.digest()));
    }
    handle_->pin = cas->Pin(inputs);
    std::vector<std::string> notes;
    absl::StatusOr<std::vector<PlannedUnit>> units =
        PlanBuild(request, *cas, history, scheduler_->Capacity(request.toolchain().digest()),
                  unit_sizes, limits, is_cached, &notes, trees->get());
    trees->reset();
    if (!units.ok()) {
      StartDone("", units.status());
      return;
    }
    std::map<int, v1::TaskResult> cached;
    for (size_t i = 0; i < units->size(); ++i) {
      if (auto hit = results->Lookup((*units)[i].action_digest)) cached[i] = *hit;
    }
    Schedule(request, std::move(*units), std::move(cached), std::move(notes));
  }

  // Hands the planned units to the scheduler; those in `cached` (by index)
  // are done.
  void Schedule(const v1::SubmitBuildRequest& request, std::vector<PlannedUnit> units,
                std::map<int, v1::TaskResult> cached, std::vector<std::string> notes) {
    std::shared_ptr<Handle> handle = handle_;
    absl::StatusOr<std::string> id = scheduler_->SubmitBuild(
        request.build_name(), request.toolchain(), std::move(units), std::move(cached),
        [handle, notes](const v1::BuildEvent& event) {
          if (!event.has_accepted() || notes.empty()) {
            handle->Push(event);
            return;
          }
          // What planning decided reaches the client with the acceptance.
          v1::BuildEvent accepted = event;
          for (const std::string& note : notes) accepted.mutable_accepted()->add_notes(note);
          handle->Push(accepted);
        },
        absl::Now());
    StartDone(id.ok() ? *id : "", id.status());
  }

  // Ends the call at once, e.g. when the planning executor is full.
  void Reject(const absl::Status& status) { StartDone("", status); }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    if (current_.has_finished()) {
      build_done_ = true;
      FinishLocked(grpc::Status::OK);
      return;
    }
    WriteNext();
  }

  // The client went away or the server is stopping. A write in flight ends
  // with OnWriteDone(false), which finishes the call; an idle stream has to
  // be finished here, or the server would wait for it forever.
  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    if (!writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "build cancelled"));
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&handle_->mu);
      handle_->stream = nullptr;
    }
    std::string build_id;
    bool done;
    {
      absl::MutexLock lock(&mu_);
      build_id = build_id_;
      done = build_done_;
    }
    if (!build_id.empty() && !done) scheduler_->CancelBuild(build_id);
    delete this;
  }

 private:
  void Push(const v1::BuildEvent& event) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    pending_.push_back(event);
    if (!writing_) WriteNext();
  }

  void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (pending_.empty()) return;
    current_ = std::move(pending_.front());
    pending_.pop_front();
    writing_ = true;
    StartWrite(&current_);
  }

  // Finishes the call, or, while Start is still running, leaves that to
  // StartDone: the reactor must outlive Start.
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    if (starting_) {
      deferred_finish_ = status;
    } else {
      Finish(status);
    }
  }

  void StartDone(const std::string& build_id, const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    build_id_ = build_id;
    if (!status.ok()) FinishLocked(ToGrpcStatus(status));
    starting_ = false;
    if (deferred_finish_) Finish(*deferred_finish_);
  }

  BuildScheduler* scheduler_;
  std::shared_ptr<Handle> handle_;
  absl::Mutex mu_;
  std::deque<v1::BuildEvent> pending_ ABSL_GUARDED_BY(mu_);
  v1::BuildEvent current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool build_done_ ABSL_GUARDED_BY(mu_) = false;
  bool starting_ ABSL_GUARDED_BY(mu_) = true;
  std::optional<grpc::Status> deferred_finish_ ABSL_GUARDED_BY(mu_);
  std::string build_id_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerUnaryReactor* BuildService::GetClusterStatus(grpc::CallbackServerContext* context,
                                                         const v1::GetClusterStatusRequest* request,
                                                         v1::ClusterStatus* response) {
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<Principal> principal =
      access_->Authorize(*context, {PeerRole::kClient}, "read the cluster status");
  if (!principal.ok()) {
    reactor->Finish(ToGrpcStatus(principal.status()));
    return reactor;
  }
  *response = scheduler_->Status(absl::Now());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<v1::BuildEvent>* BuildService::SubmitBuild(
    grpc::CallbackServerContext* context, const v1::SubmitBuildRequest* request) {
  absl::StatusOr<Principal> principal =
      access_->Authorize(*context, {PeerRole::kClient}, "submit builds");
  if (!principal.ok()) {
    return RefuseCall<grpc::ServerWriteReactor<v1::BuildEvent>>(ToGrpcStatus(principal.status()));
  }
  auto* stream = new BuildEventStream(scheduler_);
  bool queued = planner_->Submit([this, stream, request] {
    stream->Start(*request, cas_, results_, history_, unit_sizes_, limits_);
  });
  if (!queued) {
    stream->Reject(absl::ResourceExhaustedError(
        "the coordinator is planning too many builds at once; retry in a moment"));
  }
  return stream;
}

}  // namespace distcc_cuda::coordinator
