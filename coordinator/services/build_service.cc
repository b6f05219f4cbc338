// SPDX-License-Identifier: Apache-2.0
#include "coordinator/services/build_service.h"

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/store/digest.h"
#include "coordinator/planning/build_inputs.h"
#include "coordinator/planning/build_planner.h"
#include "coordinator/planning/request_cost.h"
#include "coordinator/services/client_text.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::coordinator {
namespace {

// Lets the scheduler push a build's events after its call may have ended.
// Also keeps the build's blobs in the store while the build runs: its
// inputs, and its outputs as they come back, until the client has them.
class BuildEventStream;
struct BuildEventHandle {
  absl::Mutex mu;
  BuildEventStream* stream ABSL_GUARDED_BY(mu) = nullptr;
  std::unique_ptr<CasPin> pin;  // set before the build starts
  void Push(v1::BuildEvent event);
};

}  // namespace

absl::StatusOr<PlannedPart> PlanPart(const v1::SubmitBuildRequest& submitted,
                                     const Planning& planning, CasPin& pin) {
  ASSIGN_OR_RETURN(v1::SubmitBuildRequest request,
                   ReadBuildPlan(submitted, *planning.cas, planning.limits));
  RETURN_IF_ERROR(CheckClientText(request));
  if (request.entries_expected() < 0 || request.entries_expected() > planning.limits.max_units) {
    return absl::InvalidArgumentError(
        absl::StrCat("entries_expected is ", request.entries_expected(), ": a build holds 0 to ",
                     planning.limits.max_units, " units and sets (--max-units-per-build)"));
  }
  std::map<std::string, v1::TaskResult> hits;
  auto hit = [&](const std::string& action_digest) {
    std::optional<v1::TaskResult> result = planning.results->Lookup(action_digest);
    if (result) hits[action_digest] = *std::move(result);
    return result.has_value();
  };
  PlannedPart part;
  part.entries = request.units_size() + request.instantiation_sets_size();
  if (std::optional<std::vector<PlannedUnit>> units =
          PlanCachedBuild(request, planning.history, planning.limits, hit, planning.cas)) {
    part.units = std::move(*units);
    for (size_t i = 0; i < part.units.size(); ++i) {
      part.cached[i] = hits[part.units[i].action_digest];
    }
    return part;
  }
  // Inputs the store lacks are worth uploading only when a worker can
  // compile them.
  auto unless_unserved = [&](const absl::Status& status) {
    if (!planning.opening || !NamesMissingBlobs(status)) return status;
    absl::Status served = planning.scheduler->ToolchainServed(request.toolchain(), absl::Now());
    return served.ok() ? status : served;
  };
  absl::StatusOr<std::unique_ptr<BuildInputs>> read =
      BuildInputs::Read(request, *planning.cas, planning.limits);
  if (!read.ok()) return unless_unserved(read.status());
  std::unique_ptr<BuildInputs> trees = *std::move(read);
  std::vector<Digest> inputs = trees->blobs();
  for (const v1::CompileUnit& unit : request.units()) {
    for (const v1::InputFile& input : unit.inputs()) inputs.push_back(FromProto(input.digest()));
  }
  for (const v1::InstantiationSet& set : request.instantiation_sets()) {
    for (const v1::InputFile& input : set.inputs()) inputs.push_back(FromProto(input.digest()));
  }
  pin.Add(inputs);
  auto is_cached = [&planning](const std::string& action_digest) {
    return planning.results->Lookup(action_digest).has_value();
  };
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<PlannedUnit>> units =
      PlanBuild(request, *planning.cas, planning.history,
                planning.scheduler->Capacity(request.toolchain().digest()), planning.unit_sizes,
                planning.limits, is_cached, &part.notes, trees.get(), planning.client_left);
  if (absl::IsCancelled(units.status())) {
    spdlog::info("stopped planning build '{}' after {}: its client left", request.build_name(),
                 absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1))));
  }
  if (!units.ok()) return unless_unserved(units.status());
  part.units = *std::move(units);
  trees.reset();
  for (size_t i = 0; i < part.units.size(); ++i) {
    if (auto found = planning.results->Lookup(part.units[i].action_digest)) part.cached[i] = *found;
  }
  return part;
}

v1::SubmitBuildRequest PartRequest(const v1::SubmitBuildRequest& header,
                                   const v1::AddUnitsRequest& part) {
  v1::SubmitBuildRequest request = header;
  request.set_workspace_root(part.workspace_root());
  *request.mutable_units() = part.units();
  *request.mutable_instantiation_sets() = part.instantiation_sets();
  if (part.has_plan()) *request.mutable_plan() = part.plan();
  return request;
}

// A build submitted with more units to follow, while its stream is open:
// who submitted it (only they may add to it), what its parts share, and
// how many units it has.
struct OpenBuild {
  std::string owner;
  v1::SubmitBuildRequest header;  // name, toolchain, split; no units
  std::shared_ptr<BuildEventHandle> handle;
  absl::Mutex mu;  // one part is planned and added at a time
  int64_t units ABSL_GUARDED_BY(mu) = 0;
  int64_t entries ABSL_GUARDED_BY(mu) = 0;  // units and sets as submitted
  int64_t entries_expected = 0;             // SubmitBuildRequest's; 0: not known
};

// The share of an open build still to come when `entries` of the
// `expected` have arrived (0 when the client did not say).
double ShareToCome(int64_t entries, int64_t expected) {
  if (expected <= 0 || entries >= expected) return 0;
  return 1.0 - static_cast<double>(entries) / static_cast<double>(expected);
}

class BuildService::OpenBuilds {
 public:
  void Add(const std::string& id, std::shared_ptr<OpenBuild> build) {
    absl::MutexLock lock(&mu_);
    builds_[id] = std::move(build);
  }
  std::shared_ptr<OpenBuild> Find(const std::string& id) {
    absl::MutexLock lock(&mu_);
    auto found = builds_.find(id);
    return found == builds_.end() ? nullptr : found->second;
  }
  void Remove(const std::string& id) {
    absl::MutexLock lock(&mu_);
    builds_.erase(id);
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<OpenBuild>> builds_ ABSL_GUARDED_BY(mu_);
};

std::shared_ptr<BuildService::OpenBuilds> BuildService::MakeOpenBuilds() {
  return std::make_shared<OpenBuilds>();
}

namespace {

// Streams one build's events to its client, one write in flight. The
// scheduler pushes events through a handle that outlives the reactor.
class BuildEventStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  BuildEventStream(BuildScheduler* scheduler, std::shared_ptr<BuildService::OpenBuilds> open_builds)
      : scheduler_(scheduler),
        open_builds_(std::move(open_builds)),
        handle_(std::make_shared<BuildEventHandle>()) {
    absl::MutexLock lock(&handle_->mu);
    handle_->stream = this;
  }

  // Plans the build and hands it to the scheduler. Runs on the planning
  // executor, not in a reactor; the call cannot end before it returns.
  // A build with more units to follow is open to AddUnits from `owner`
  // while this call lasts.
  void Start(const v1::SubmitBuildRequest& request, const Planning& planning,
             const std::string& owner) {
    handle_->pin = planning.cas->Pin({});
    absl::StatusOr<PlannedPart> part = PlanPart(request, planning, *handle_->pin);
    if (!part.ok()) {
      StartDone("", part.status());
      return;
    }
    std::shared_ptr<BuildEventHandle> handle = handle_;
    std::vector<std::string> notes = std::move(part->notes);
    const int64_t units = part->units.size();
    const int64_t entries = part->entries;
    absl::StatusOr<std::string> id = scheduler_->SubmitBuild(
        request.build_name(), request.toolchain(), std::move(part->units), std::move(part->cached),
        [handle, notes](v1::BuildEvent event) {
          // What planning decided reaches the client with the acceptance.
          if (event.has_accepted()) {
            for (const std::string& note : notes) event.mutable_accepted()->add_notes(note);
          }
          handle->Push(std::move(event));
        },
        absl::Now(), request.more_units_follow());
    if (id.ok() && request.more_units_follow()) {
      auto open = std::make_shared<OpenBuild>();
      open->owner = owner;
      open->header.set_build_name(request.build_name());
      *open->header.mutable_toolchain() = request.toolchain();
      open->header.set_architecture_split(request.architecture_split());
      open->handle = handle_;
      open->entries_expected = request.entries_expected();
      {
        absl::MutexLock lock(&open->mu);
        open->units = units;
        open->entries = entries;
      }
      scheduler_->HoldSlotsForTheRest(*id, ShareToCome(entries, open->entries_expected));
      open_builds_->Add(*id, std::move(open));
    }
    StartDone(id.ok() ? *id : "", id.status());
  }

  // Whether the client has gone (OnCancel): asked while the build is planned.
  bool ClientLeft() const { return client_left_; }

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
    client_left_ = true;  // planning, if it still runs, stops
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
    if (!build_id.empty()) {
      open_builds_->Remove(build_id);
      if (!done) scheduler_->CancelBuild(build_id);
    }
    delete this;
  }

 private:
  friend struct BuildEventHandle;
  void Push(v1::BuildEvent event) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    pending_.push_back(std::move(event));
    // While Start runs, events wait: an open build must be in OpenBuilds
    // before its client hears of it and adds to it.
    if (!writing_ && !starting_) WriteNext();
  }

  void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (pending_.empty()) return;
    current_ = std::move(pending_.front());
    pending_.pop_front();
    writing_ = true;
    current_bytes_ = SerializedBytes(current_);
    StartWrite(&current_bytes_);
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
    if (deferred_finish_) {
      Finish(*deferred_finish_);
      return;
    }
    if (!writing_) WriteNext();
  }

  BuildScheduler* scheduler_;
  std::shared_ptr<BuildService::OpenBuilds> open_builds_;
  std::shared_ptr<BuildEventHandle> handle_;
  std::atomic<bool> client_left_{false};
  absl::Mutex mu_;
  std::deque<v1::BuildEvent> pending_ ABSL_GUARDED_BY(mu_);
  v1::BuildEvent current_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer current_bytes_ ABSL_GUARDED_BY(mu_);  // current_, as written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool build_done_ ABSL_GUARDED_BY(mu_) = false;
  bool starting_ ABSL_GUARDED_BY(mu_) = true;
  std::optional<grpc::Status> deferred_finish_ ABSL_GUARDED_BY(mu_);
  std::string build_id_ ABSL_GUARDED_BY(mu_);
};

void BuildEventHandle::Push(v1::BuildEvent event) {
  if (event.has_unit_finished() && pin != nullptr) {
    std::vector<Digest> outputs;
    for (const auto& output : event.unit_finished().result().outputs()) {
      outputs.push_back(FromProto(output.digest()));
    }
    pin->Add(outputs);
  }
  absl::MutexLock lock(&mu);
  if (stream != nullptr) stream->Push(std::move(event));
}

// Plans a part of the open build `build` and adds its units; returns how
// many it became.
absl::StatusOr<int> AddPart(const std::string& build_id, OpenBuild& build,
                            const v1::AddUnitsRequest& request, const Planning& planning) {
  absl::MutexLock lock(&build.mu);
  ASSIGN_OR_RETURN(PlannedPart planned,
                   PlanPart(PartRequest(build.header, request), planning, *build.handle->pin));
  const int64_t count = planned.units.size();
  if (build.units + count > planning.limits.max_units) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "build ", build_id, " would have ", build.units + count, " units with this part, over the ",
        planning.limits.max_units,
        " a build may have (--max-units-per-build of distcc-cuda-coordinator); split it into "
        "several builds, or raise the limit"));
  }
  build.entries += planned.entries;
  planning.scheduler->HoldSlotsForTheRest(
      build_id, request.last() ? 0 : ShareToCome(build.entries, build.entries_expected));
  RETURN_IF_ERROR(planning.scheduler->AddUnits(build_id, std::move(planned.units),
                                               std::move(planned.cached), std::move(planned.notes),
                                               request.last(), absl::Now()));
  build.units += count;
  return static_cast<int>(count);
}

}  // namespace

absl::StatusOr<std::shared_ptr<void>> BuildService::PlanningPlace(const std::string& client) const {
  std::shared_ptr<void> place = quota_->Take(client);
  if (place != nullptr) return place;
  return absl::ResourceExhaustedError(absl::StrCat(
      "client '", client, "' has ", quota_->per_client(),
      " builds or parts being planned already, the most one client may have at once "
      "(--max-plans-per-client of distcc-cuda-coordinator); wait for one of them to be accepted, "
      "or send fewer at once"));
}

void BuildService::NoteIfLarge(size_t bytes) const {
  if (memory_release_ != nullptr && static_cast<int64_t>(bytes) > kLargeRequestBytes) {
    memory_release_->Note(absl::Now());
  }
}

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

grpc::ServerWriteReactor<grpc::ByteBuffer>* BuildService::SubmitBuild(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  absl::StatusOr<Principal> principal =
      access_->Authorize(*context, {PeerRole::kClient}, "submit builds");
  if (!principal.ok()) {
    return RefuseCall<grpc::ServerWriteReactor<grpc::ByteBuffer>>(ToGrpcStatus(principal.status()));
  }
  absl::StatusOr<std::shared_ptr<void>> place = PlanningPlace(principal->name);
  if (!place.ok()) {
    return RefuseCall<grpc::ServerWriteReactor<grpc::ByteBuffer>>(ToGrpcStatus(place.status()));
  }
  // The bytes are the task's own: `raw` is gone once the stream ends.
  auto bytes = std::make_shared<const std::string>(BytesOf(*raw));
  NoteIfLarge(bytes->size());
  auto* stream = new BuildEventStream(scheduler_, open_builds_);
  bool queued =
      planner_->Submit([this, stream, bytes, owner = principal->name, place = *std::move(place)] {
        v1::SubmitBuildRequest request;
        absl::Status parsed = ParseRequest(*bytes, &limits_, "the SubmitBuild request", request);
        if (!parsed.ok()) {
          stream->Reject(parsed);
        } else {
          scheduler_->metrics().ScansReported(request.scan_micros(), limits_.max_units);
          stream->Start(request,
                        Planning{cas_, results_, history_, unit_sizes_, scheduler_, limits_,
                                 [stream] { return stream->ClientLeft(); }, /*opening=*/true},
                        owner);
        }
        NoteIfLarge(bytes->size());
      });
  if (!queued) {
    stream->Reject(absl::ResourceExhaustedError(
        "the coordinator is planning too many builds at once; retry in a moment"));
  }
  return stream;
}

absl::StatusOr<int> BuildService::AddToOpenBuild(const v1::AddUnitsRequest& request,
                                                 const std::string& client,
                                                 const ClientLeft& client_left) {
  std::shared_ptr<OpenBuild> build = open_builds_->Find(request.build_id());
  if (build == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "build '", TerminalSafe(request.build_id().substr(0, 64)),
        "' is not open here: it was not submitted with more units to follow, it ended, its "
        "client went away, or the coordinator restarted; submit it again"));
  }
  if (build->owner != client) {
    return absl::PermissionDeniedError(
        absl::StrCat("build ", TerminalSafe(request.build_id().substr(0, 64)),
                     " was submitted by another client; only that client may add units to it"));
  }
  scheduler_->metrics().ScansReported(request.scan_micros(), limits_.max_units);
  return AddPart(request.build_id(), *build, request,
                 Planning{cas_, results_, history_, unit_sizes_, scheduler_, limits_, client_left});
}

grpc::ServerUnaryReactor* BuildService::AddUnits(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* raw,
                                                 grpc::ByteBuffer* raw_response) {
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<Principal> principal =
      access_->Authorize(*context, {PeerRole::kClient}, "add units to a build");
  if (!principal.ok()) {
    reactor->Finish(ToGrpcStatus(principal.status()));
    return reactor;
  }
  absl::StatusOr<std::shared_ptr<void>> place = PlanningPlace(principal->name);
  if (!place.ok()) {
    reactor->Finish(ToGrpcStatus(place.status()));
    return reactor;
  }
  NoteIfLarge(raw->Length());
  bool queued = planner_->Submit([this, context, raw, raw_response, reactor,
                                  client = principal->name, place = *std::move(place)] {
    v1::AddUnitsRequest request;
    absl::Status status = ParseRequest(*raw, &limits_, "the AddUnits request", request);
    if (status.ok()) {
      absl::StatusOr<int> added =
          AddToOpenBuild(request, client, [context] { return context->IsCancelled(); });
      status = added.status();
      if (added.ok()) {
        v1::AddUnitsResponse response;
        response.set_units(*added);
        *raw_response = SerializedBytes(response);
      }
    }
    NoteIfLarge(raw->Length());
    reactor->Finish(ToGrpcStatus(status));
  });
  if (!queued) {
    reactor->Finish(ToGrpcStatus(absl::ResourceExhaustedError(
        "the coordinator is planning too many builds at once; retry in a moment")));
  }
  return reactor;
}

}  // namespace distcc_cuda::coordinator
