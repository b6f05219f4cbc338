// SPDX-License-Identifier: Apache-2.0
#include "client/stages/build_submission.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/scan/dependency_scan.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/nvcc_args.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

// How long the coordinator may take to plan one part (a part of 55,000
// CUTLASS units takes seconds).
constexpr absl::Duration kPartDeadline = absl::Minutes(10);

// Whether a part failed because the coordinator went away (or restarted and
// no longer knows the build), rather than because of what it carried.
bool CoordinatorLost(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsNotFound(status) || absl::IsCancelled(status);
}

// `local` as a unit of the protocol in `layout`, its inputs in a tree.
absl::Status AddUnit(const LocalUnit& local, const WorkspaceLayout& layout,
                     const ToolkitPlaces& toolkit, const std::vector<std::string>& system_prefixes,
                     WorkspaceFiles& files, v1::AddUnitsRequest& part) {
  v1::CompileUnit* unit = part.add_units();
  unit->set_name(local.name);
  PlaceUnit(*unit, layout, local.directory);
  ASSIGN_OR_RETURN(std::vector<std::string> flags,
                   RelativeFlags(local.flags, local.directory, layout, toolkit));
  for (const std::string& flag : flags) unit->add_arguments(flag);
  std::string object = fs::path(local.source).filename().string() + ".o";
  for (const std::string& argument :
       {std::string("-c"),
        NamedFrom(AbsolutePath(local.source, local.directory), local.directory, layout),
        std::string("-o"), object}) {
    unit->add_arguments(argument);
  }
  unit->add_output_paths(object);
  return AddUnitInputs(*unit, local.closure, AbsolutePath(local.source, local.directory), layout,
                       files, system_prefixes);
}

// `local` as an instantiation set of the protocol in `layout`.
absl::Status AddSet(const LocalSet& local, const WorkspaceLayout& layout,
                    const ToolkitPlaces& toolkit, const std::vector<std::string>& system_prefixes,
                    WorkspaceFiles& files, v1::AddUnitsRequest& part) {
  v1::InstantiationSet* set = part.add_instantiation_sets();
  *set = local.set;
  set->set_directory(layout.InTree(local.directory));
  ASSIGN_OR_RETURN(std::vector<std::string> flags,
                   RelativeFlags(local.flags, local.directory, layout, toolkit));
  for (const std::string& flag : flags) set->add_arguments(flag);
  std::vector<std::string> arguments = flags;
  arguments.insert(arguments.end(), {"-c", "unit.cu", "-o", "unit.o"});
  RETURN_IF_ERROR(
      Annotate(ValidateCompileArguments(arguments, {"/", set->directory(), system_prefixes}),
               absl::StrCat("instantiation set ", set->name())));
  std::set<std::string> seen;
  for (const std::string& path : local.closure) {
    if (!seen.insert(path).second) continue;
    ASSIGN_OR_RETURN(*set->add_inputs(), InputFor(path, layout, files));
  }
  return MoveIntoInputTree(*set->mutable_inputs(), *set->mutable_input_root(), files);
}

}  // namespace

v1::SubmitBuildRequest OpeningRequest(const std::string& build_name,
                                      const v1::ToolchainFingerprint& toolchain,
                                      v1::ArchitectureSplit split) {
  v1::SubmitBuildRequest request;
  request.set_build_name(build_name);
  *request.mutable_toolchain() = toolchain;
  request.set_architecture_split(split);
  request.set_more_units_follow(true);
  return request;
}

absl::Status OlderCoordinatorError(const std::string& address) {
  return absl::FailedPreconditionError(absl::StrCat(
      "the coordinator at ", address,
      " does not take a build in parts as its units are scanned (it is of an older distcc-cuda "
      "release); update the coordinator to this client's release"));
}

BuildSubmission::BuildSubmission(LocalPlan& plan, SubmissionSettings settings,
                                 std::shared_ptr<grpc::Channel> channel,
                                 std::function<void(const absl::Status&)> on_error)
    : plan_(plan),
      settings_(std::move(settings)),
      channel_(std::move(channel)),
      stub_(v1::BuildService::NewStub(channel_)),
      cas_(v1::ContentStore::NewStub(channel_)),
      on_error_(std::move(on_error)),
      excluded_(ExcludedPrefixes(settings_.nvcc)),
      toolkit_(PlacesOfToolkit(ToolkitRoots(settings_.nvcc))),
      system_prefixes_(SystemIncludePrefixes()) {
  system_prefixes_.insert(system_prefixes_.end(), excluded_.begin(), excluded_.end());
  const size_t jobs = plan_.units.size() + plan_.sets.size();
  {
    absl::MutexLock lock(&mu_);
    figures_.scan_began = absl::Now();
    if (jobs == 0) figures_.scan_ended = figures_.scan_began;
  }
  const size_t parallel = std::min<size_t>(std::max(1, settings_.scan_slots), jobs);
  for (size_t i = 0; i < parallel; ++i) scanners_.emplace_back(&BuildSubmission::ScanLoop, this);
}

BuildSubmission::~BuildSubmission() { Finish().IgnoreError(); }

absl::StatusOr<WorkspaceLayout> BuildSubmission::LayoutOf(size_t job, OutsideFiles* outside) {
  const bool is_unit = job < plan_.units.size();
  const LocalSet* set = is_unit ? nullptr : &plan_.sets[job - plan_.units.size()];
  const std::string& directory = is_unit ? plan_.units[job].directory : set->directory;
  const std::vector<std::string>& flags = is_unit ? plan_.units[job].flags : set->flags;
  auto [anchors, added] = anchors_.try_emplace({directory, flags});
  if (added) anchors->second = NamedInputPaths(directory, flags, excluded_);
  return LayoutFor(plan_.workspace, is_unit ? plan_.units[job].closure : set->closure,
                   anchors->second, settings_.absolute_paths, outside,
                   is_unit ? plan_.units[job].build_folder : "");
}

absl::Status BuildSubmission::Scan(size_t job) {
  ScanCache* cache = settings_.scan_cache;
  if (job < plan_.units.size()) {
    LocalUnit& unit = plan_.units[job];
    ASSIGN_OR_RETURN(unit.closure,
                     ScanInputClosure(settings_.nvcc, unit.directory, unit.flags, unit.source,
                                      excluded_, cache, plan_.workspace));
    if (unit.closure.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unit ", unit.name, ": nvcc reported no inputs for ", unit.source));
    }
    return CheckClosure(absl::StrCat("unit ", unit.name), unit.closure);
  }
  LocalSet& set = plan_.sets[job - plan_.units.size()];
  for (const std::string& header : set.set.headers()) {
    ASSIGN_OR_RETURN(std::vector<std::string> files,
                     ScanInputClosure(settings_.nvcc, set.directory, set.flags, header, excluded_,
                                      cache, plan_.workspace));
    set.closure.insert(set.closure.end(), files.begin(), files.end());
  }
  return CheckClosure(absl::StrCat("instantiation set ", set.set.name()), set.closure);
}

void BuildSubmission::ScanLoop() {
  const size_t jobs = plan_.units.size() + plan_.sets.size();
  for (;;) {
    size_t job;
    {
      absl::MutexLock lock(&mu_);
      if (stop_ || next_job_ >= jobs) return;
      job = next_job_++;
    }
    std::optional<MachineSlots::Held> machine_slot;
    if (settings_.machine_slots != nullptr) machine_slot = settings_.machine_slots->Acquire();
    const absl::Time began = absl::Now();
    absl::Status status = Scan(job);
    machine_slot.reset();
    if (!status.ok()) {
      Fail(status);
      return;
    }
    const int64_t took = absl::ToInt64Microseconds(absl::Now() - began);
    absl::MutexLock lock(&mu_);
    ready_.push_back(job);
    scan_micros_.push_back(took);
    if (++scanned_ == jobs) {
      figures_.scan_ended = absl::Now();
      if (settings_.scan_cache != nullptr) figures_.scans_cached = settings_.scan_cache->hits();
    }
  }
}

void BuildSubmission::SendTo(const std::string& build_id) {
  {
    absl::MutexLock lock(&mu_);
    build_id_ = build_id;
  }
  maker_ = std::thread(&BuildSubmission::MakeLoop, this);
  adder_ = std::thread(&BuildSubmission::AddLoop, this);
}

void BuildSubmission::Reopen(const std::string& build_id) {
  absl::MutexLock lock(&mu_);
  reopened_as_ = build_id;
}

bool BuildSubmission::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

BuildSubmission::Figures BuildSubmission::figures() const {
  absl::MutexLock lock(&mu_);
  return figures_;
}

std::string BuildSubmission::ToLocalText(absl::string_view text,
                                         const std::string& directory) const {
  std::string root;
  InputRoots input_roots;
  {
    absl::MutexLock lock(&mu_);
    if (settings_.absolute_paths || figures_.roots.empty()) return std::string(text);
    root = figures_.roots.front();
    input_roots = figures_.input_roots;
  }
  WorkspaceLayout layout = WorkspaceLayout::Relocated(root);
  for (const auto& [local, input_root] : input_roots) layout.AddInputRoot(input_root);
  return layout.ToLocalText(text, directory);
}

void BuildSubmission::Fail(const absl::Status& failed) {
  // A coordinator without AddUnits or a content store (one of an older
  // release) says UNIMPLEMENTED to whichever call reaches it first: the
  // part's upload or the part.
  const absl::Status status =
      absl::IsUnimplemented(failed) ? OlderCoordinatorError(settings_.address) : failed;
  {
    absl::MutexLock lock(&mu_);
    if (!error_.ok() || stop_) return;
    error_ = status;
    stop_ = true;
  }
  if (on_error_) on_error_(status);
}

absl::Status BuildSubmission::Finish() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& scanner : scanners_) {
    if (scanner.joinable()) scanner.join();
  }
  if (maker_.joinable()) maker_.join();
  if (adder_.joinable()) adder_.join();
  absl::MutexLock lock(&mu_);
  return error_;
}

void BuildSubmission::MakeLoop() {
  const size_t jobs = plan_.units.size() + plan_.sets.size();
  // Something to do: stop, or make a part of what was scanned (the last,
  // empty if need be, once every scan is done).
  auto has_work = [this, jobs]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || !ready_.empty() || (scanned_ == jobs && !last_made_);
  };
  for (;;) {
    std::vector<size_t> part;
    std::vector<int64_t> scan_micros;
    bool last;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&has_work));
      if (stop_ || last_made_) return;
      part.swap(ready_);
      scan_micros.swap(scan_micros_);
      last = scanned_ == jobs;
      // In the plan's order, whichever scan ended first: units predicted
      // alike are queued in that order.
      std::sort(part.begin(), part.end());
    }
    absl::Status status = MakePart(part, last, scan_micros);
    if (status.ok()) continue;
    if (!settings_.wait_for_reopen || !CoordinatorLost(status)) {
      Fail(status);
      return;
    }
    // The coordinator went away: the caller reconnects and reopens the
    // build, whose parts go again with every input made (UploadAll); these
    // jobs wait for the next part.
    {
      absl::MutexLock lock(&mu_);
      ready_.insert(ready_.begin(), part.begin(), part.end());
      scan_micros_.insert(scan_micros_.begin(), scan_micros.begin(), scan_micros.end());
      lost_ = true;
    }
    if (settings_.on_lost) settings_.on_lost();
    absl::MutexLock lock(&mu_);
    auto back = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !lost_; };
    mu_.Await(absl::Condition(&back));
  }
}

absl::Status BuildSubmission::MakePart(const std::vector<size_t>& jobs, bool last,
                                       const std::vector<int64_t>& scan_micros) {
  Figures::Part span;
  span.began = absl::Now();
  span.units = jobs.size();
  absl::MutexLock files_lock(&files_mu_);
  // One part per workspace root (nearly always one), in the order its
  // first unit was scanned.
  std::map<std::string, v1::AddUnitsRequest> parts;
  std::vector<std::string> order;
  for (size_t job : jobs) {
    const bool is_unit = job < plan_.units.size();
    const LocalSet* set = is_unit ? nullptr : &plan_.sets[job - plan_.units.size()];
    OutsideFiles outside;
    ASSIGN_OR_RETURN(WorkspaceLayout layout, LayoutOf(job, &outside));
    const std::string& root = layout.root();
    auto [part, added] = parts.try_emplace(root);
    if (added) {
      order.push_back(root);
      part->second.set_workspace_root("/");
    }
    RootFiles& files = roots_[root];
    MergeOutsideFiles(outside, files.outside);
    MergeInputRoots(layout, files.input_roots);
    if (!files.files.known_digest && settings_.scan_cache != nullptr) {
      ScanCache* cache = settings_.scan_cache;
      files.files.known_digest = [cache](const std::string& path) {
        return cache->KnownDigest(path);
      };
    }
    RETURN_IF_ERROR(
        is_unit ? AddUnit(plan_.units[job], layout, toolkit_, system_prefixes_, files.files,
                          part->second)
                : AddSet(*set, layout, toolkit_, system_prefixes_, files.files, part->second));
    ++files.units;
  }
  if (order.empty()) {  // the last part, after every unit went
    order.push_back(plan_.workspace);
    parts[plan_.workspace].set_workspace_root("/");
  }
  int uploaded = 0, input_files = 0;
  std::vector<std::shared_ptr<const MadePart>> made;
  for (size_t i = 0; i < order.size(); ++i) {
    v1::AddUnitsRequest& part = parts[order[i]];
    RootFiles& files = roots_[order[i]];
    part.set_last(last && i + 1 == order.size());
    if (i == 0) part.mutable_scan_micros()->Add(scan_micros.begin(), scan_micros.end());
    auto sent = std::make_shared<MadePart>();
    if (PackLargeBuild(part, files.files)) {
      sent->plan_blob = std::move(files.files.plan.back());
      files.files.plan.clear();
    }
    sent->request = std::move(part);
    // The files and folders that came with this part, files first.
    std::vector<BlobSource> blobs(files.files.blobs.begin() + files.blobs_sent,
                                  files.files.blobs.end());
    ASSIGN_OR_RETURN(int sent_files, cas_.UploadMissing(blobs));
    files.blobs_sent = files.files.blobs.size();
    std::vector<BlobSource> folders(files.files.folders.begin() + files.folders_sent,
                                    files.files.folders.end());
    RETURN_IF_ERROR(cas_.UploadMissing(folders).status());
    files.folders_sent = files.files.folders.size();
    if (sent->plan_blob) RETURN_IF_ERROR(cas_.UploadMissing({*sent->plan_blob}).status());
    uploaded += sent_files;
    input_files += blobs.size();
    made.push_back(std::move(sent));
  }
  absl::MutexLock lock(&mu_);
  // Final before the last part goes: its client reads them when the
  // coordinator says it has the build.
  figures_.units += jobs.size();
  figures_.uploaded += uploaded;
  figures_.input_files += input_files;
  span.sent = absl::Now();
  figures_.parts.push_back(span);
  std::vector<std::pair<int, std::string>> by_units;
  for (const auto& [root, files] : roots_) by_units.emplace_back(-files.units, root);
  std::sort(by_units.begin(), by_units.end());
  figures_.roots.clear();
  for (const auto& [units, root] : by_units) figures_.roots.push_back(root);
  figures_.outside.clear();
  figures_.workspaces.clear();
  figures_.input_roots.clear();
  for (const auto& [root, files] : roots_) {
    figures_.workspaces[root] = files.units;
    MergeOutsideFiles(files.outside, figures_.outside);
    figures_.input_roots.insert(files.input_roots.begin(), files.input_roots.end());
  }
  if (!settings_.absolute_paths) MergeToolkitRoot(toolkit_, figures_.input_roots);
  for (auto& part : made) parts_.push_back(std::move(part));
  last_made_ = last;
  return absl::OkStatus();
}

void BuildSubmission::AddLoop() {
  // Something to do: stop, reopen, or add the next part made.
  auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stop_ || !reopened_as_.empty()) return true;
    return !lost_ && !build_id_.empty() && added_ < parts_.size();
  };
  for (;;) {
    std::shared_ptr<const MadePart> part;
    bool reopened = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&has_work));
      if (stop_) return;
      if (!reopened_as_.empty()) {
        build_id_ = std::move(reopened_as_);
        reopened_as_.clear();
        added_ = 0;
        reopened = true;
      } else {
        part = parts_[added_];
      }
    }
    absl::Status status =
        reopened ? UploadAll() : Add(part->request, part->plan_blob ? &*part->plan_blob : nullptr);
    const bool lost = !status.ok() && settings_.wait_for_reopen && CoordinatorLost(status);
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      if (status.ok() && reopened) {
        lost_ = false;  // the maker goes on too
      } else if (status.ok()) {
        ++added_;
        if (part->request.last()) closed_ = true;
      } else if (lost) {
        lost_ = true;
      }
    }
    if (status.ok()) continue;
    if (lost) {
      // The caller reconnects and reopens the build; every part goes again.
      if (settings_.on_lost) settings_.on_lost();
      continue;
    }
    Fail(status);
    return;
  }
}

absl::Status BuildSubmission::UploadAll() {
  absl::MutexLock files_lock(&files_mu_);
  for (auto& [root, files] : roots_) {
    RETURN_IF_ERROR(UploadWorkspace(cas_, files.files).status());
    files.blobs_sent = files.files.blobs.size();
    files.folders_sent = files.files.folders.size();
  }
  return absl::OkStatus();
}

absl::Status BuildSubmission::Add(const v1::AddUnitsRequest& part, const BlobSource* plan_blob) {
  // Present unless the coordinator lost it (a restart): then sent again.
  if (plan_blob != nullptr) RETURN_IF_ERROR(cas_.UploadMissing({*plan_blob}).status());
  v1::AddUnitsRequest request = part;
  {
    absl::MutexLock lock(&mu_);
    request.set_build_id(build_id_);
  }
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPartDeadline));
  v1::AddUnitsResponse response;
  grpc::Status status = stub_->AddUnits(&context, request, &response);
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    return OlderCoordinatorError(settings_.address);
  }
  return FromGrpcStatus(status);
}

}  // namespace distcc_cuda::client
