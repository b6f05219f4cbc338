// SPDX-License-Identifier: Apache-2.0
#include "client/launcher/remote_compile.h"

#include <filesystem>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/plan/unit_request.h"
#include "client/scan/dependency_scan.h"
#include "client/text/coordinator_text.h"
#include "client/text/trace.h"
#include "common/base/cancellation.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/nvcc/nvcc_args.h"
#include "common/nvcc/toolchain.h"
#include "common/process/subprocess.h"
#include "common/store/cas_client.h"
#include "common/transport/tls_credentials.h"
#include "distcc_cuda/v1/build.grpc.pb.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;

RemoteCompiler::RemoteCompiler(std::shared_ptr<grpc::Channel> channel, std::string address,
                               int scan_slots, std::string scan_cache_folder,
                               EnvironmentVariables nvcc_variables, std::string state_dir)
    : channel_(std::move(channel)),
      address_(std::move(address)),
      scans_free_(std::max(1, scan_slots)),
      scan_cache_folder_(std::move(scan_cache_folder)),
      nvcc_variables_(std::move(nvcc_variables)),
      state_dir_(std::move(state_dir)) {}

absl::StatusOr<v1::ToolchainFingerprint> RemoteCompiler::ToolchainOf(const std::string& nvcc) {
  auto known = [&]() -> std::optional<v1::ToolchainFingerprint> {
    absl::MutexLock lock(&mu_);
    auto found = toolchains_.find(nvcc);
    if (found == toolchains_.end()) return std::nullopt;
    return found->second;
  };
  if (std::optional<v1::ToolchainFingerprint> toolchain = known()) return *toolchain;
  // Callers arriving together wait for one fingerprint, shared with this
  // process's embedded worker.
  ASSIGN_OR_RETURN(v1::ToolchainFingerprint toolchain,
                   SharedToolchainFingerprint(nvcc, kHostCompiler, state_dir_));
  absl::MutexLock lock(&mu_);
  toolchains_[nvcc] = toolchain;
  return toolchain;
}

namespace {

v1::UnitCompiler CompilerOf(const RemoteCompilePlan& plan) {
  return plan.host_compiler ? v1::UNIT_COMPILER_HOST_CXX : v1::UNIT_COMPILER_NVCC;
}

// The version a compiler's `--version` first line names, without the
// program's own name ("g++ (Debian 12.2.0-14) 12.2.0" and "c++ (Debian
// 12.2.0-14) 12.2.0" are one compiler).
std::string VersionWithoutName(const std::string& first_line) {
  size_t space = first_line.find(' ');
  return space == std::string::npos ? "" : first_line.substr(space + 1);
}

}  // namespace

absl::Status RemoteCompiler::CheckHostCompiler(const std::string& compiler,
                                               const v1::ToolchainFingerprint& toolchain) {
  std::string version;
  {
    absl::MutexLock lock(&mu_);
    if (auto known = host_versions_.find(compiler); known != host_versions_.end()) {
      version = known->second;
    }
  }
  if (version.empty()) {
    ProcessSpec spec;
    spec.argv = {compiler, "--version"};
    spec.timeout = absl::Seconds(30);
    absl::StatusOr<ProcessResult> ran = RunProcess(spec);
    std::string first_line = ran.ok() && ran->exit_code == 0
                                 ? std::string(absl::StripAsciiWhitespace(
                                       ran->stdout_text.substr(0, ran->stdout_text.find('\n'))))
                                 : "";
    version = VersionWithoutName(first_line);
    if (version.empty()) version = "(no version)";
    absl::MutexLock lock(&mu_);
    host_versions_[compiler] = version;
  }
  if (version == VersionWithoutName(toolchain.host_compiler())) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(compiler, " is ", version, ", not the ", kHostCompiler,
                   " that the workers' toolchain names (", toolchain.host_compiler(),
                   "); its compiles run here"));
}

namespace {

// A launcher call as the unit it sends: a build request of that one unit,
// and what making the unit's input tree needs.
struct LauncherUnit {
  v1::SubmitBuildRequest request;
  // Where its files appear on the workers.
  WorkspaceLayout layout = WorkspaceLayout::AsIs("/");
  std::string source_in_tree;  // the source, in the tree
  std::vector<std::string> closure;
  std::vector<std::string> system_prefixes;
  WorkspaceFiles files;
  bool tree_built = false;  // its inputs are in `files`, ready to upload

  v1::CompileUnit& unit() { return *request.mutable_units(0); }
  // What names the layout in the scan cache's memo of trees.
  std::string layout_key() const { return layout.Key(); }
};

// Where a launcher call's files lie here: its workspace (CompileWorkspace),
// its out-of-tree build folder (or ""), and its toolkit's roots.
struct CallPlaces {
  std::string workspace;
  std::string build_folder;
  ToolkitPlaces toolkit;
};

// The request for `plan`'s unit, whose inputs are `closure` (found by a
// scan of `scan_time`), in the layout of its `places` (LayoutFor), with
// the paths of the unit's flags, source and object made relative to its
// folder where they lie in the workspace. `outside` receives what it reads
// outside the workspace.
absl::Status FillUnitRequest(const LauncherCall& call, const RemoteCompilePlan& plan,
                             const v1::ToolchainFingerprint& toolchain,
                             const std::vector<std::string>& excluded, absl::Duration scan_time,
                             const CallPlaces& places, bool absolute_paths, LauncherUnit& launched,
                             OutsideFiles& outside) {
  const std::string& directory = call.working_directory;
  const v1::UnitCompiler compiler = CompilerOf(plan);
  const std::string source = AbsolutePath(plan.source, directory);
  ASSIGN_OR_RETURN(launched.layout,
                   LayoutFor(places.workspace, launched.closure,
                             NamedInputPaths(directory, plan.flags, excluded, compiler),
                             absolute_paths, &outside, places.build_folder));
  const WorkspaceLayout& layout = launched.layout;
  v1::SubmitBuildRequest& request = launched.request;
  request.add_scan_micros(absl::ToInt64Microseconds(scan_time));
  request.set_build_name(absl::StrCat("launcher: ", plan.source));
  request.set_architecture_split(v1::ARCHITECTURE_SPLIT_NEVER);
  request.set_workspace_root("/");
  *request.mutable_toolchain() = toolchain;
  v1::CompileUnit* unit = request.add_units();
  unit->set_name(plan.name);
  unit->set_compiler(compiler);
  PlaceUnit(*unit, layout, directory);
  ASSIGN_OR_RETURN(std::vector<std::string> flags,
                   RelativeFlags(plan.flags, directory, layout, places.toolkit, compiler));
  for (const std::string& flag : flags) unit->add_arguments(flag);
  // The worker writes the object beside the source's folder under the
  // output's own file name; it lands at -o here.
  const std::string object = fs::path(plan.output).filename().string();
  for (const std::string& argument :
       {plan.action, NamedFrom(source, directory, layout), std::string("-o"), object}) {
    unit->add_arguments(argument);
  }
  unit->add_output_paths(object);
  launched.system_prefixes = SystemIncludePrefixes();
  launched.system_prefixes.insert(launched.system_prefixes.end(), excluded.begin(), excluded.end());
  launched.source_in_tree = layout.InTree(source);
  return absl::OkStatus();
}

// The unit's inputs as a tree: every file checked (what it reads, where it
// is), hashed (or vouched for by the scan cache), and its folders made.
absl::Status BuildLaunchedTree(LauncherUnit& launched, ScanCache& scan_cache) {
  v1::CompileUnit& unit = launched.unit();
  RETURN_IF_ERROR(CheckClosure(absl::StrCat("unit ", unit.name()), launched.closure));
  unit.clear_inputs();
  unit.clear_input_root();
  std::set<std::string> seen;
  for (const std::string& path : launched.closure) {
    if (!seen.insert(path).second) continue;
    ASSIGN_OR_RETURN(*unit.add_inputs(), InputFor(path, launched.layout, launched.files));
  }
  RETURN_IF_ERROR(ValidateCompileUnit(unit, launched.system_prefixes));
  RETURN_IF_ERROR(MoveIntoInputTree(*unit.mutable_inputs(), *unit.mutable_input_root(),
                                    launched.files, launched.source_in_tree));
  scan_cache.RememberTree(launched.layout_key(), launched.source_in_tree, launched.closure, unit);
  launched.tree_built = true;
  return absl::OkStatus();
}

// An unchanged unit's tree is the one built for it last time: it goes by
// that root alone, and is built only if the coordinator lacks an input.
absl::Status UseKnownTreeOrBuild(LauncherUnit& launched, ScanCache& scan_cache) {
  std::optional<v1::CompileUnit> known =
      scan_cache.FindTree(launched.layout_key(), launched.source_in_tree, launched.closure);
  if (!known) return BuildLaunchedTree(launched, scan_cache);
  *launched.unit().mutable_input_root() = known->input_root();
  *launched.unit().mutable_inputs() = known->inputs();
  return ValidateCompileUnit(launched.unit(), launched.system_prefixes);
}

// Whether a refused submission asks for the unit's inputs: a
// FAILED_PRECONDITION naming blobs as MISSING, or one without a typed
// detail (an older coordinator said missing inputs no other way).
bool WorthUploading(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::FAILED_PRECONDITION) return false;
  const absl::Status refused = FromGrpcStatus(status);
  return NamesMissingBlobs(refused) || !HasPreconditionFailure(refused);
}

// How one submission of the unit ended.
struct Submitted {
  grpc::Status status;
  std::optional<v1::BuildEvent::UnitFinished> finished;
  std::string failure;  // the build's message when it ended without the unit
};

// Submits `request` and follows its events to the end, noting in
// `compiled` when the unit started and finished. A cancel ends the stream.
Submitted SubmitOnce(const std::shared_ptr<grpc::Channel>& channel,
                     const v1::SubmitBuildRequest& request, const CancelToken* cancel,
                     RemoteCompileResult& compiled) {
  Submitted submitted;
  grpc::ClientContext context;
  std::optional<CancelWatch> watch;
  watch.emplace(cancel, [&context] { context.TryCancel(); });
  auto reader = v1::BuildService::NewStub(channel)->SubmitBuild(&context, request);
  v1::BuildEvent event;
  while (reader->Read(&event)) {
    MakePrintable(event);
    if (event.has_unit_started()) {
      compiled.started = CoordinatorTimeOrNow(event.unit_started().leased_unix_micros());
    } else if (event.has_unit_finished()) {
      compiled.finished = CoordinatorTimeOrNow(event.unit_finished().finished_unix_micros());
      submitted.finished = event.unit_finished();
    } else if (event.has_finished() && !event.finished().success() && !submitted.finished) {
      submitted.failure = event.finished().message();
    }
  }
  submitted.status = reader->Finish();
  watch.reset();
  return submitted;
}

// `compiled` filled from the unit's result, or why there is none to use.
absl::Status TakeResult(const Submitted& submitted, const RemoteCompilePlan& plan,
                        const v1::ToolchainFingerprint& toolchain, const std::string& address,
                        RemoteCompileResult& compiled) {
  if (!submitted.finished) {
    return absl::AbortedError(absl::StrCat(
        "the coordinator at ", address, " ended the compile of ", plan.source, " without a result",
        submitted.failure.empty() ? "" : absl::StrCat(": ", submitted.failure)));
  }
  const v1::BuildEvent::UnitFinished& finished = *submitted.finished;
  const v1::TaskResult& result = finished.result();
  if (result.outcome() != v1::TASK_COMPLETED) {
    return absl::AbortedError(absl::StrCat("the cluster could not compile ", plan.source,
                                           " (worker ", result.worker_name(), ": ",
                                           result.error_message(), ")"));
  }
  if (result.exit_code() == 0 && result.toolchain_digest() != toolchain.digest()) {
    return absl::AbortedError(absl::StrCat(plan.source, " came back compiled with toolchain [",
                                           result.toolchain_digest().substr(0, 12), "], not ",
                                           DescribeToolchain(toolchain), "; not using it"));
  }
  compiled.exit_code = result.exit_code();
  compiled.stdout_text = result.stdout_text();
  compiled.stderr_text = result.stderr_text();
  compiled.worker = result.worker_name();
  compiled.cached = finished.cached();
  compiled.wall_ms = result.wall_time_ms();
  compiled.peak_bytes = result.peak_memory_bytes();
  compiled.predicted_bytes = finished.predicted_peak_bytes();
  compiled.prediction_source = finished.prediction_source();
  compiled.toolchain = DescribeToolchain(toolchain);
  if (compiled.exit_code == 0 && result.outputs_size() != 1) {
    return absl::AbortedError(absl::StrCat("the compile of ", plan.source, " returned ",
                                           result.outputs_size(), " files, not its object"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> RemoteCompiler::ScanClosure(
    const LauncherCall& call, const RemoteCompilePlan& plan,
    const std::vector<std::string>& excluded, const std::string& workspace, ScanCache& scan_cache,
    absl::Duration& scan_time) {
  // nvcc's front end, a few at a time, however many calls wait.
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* free) { return *free > 0; }, &scans_free_));
    --scans_free_;
  }
  std::optional<MachineSlots::Held> machine_slot;
  if (machine_slots_ != nullptr) machine_slot = machine_slots_->Acquire();
  const absl::Time began = absl::Now();
  const std::string& directory = call.working_directory;
  std::vector<std::string> closure;
  absl::Status scanned = [&]() -> absl::Status {
    if (!plan.dependency_file.empty()) {
      // The dependency file the caller asked for, written as nvcc writes it.
      ASSIGN_OR_RETURN(closure,
                       ScanWritingDependencyFile(call.compiler, directory, plan.flags, plan.source,
                                                 plan.dependency_arguments, plan.dependency_file,
                                                 excluded, &scan_cache, workspace));
      if (!plan.nonsystem_dependencies) return absl::OkStatus();
    }
    // -MMD leaves out headers of -isystem folders, which may be ours to ship.
    ASSIGN_OR_RETURN(closure, ScanInputClosure(call.compiler, directory, plan.flags, plan.source,
                                               excluded, &scan_cache, workspace));
    return absl::OkStatus();
  }();
  machine_slot.reset();
  {
    absl::MutexLock lock(&mu_);
    ++scans_free_;
  }
  scan_time = absl::Now() - began;
  RETURN_IF_ERROR(scanned);
  if (closure.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(fs::path(call.compiler).filename().string(),
                                                   " reported no inputs for ", plan.source));
  }
  return closure;
}

bool RemoteCompiler::ToolchainServed(const v1::ToolchainFingerprint& toolchain) {
  {
    absl::MutexLock lock(&mu_);
    if (served_toolchains_.count(toolchain.digest())) return true;
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ClusterStatus status;
  if (!v1::BuildService::NewStub(channel_)
           ->GetClusterStatus(&context, v1::GetClusterStatusRequest(), &status)
           .ok()) {
    return false;
  }
  for (const v1::WorkerStatus& worker : status.workers()) {
    if (worker.toolchain().digest() == toolchain.digest()) {
      absl::MutexLock lock(&mu_);
      served_toolchains_.insert(toolchain.digest());
      return true;
    }
  }
  return false;
}

absl::Status RemoteCompiler::Unreachable(const std::string& what) const {
  return absl::UnavailableError(
      absl::StrCat("cannot reach the coordinator at ", address_, " (", what,
                   "); check that it runs, or set DISTCC_CUDA_FALLBACK=local to compile here "
                   "when it cannot be reached"));
}

absl::StatusOr<RemoteCompileResult> RemoteCompiler::Compile(const LauncherCall& call,
                                                            const RemoteCompilePlan& plan,
                                                            const CancelToken* cancel) {
  const std::string& directory = call.working_directory;
  RemoteCompileResult compiled;
  compiled.asked = absl::Now();
  ScanCohort::Member member(cohort_, compiled.asked);
  ASSIGN_OR_RETURN(v1::ToolchainFingerprint toolchain, ToolchainOf(call.nvcc()));
  if (plan.host_compiler) RETURN_IF_ERROR(CheckHostCompiler(call.compiler, toolchain));
  RETURN_IF_ERROR(CheckBeforeScan(plan.name, directory, plan.flags, plan.source, CompilerOf(plan)));

  const std::vector<std::string> excluded = ExcludedPrefixes(call.nvcc());
  ScanCache scan_cache(scan_cache_folder_, toolchain.digest(), nvcc_variables_);
  LauncherUnit launched;
  absl::Duration scan_time;
  // The call's project folder: the scan cache keys the call by it, and the
  // unit's layout starts from it (the closure may widen it).
  const std::string workspace = CompileWorkspace(directory, AbsolutePath(plan.source, directory),
                                                 layout_settings_.session_folder);
  ASSIGN_OR_RETURN(launched.closure,
                   ScanClosure(call, plan, excluded, workspace, scan_cache, scan_time));
  compiled.scanned = absl::Now();
  compiled.scan_cached = scan_cache.hits() > 0 && scan_cache.misses() == 0;
  const CallPlaces places{
      workspace, OutOfTreeBuildFolder(directory, workspace, layout_settings_.session_folder),
      PlacesOfToolkit(ToolkitRoots(call.nvcc()))};
  RETURN_IF_ERROR(FillUnitRequest(call, plan, toolchain, excluded, scan_time, places,
                                  layout_settings_.absolute_paths, launched, compiled.outside));
  compiled.workspace = launched.layout.root();
  MergeInputRoots(launched.layout, compiled.input_roots);
  if (launched.layout.relocated()) MergeToolkitRoot(places.toolkit, compiled.input_roots);
  launched.files.known_digest = [&](const std::string& path) {
    return scan_cache.KnownDigest(path);
  };
  RETURN_IF_ERROR(UseKnownTreeOrBuild(launched, scan_cache));

  CasClient cas(v1::ContentStore::NewStub(channel_));
  auto upload = [&]() -> absl::Status {
    if (!launched.tree_built) RETURN_IF_ERROR(BuildLaunchedTree(launched, scan_cache));
    absl::StatusOr<int> uploaded = cas.UploadMissing(launched.files.AllBlobs());
    if (!uploaded.ok()) {
      if (absl::IsUnavailable(uploaded.status())) {
        return Unreachable(std::string(uploaded.status().message()));
      }
      return Annotate(uploaded.status(), "uploading the inputs of " + plan.source);
    }
    compiled.uploaded = absl::Now();
    return absl::OkStatus();
  };
  // A tree built here is new or changed: what the store lacks goes up
  // before the call waits for its cohort, so that the units of a burst
  // reach the coordinator's queue moments apart, not one upload apart, and
  // it starts the longest first (ScanCohort). Only for a toolchain that a
  // worker has: otherwise the unit goes first, and its refusal uploads
  // nothing.
  compiled.uploaded = absl::Now();
  if (launched.tree_built && ToolchainServed(toolchain)) RETURN_IF_ERROR(upload());
  member.AwaitCohort(ScanCohort::kMostGatherWait, cancel);

  // The unit goes first: a result the coordinator holds needs none of its
  // inputs, so an unchanged rebuild uploads nothing and asks for nothing.
  // A coordinator that lacks an input says so (FAILED_PRECONDITION naming
  // them MISSING); the missing ones are uploaded and the unit sent again.
  // Any other refusal (no worker has this toolchain) ends here at once.
  Submitted submitted = SubmitOnce(channel_, launched.request, cancel, compiled);
  const bool cancelled = cancel != nullptr && cancel->cancelled();
  if (WorthUploading(submitted.status) && !cancelled) {
    RETURN_IF_ERROR(upload());
    submitted = SubmitOnce(channel_, launched.request, cancel, compiled);
  }
  if (cancel != nullptr && cancel->cancelled()) {
    return absl::CancelledError(absl::StrCat("cancelled: ", cancel->reason()));
  }
  if (submitted.status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return Unreachable(TerminalSafe(submitted.status.error_message()));
  }
  RETURN_IF_ERROR(Annotate(FromGrpcStatus(submitted.status), "compiling " + plan.source));
  RETURN_IF_ERROR(TakeResult(submitted, plan, toolchain, address_, compiled));
  // nvcc's messages name the workspace's files as they are here.
  compiled.stdout_text = launched.layout.ToLocalText(compiled.stdout_text, directory);
  compiled.stderr_text = launched.layout.ToLocalText(compiled.stderr_text, directory);
  if (compiled.exit_code != 0) return compiled;
  absl::Status got = cas.DownloadToFile(FromProto(submitted.finished->result().outputs(0).digest()),
                                        AbsolutePath(plan.output, directory));
  if (absl::IsUnavailable(got)) return Unreachable(std::string(got.message()));
  RETURN_IF_ERROR(Annotate(got, "downloading the object of " + plan.source));
  compiled.downloaded = absl::Now();
  return compiled;
}

}  // namespace distcc_cuda::client
