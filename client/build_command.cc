// SPDX-License-Identifier: Apache-2.0
#include "client/build_command.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/compile_commands.h"
#include "client/coordinator_text.h"
#include "client/dependency_scan.h"
#include "client/embedded_cluster.h"
#include "client/kernel_manifest.h"
#include "client/link_step.h"
#include "client/prediction_report.h"
#include "client/scan_cache.h"
#include "client/trace.h"
#include "client/unit_request.h"
#include "client/verify.h"
#include "common/byte_size.h"
#include "common/cancellation.h"
#include "common/cas_client.h"
#include "common/compile_identity.h"
#include "common/fatbin.h"
#include "common/files.h"
#include "common/forwarded_flags.h"
#include "common/host_resources.h"
#include "common/nvcc_args.h"
#include "common/status.h"
#include "common/subprocess.h"
#include "common/terminal_text.h"
#include "common/tls_credentials.h"
#include "common/toolchain.h"
#include "distcc_cuda/v1/build.grpc.pb.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

// A unit before its paths are made relative to the workspace root.
struct LocalUnit {
  std::string name;
  std::string directory;             // absolute; nvcc runs here
  std::vector<std::string> flags;    // without -c, -o, sources, dependency flags
  std::string source;                // as given (relative to directory, or absolute)
  std::string local_object;          // where the object lands on this machine
  std::vector<std::string> closure;  // absolute input paths
};

// An instantiation set before its paths are made relative.
struct LocalSet {
  v1::InstantiationSet set;
  std::string directory;
  std::vector<std::string> flags;
  std::vector<std::string> closure;
};

struct LocalPlan {
  std::vector<LocalUnit> units;
  std::vector<LocalSet> sets;
  std::string object_dir;
  std::string library_path;
  LinkRecipe link;
};

absl::StatusOr<LocalPlan> PlanFromManifest(const BuildOptions& options) {
  ASSIGN_OR_RETURN(KernelManifest manifest, LoadKernelManifest(options.plan_path));
  LocalPlan plan;
  plan.object_dir = options.output_dir + "/obj";
  plan.library_path = options.output_dir + "/" + manifest.output;
  plan.link = manifest.link;
  ASSIGN_OR_RETURN(std::vector<std::string> gencode, GencodeFlags(manifest.archs));
  std::vector<std::string> flags = manifest.flags;
  flags.insert(flags.end(), gencode.begin(), gencode.end());
  // Objects of a shared library must be position independent.
  flags.push_back("-Xcompiler=-fPIC");
  absl::StatusOr<NvccCommand> checked = ParseNvccCommand(flags);
  if (!checked.ok()) return Annotate(checked.status(), manifest.path + ": [build] flags");
  if (!checked->sources.empty() || !checked->output.empty() || checked->compile_only) {
    return absl::InvalidArgumentError(
        absl::StrCat(manifest.path, ": [build] flags must not name sources, -c or -o"));
  }
  for (const std::string& source : manifest.sources) {
    LocalUnit unit;
    unit.name = fs::path(source).stem().string();
    unit.directory = manifest.directory;
    unit.flags = flags;
    unit.source = source;
    unit.local_object = plan.object_dir + "/" + unit.name + ".o";
    plan.units.push_back(std::move(unit));
  }
  for (v1::InstantiationSet& set : manifest.instantiation_sets) {
    plan.sets.push_back(LocalSet{std::move(set), manifest.directory, flags, {}});
  }
  return plan;
}

absl::StatusOr<LocalPlan> PlanFromCompileCommands(const BuildOptions& options) {
  ASSIGN_OR_RETURN(std::vector<CompileCommand> commands, LoadCompileCommands(options.plan_path));
  LocalPlan plan;
  plan.object_dir = options.output_dir + "/obj";
  plan.library_path = options.output_dir + "/" + options.library_name;
  if (options.link_command.empty()) {
    // CMake's link of a CUDA shared library.
    plan.link.soname = options.library_name;
  } else {
    ASSIGN_OR_RETURN(plan.link, ParseLinkCommand(options.link_command));
  }
  std::set<std::string> names;
  std::map<std::string, int> next_number;
  for (const CompileCommand& command : commands) {
    ASSIGN_OR_RETURN(NvccCommand parsed,
                     ParseNvccCommand({command.arguments.begin() + 1, command.arguments.end()}));
    LocalUnit unit;
    // k.cu, k.cu.2, k.cu.3...: each name remembers its next number, so
    // 10,000 entries of one file are named in one pass, not 10,000.
    const std::string base = fs::path(command.file).filename().string();
    unit.name = base;
    if (!names.insert(base).second) {
      int& n = next_number.try_emplace(base, 2).first->second;
      do {
        unit.name = absl::StrCat(base, ".", n++);
      } while (!names.insert(unit.name).second);
    }
    unit.directory = command.directory;
    unit.flags = parsed.FlagArguments();
    unit.source = parsed.sources[0];
    unit.local_object = options.objects_dir.empty()
                            ? command.output
                            : AbsolutePath(options.objects_dir) + "/" + unit.name + ".o";
    plan.units.push_back(std::move(unit));
  }
  return plan;
}

// CheckBeforeScan for every unit and instantiation set of the plan.
absl::Status CheckPlanBeforeScan(const LocalPlan& plan) {
  for (const LocalUnit& unit : plan.units) {
    RETURN_IF_ERROR(CheckBeforeScan(unit.name, unit.directory, unit.flags, unit.source));
  }
  for (const LocalSet& set : plan.sets) {
    for (const std::string& header : set.set.headers()) {
      RETURN_IF_ERROR(CheckBeforeScan(set.set.name(), set.directory, set.flags, header));
    }
  }
  return absl::OkStatus();
}

// Scans every unit's and set's closure, one nvcc -M per usable core at a
// time, answers from `cache` where nothing changed.
absl::Status ScanClosures(LocalPlan& plan, const std::string& nvcc, ScanCache* cache) {
  std::vector<std::string> excluded = ExcludedPrefixes(nvcc);
  std::vector<std::function<absl::Status()>> jobs;
  for (LocalUnit& unit : plan.units) {
    jobs.push_back([&unit, &nvcc, &excluded, cache]() -> absl::Status {
      ASSIGN_OR_RETURN(unit.closure, ScanInputClosure(nvcc, unit.directory, unit.flags, unit.source,
                                                      excluded, cache));
      return absl::OkStatus();
    });
  }
  for (LocalSet& set : plan.sets) {
    jobs.push_back([&set, &nvcc, &excluded, cache]() -> absl::Status {
      for (const std::string& header : set.set.headers()) {
        ASSIGN_OR_RETURN(std::vector<std::string> files,
                         ScanInputClosure(nvcc, set.directory, set.flags, header, excluded, cache));
        set.closure.insert(set.closure.end(), files.begin(), files.end());
      }
      return absl::OkStatus();
    });
  }
  // Each core takes the next scan as soon as its last one ends (scans differ
  // in length by tens of times), and all stop at the first error.
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  absl::Status first_error;
  auto scan = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      absl::Status status = jobs[i]();
      if (status.ok()) continue;
      absl::MutexLock lock(&mu);
      if (first_error.ok()) first_error = status;
      next = jobs.size();
    }
  };
  std::vector<std::thread> scanners;
  const size_t parallel = std::min<size_t>(std::max(1, UsableCores()), jobs.size());
  for (size_t i = 0; i < parallel; ++i) scanners.emplace_back(scan);
  for (std::thread& scanner : scanners) scanner.join();
  RETURN_IF_ERROR(first_error);
  for (const LocalUnit& unit : plan.units) {
    if (unit.closure.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unit ", unit.name, ": nvcc reported no inputs for ", unit.source));
    }
  }
  for (const LocalUnit& unit : plan.units) {
    RETURN_IF_ERROR(CheckClosure(absl::StrCat("unit ", unit.name), unit.closure));
  }
  for (const LocalSet& set : plan.sets) {
    RETURN_IF_ERROR(CheckClosure(absl::StrCat("instantiation set ", set.set.name()), set.closure));
  }
  return absl::OkStatus();
}

// Where a compile_commands.json plan's objects go, said before any is
// written: each command's own -o unless --objects-dir, and how many of
// those files exist (they are replaced as their units finish).
std::string DescribeObjectPlacement(const LocalPlan& plan, const std::string& objects_dir) {
  std::vector<std::string> folders;
  int existing = 0;
  for (const LocalUnit& unit : plan.units) {
    std::string object = AbsolutePath(unit.local_object, unit.directory);
    folders.push_back(fs::path(object).parent_path().string());
    existing += IsRegularFile(object);
  }
  std::sort(folders.begin(), folders.end());
  folders.erase(std::unique(folders.begin(), folders.end()), folders.end());
  std::string where = folders.size() == 1 ? folders[0]
                                          : absl::StrCat(folders.size(), " folders under ",
                                                         CommonAncestor(folders));
  if (!objects_dir.empty()) {
    return absl::StrCat(
        "distcc-cuda: objects go to ", where, " (--objects-dir)",
        existing > 0 ? absl::StrCat("; ", existing, " there already are replaced") : "", "\n");
  }
  return absl::StrCat(
      "distcc-cuda: objects go to each command's own -o, as the build that wrote this file "
      "would put them (",
      where, ")",
      existing > 0
          ? absl::StrCat("; the ", existing, " there already are replaced as their units finish")
          : "",
      "; --objects-dir DIR puts them elsewhere\n");
}

struct UnitReport {
  std::string name;
  std::string worker;
  bool cached = false;
  bool ok = false;
  int64_t wall_ms = 0;
  int64_t cpu_ms = 0;
  int64_t peak_bytes = 0;
  int64_t predicted_bytes = 0;
  std::string prediction_source;
};

std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.1f s", absl::ToDoubleSeconds(d));
}

// The downloaded objects of a unit compiled one target per unit.
struct PartObjects {
  int count = 0;                     // targets of the whole unit
  std::map<int, std::string> paths;  // by target index
};

// Writes `object`, the unit `whole`'s object, merged from its parts'.
// FAILED_PRECONDITION when a part is missing; the merge's error (naming the
// part) when one is not a whole-program object.
absl::Status MergePartObjects(const std::string& whole, const PartObjects& parts,
                              const std::string& object) {
  std::vector<std::string> bytes, names;
  for (int i = 0; i < parts.count; ++i) {
    auto it = parts.paths.find(i);
    if (it == parts.paths.end()) {
      return absl::FailedPreconditionError(absl::StrCat("unit ", whole, ": target ", i + 1, " of ",
                                                        parts.count, " never came back to merge"));
    }
    ASSIGN_OR_RETURN(std::string content, ReadFile(it->second));
    bytes.push_back(std::move(content));
    names.push_back(it->second);
  }
  ASSIGN_OR_RETURN(std::string merged, MergeArchitectureParts(bytes, names));
  // Parts compiled under different process ids name their internal device
  // entities differently: such an object would link and then fail on a GPU
  // that compiles the PTX. Never link it.
  absl::Status one_identity = CheckOneCompileIdentity(merged, absl::StrCat("unit ", whole));
  if (!one_identity.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        one_identity.message(),
        ". Its targets were compiled as units of their own by workers that gave nvcc different "
        "process ids or file times (workers neither sandboxed nor root, or of an older "
        "distcc-cuda); build it with --split-architectures never, or update and sandbox the "
        "workers"));
  }
  return WriteFileAtomically(object, merged);
}

}  // namespace

absl::Status RunBuild(const BuildOptions& options, std::ostream& out) {
  absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(v1::ToolchainFingerprint toolchain,
                   ComputeToolchainFingerprint(options.nvcc_path, "g++", options.state_dir));
  RETURN_IF_ERROR(CheckRequiredRelease(toolchain, options.required_nvcc_release));
  bool is_compdb = absl::EndsWith(options.plan_path, ".json");
  if (!is_compdb && !absl::EndsWith(options.plan_path, ".toml")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PLAN must be a .toml kernel manifest or a compile_commands.json; got ", options.plan_path,
        " (CMake writes compile_commands.json with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)"));
  }
  if (is_compdb && options.library_name.empty()) {
    return absl::InvalidArgumentError(
        "a compile_commands.json plan needs --library NAME.so for the link output");
  }
  if (!is_compdb && (!options.objects_dir.empty() || !options.link_command.empty())) {
    return absl::InvalidArgumentError(
        "--objects-dir and --link-command are for compile_commands.json plans; a manifest's "
        "objects go to OUT/obj and its link is its [link] table");
  }
  ASSIGN_OR_RETURN(LocalPlan plan,
                   is_compdb ? PlanFromCompileCommands(options) : PlanFromManifest(options));
  // Nothing runs here (not even the scan) with arguments a worker would refuse.
  RETURN_IF_ERROR(CheckPlanBeforeScan(plan));
  // Targets no GPU that loads the result can run: said before anything runs.
  ArchCheck arch(options.target_gpus, options.strict_arch);
  auto check_targets = [&](const std::string& name,
                           const std::vector<std::string>& flags) -> absl::Status {
    absl::StatusOr<std::vector<std::string>> warnings = arch.Check(flags);
    if (!warnings.ok()) return Annotate(warnings.status(), name);
    for (const std::string& warning : *warnings) out << "distcc-cuda: warning: " << warning << "\n";
    return absl::OkStatus();
  };
  for (const LocalUnit& unit : plan.units) {
    RETURN_IF_ERROR(check_targets(absl::StrCat("unit ", unit.name), unit.flags));
  }
  for (const LocalSet& set : plan.sets) {
    RETURN_IF_ERROR(check_targets(absl::StrCat("instantiation set ", set.set.name()), set.flags));
  }
  if (is_compdb) out << DescribeObjectPlacement(plan, options.objects_dir);

  // Connect first: an unreachable coordinator should fail in seconds, before
  // any scanning.
  std::unique_ptr<EmbeddedCluster> embedded;
  std::string address = options.coordinator_address;
  if (address.empty()) {
    ASSIGN_OR_RETURN(embedded,
                     EmbeddedCluster::Start(options.state_dir, options.nvcc_path,
                                            options.embedded_slots, options.embedded_sandbox));
    address = embedded->address();
    out << "distcc-cuda: no --coordinator given; building on this machine (" << embedded->slots()
        << " slots, memory cap " << FormatByteSize(embedded->memory_cap_bytes()) << ")\n";
    if (!options.embedded_sandbox)
      out << "distcc-cuda: " << embedded->sandbox_description() << "\n";
  }
  // The embedded coordinator speaks mutual TLS with certificates of its own.
  ASSIGN_OR_RETURN(
      std::shared_ptr<grpc::Channel> channel,
      ConnectToCoordinator(address, embedded.get(), options.tls, options.connect_timeout));

  absl::Time scan_start = absl::Now();
  ScanCache scan_cache(ScanCache::FolderFor(options.state_dir), toolchain.digest());
  RETURN_IF_ERROR(ScanClosures(plan, options.nvcc_path, &scan_cache));
  std::vector<std::string> anchors;
  std::vector<std::string> excluded = ExcludedPrefixes(options.nvcc_path);
  for (const LocalUnit& unit : plan.units) {
    anchors.push_back(unit.directory);
    anchors.insert(anchors.end(), unit.closure.begin(), unit.closure.end());
    for (std::string& folder : IncludeFolders(unit.directory, unit.flags, excluded)) {
      anchors.push_back(std::move(folder));
    }
  }
  for (const LocalSet& set : plan.sets) {
    anchors.push_back(set.directory);
    anchors.insert(anchors.end(), set.closure.begin(), set.closure.end());
    for (std::string& folder : IncludeFolders(set.directory, set.flags, excluded)) {
      anchors.push_back(std::move(folder));
    }
  }
  std::string root = CommonAncestor(anchors);

  v1::SubmitBuildRequest request;
  request.set_build_name(options.plan_path);
  request.set_architecture_split(options.architecture_split);
  request.set_workspace_root(root);
  *request.mutable_toolchain() = toolchain;
  // What the coordinator and the workers will check, checked here first so
  // that a refusal names the unit before anything is uploaded.
  std::vector<std::string> system_prefixes = SystemIncludePrefixes();
  system_prefixes.insert(system_prefixes.end(), excluded.begin(), excluded.end());
  WorkspaceFiles files;
  files.known_digest = [&](const std::string& path) { return scan_cache.KnownDigest(path); };
  std::map<std::string, std::string> local_objects;  // unit name -> local path
  for (const LocalUnit& local : plan.units) {
    v1::CompileUnit* unit = request.add_units();
    unit->set_name(local.name);
    std::string working = Relative(local.directory, root);
    unit->set_working_directory(working == "." ? "" : working);
    ASSIGN_OR_RETURN(std::vector<std::string> flags,
                     RelativeFlags(local.flags, local.directory, root, excluded));
    for (const std::string& flag : flags) unit->add_arguments(flag);
    std::string object = fs::path(local.source).filename().string() + ".o";
    for (const std::string& argument :
         {std::string("-c"), Relative(AbsolutePath(local.source, local.directory), local.directory),
          std::string("-o"), object}) {
      unit->add_arguments(argument);
    }
    unit->add_output_paths(object);
    unit->set_workspace_root(root);
    RETURN_IF_ERROR(AddUnitInputs(*unit, local.closure, AbsolutePath(local.source, local.directory),
                                  files, system_prefixes));
    local_objects[local.name] = local.local_object;
  }
  for (LocalSet& local : plan.sets) {
    v1::InstantiationSet* set = request.add_instantiation_sets();
    *set = local.set;
    std::string working = Relative(local.directory, root);
    set->set_directory(working == "." ? "" : working);
    ASSIGN_OR_RETURN(std::vector<std::string> flags,
                     RelativeFlags(local.flags, local.directory, root, excluded));
    for (const std::string& flag : flags) set->add_arguments(flag);
    std::vector<std::string> arguments = flags;
    arguments.insert(arguments.end(), {"-c", "unit.cu", "-o", "unit.o"});
    RETURN_IF_ERROR(
        Annotate(ValidateCompileArguments(arguments, {root, set->directory(), system_prefixes}),
                 absl::StrCat("instantiation set ", set->name())));
    std::set<std::string> seen;
    for (const std::string& path : local.closure) {
      if (!seen.insert(path).second) continue;
      ASSIGN_OR_RETURN(*set->add_inputs(), InputFor(path, root, files));
    }
    RETURN_IF_ERROR(MoveIntoInputTree(*set->mutable_inputs(), *set->mutable_input_root(), files));
  }
  absl::Duration scan_time = absl::Now() - scan_start;
  PackLargeBuild(request, files);

  absl::Time upload_start = absl::Now();
  CasClient cas(v1::ContentStore::NewStub(channel));
  ASSIGN_OR_RETURN(int uploaded, UploadWorkspace(cas, files));
  absl::Duration upload_time = absl::Now() - upload_start;
  BuildTrace trace;
  trace.Add("this machine", absl::StrCat("scan (", plan.units.size() + plan.sets.size(), ")"),
            "scan", scan_start, scan_start + scan_time);
  trace.Add("this machine", absl::StrCat("upload (", uploaded, " files)"), "upload", upload_start,
            upload_start + upload_time);
  out << "distcc-cuda: " << files.blobs.size() << " input files under " << root << " (" << uploaded
      << " uploaded), scanned in " << Seconds(scan_time);
  scan_cache.Trim(kScanCacheBytes);
  if (scan_cache.hits() > 0) {
    out << " (" << scan_cache.hits() << " of " << scan_cache.hits() + scan_cache.misses()
        << " scans unchanged since the last build, from the scan cache)";
  }
  out << "\n";

  if (options.cancel != nullptr && options.cancel->cancelled()) {
    out << "distcc-cuda: cancelled (" << options.cancel->reason() << ") before anything compiled\n";
    return absl::CancelledError(absl::StrCat("build cancelled: ", options.cancel->reason()));
  }
  absl::Time compile_start = absl::Now();
  auto stub = v1::BuildService::NewStub(channel);
  // The current submission's stream. A cancel ends it; the coordinator,
  // seeing its client go, stops the build's units on the workers.
  absl::Mutex stream_mu;
  grpc::ClientContext* stream_context = nullptr;  // guarded by stream_mu
  std::optional<CancelWatch> cancel_watch;
  cancel_watch.emplace(options.cancel, [&] {
    absl::MutexLock lock(&stream_mu);
    if (stream_context != nullptr) stream_context->TryCancel();
  });
  std::set<std::string> started;  // units a worker began and that have not finished
  std::vector<UnitReport> reports;
  std::set<std::string> have;  // units whose result is here (in `reports`)
  // Units whose objects could not be downloaded because the coordinator
  // went away; they come again after the resubmission.
  std::set<std::string> not_downloaded;
  std::vector<std::string> failed;
  // Units compiled as one unit per -gencode target: their parts' objects,
  // by target index, merged into the unit's object before the link.
  std::map<std::string, PartObjects> architecture_parts;
  // Every unit that came back, as compiled, for --verify.
  std::vector<UnitToVerify> returned;
  int total = 0;
  bool finished = false;
  absl::Status download_error;
  v1::BuildEvent::Finished summary;
  // After a lost coordinator: how often the build was submitted again, and
  // what became of the units that had already come back.
  int resubmissions = 0;
  int came_back_cached = 0;
  int compiled_again = 0;
  grpc::Status status;
  std::map<std::string, absl::Time> started_at;  // for --trace
  absl::Time submitted_at;
  for (;;) {
    submitted_at = absl::Now();
    grpc::ClientContext context;
    {
      absl::MutexLock lock(&stream_mu);
      stream_context = &context;
      if (options.cancel != nullptr && options.cancel->cancelled()) context.TryCancel();
    }
    auto reader = stub->SubmitBuild(&context, request);
    v1::BuildEvent event;
    started.clear();
    while (reader->Read(&event)) {
      MakePrintable(event);
      if (event.has_accepted()) {
        total = event.accepted().unit_names_size();
        out << "distcc-cuda: build " << event.accepted().build_id()
            << (resubmissions > 0 ? " (resubmitted)" : "") << ": " << total << " units on "
            << address << " (" << event.accepted().eligible_workers()
            << " workers with this toolchain)\n";
        for (const std::string& note : event.accepted().notes()) out << "  " << note << "\n";
      } else if (event.has_unit_split()) {
        const auto& split = event.unit_split();
        total += split.into_size() - 1;
        out << "  split " << split.unit_name() << " into " << absl::StrJoin(split.into(), ", ")
            << ": " << split.reason() << "\n";
      } else if (event.has_unit_started()) {
        started.insert(event.unit_started().unit_name());
        started_at[event.unit_started().unit_name()] =
            CoordinatorTimeOrNow(event.unit_started().leased_unix_micros());
      } else if (event.has_unit_requeued()) {
        started.erase(event.unit_requeued().unit_name());
        out << "  re-queued " << event.unit_requeued().unit_name() << ": "
            << event.unit_requeued().reason() << "\n";
      } else if (event.has_unit_finished()) {
        const auto& done = event.unit_finished();
        started.erase(done.unit_name());
        if (have.count(done.unit_name())) {
          // Came back before the coordinator was lost: already here.
          ++(done.cached() ? came_back_cached : compiled_again);
          continue;
        }
        have.insert(done.unit_name());
        const v1::TaskResult& result = done.result();
        const absl::Time finished_at = CoordinatorTimeOrNow(done.finished_unix_micros());
        {
          auto it = started_at.find(done.unit_name());
          const absl::Time began = it == started_at.end() ? absl::InfinitePast() : it->second;
          trace.Add("coordinator queue", done.unit_name(), "queue", submitted_at,
                    done.cached() || began == absl::InfinitePast() ? finished_at : began);
          if (!done.cached()) {
            trace.Add("worker " + result.worker_name(), done.unit_name(), "compile", began,
                      finished_at,
                      {{"peak memory", FormatByteSize(result.peak_memory_bytes())},
                       {"predicted peak", FormatByteSize(done.predicted_peak_bytes())},
                       {"nvcc wall time", Seconds(absl::Milliseconds(result.wall_time_ms()))}});
          }
        }
        UnitReport report{done.unit_name(),
                          result.worker_name(),
                          done.cached(),
                          result.outcome() == v1::TASK_COMPLETED && result.exit_code() == 0,
                          result.wall_time_ms(),
                          result.cpu_time_ms(),
                          result.peak_memory_bytes(),
                          done.predicted_peak_bytes(),
                          done.prediction_source()};
        reports.push_back(report);
        out << absl::StrFormat(
            "  [%d/%d] %-44s %s\n", reports.size(), total, done.unit_name(),
            report.cached
                ? "cached"
                : absl::StrFormat("%-10s %5.1f s  peak %s (predicted %s, %s)", result.worker_name(),
                                  result.wall_time_ms() / 1000.0, FormatByteSize(report.peak_bytes),
                                  FormatByteSize(done.predicted_peak_bytes()),
                                  done.prediction_source()));
        if (!report.ok) {
          failed.push_back(done.unit_name());
          out << "\nerror: unit " << done.unit_name() << " failed on worker "
              << result.worker_name() << " ("
              << (result.outcome() == v1::TASK_COMPLETED
                      ? absl::StrCat("nvcc exit code ", result.exit_code())
                      : result.error_message())
              << "):\n";
          out << result.stdout_text() << result.stderr_text();
          if (!result.stderr_text().empty() && result.stderr_text().back() != '\n') out << "\n";
          out << "\n";
          continue;
        }
        if (!result.stdout_text().empty() || !result.stderr_text().empty()) {
          out << result.stdout_text() << result.stderr_text();
        }
        if (result.toolchain_digest() != toolchain.digest()) {
          // Never link an object of another toolchain into this library.
          if (download_error.ok()) {
            download_error = absl::FailedPreconditionError(
                absl::StrCat("unit ", done.unit_name(), " came back compiled with toolchain [",
                             result.toolchain_digest().substr(0, 12), "], not this build's ",
                             DescribeToolchain(toolchain), "; not linking it"));
          }
          continue;
        }
        // Objects land in the order the plan names them, whoever compiled them.
        std::string local = local_objects.count(done.unit_name())
                                ? local_objects[done.unit_name()]
                                : plan.object_dir + "/" + done.unit_name() + ".o";
        if (done.unit().has_architecture_part()) {
          const v1::ArchitecturePart& part = done.unit().architecture_part();
          local = plan.object_dir + "/" + done.unit_name() + ".o";
          architecture_parts[part.of()].count = part.count();
          architecture_parts[part.of()].paths[part.index()] = local;
        }
        bool lost_download = false;
        for (const auto& output : result.outputs()) {
          absl::Status got = cas.DownloadToFile(FromProto(output.digest()), local);
          if (got.ok()) continue;
          if (absl::IsUnavailable(got) && embedded == nullptr &&
              options.reconnect_timeout > absl::ZeroDuration()) {
            // The coordinator went away mid-download: the unit comes back
            // (cached) when the build is submitted again.
            lost_download = true;
            break;
          }
          if (download_error.ok()) {
            download_error = Annotate(got, absl::StrCat("downloading ", done.unit_name()));
          }
        }
        if (lost_download) {
          have.erase(done.unit_name());
          reports.pop_back();
          not_downloaded.insert(done.unit_name());
          continue;
        }
        not_downloaded.erase(done.unit_name());
        trace.Add("this machine", done.unit_name(), "download", finished_at, absl::Now());
        local_objects[done.unit_name()] = local;
        returned.push_back(UnitToVerify{
            done.unit(), done.cached() ? result.worker_name() + ", cached" : result.worker_name(),
            local});
      } else if (event.has_finished()) {
        summary = event.finished();
        finished = true;
      }
    }
    status = reader->Finish();
    {
      absl::MutexLock lock(&stream_mu);
      stream_context = nullptr;
    }
    const bool cancelled = options.cancel != nullptr && options.cancel->cancelled();
    // UNAVAILABLE: the connection broke; CANCELLED that this client did not
    // ask for: the coordinator shut down.
    const bool lost = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                      status.error_code() == grpc::StatusCode::CANCELLED;
    if (finished || cancelled || embedded != nullptr || !lost ||
        options.reconnect_timeout <= absl::ZeroDuration()) {
      break;
    }
    // The coordinator went away (a restart, a crash, the network): keep the
    // build, wait for it, submit again. Its result cache survives restarts,
    // so what finished comes back without compiling.
    absl::Time lost_at = absl::Now();
    out << "distcc-cuda: lost the coordinator at " << address << " ("
        << TerminalSafe(status.error_message()) << "); reconnecting for up to "
        << absl::FormatDuration(options.reconnect_timeout) << " (" << have.size()
        << " finished units are kept)\n";
    // Back means the inputs went up again: a channel can still look
    // connected for a moment after its coordinator died.
    bool back = false;
    int reuploaded = 0;
    while (!back && absl::Now() - lost_at < options.reconnect_timeout &&
           !(options.cancel != nullptr && options.cancel->cancelled())) {
      if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(1))) {
        continue;
      }
      // A coordinator restarted with an empty store needs the inputs again.
      absl::StatusOr<int> uploaded = UploadWorkspace(cas, files);
      if (absl::IsUnavailable(uploaded.status())) {
        absl::SleepFor(absl::Milliseconds(200));
        continue;
      }
      RETURN_IF_ERROR(uploaded.status());
      reuploaded = *uploaded;
      back = true;
    }
    if (!back) {
      if (options.cancel != nullptr && options.cancel->cancelled()) break;
      return absl::UnavailableError(absl::StrCat(
          "the coordinator at ", address, " went away during the build and was not back within ",
          absl::FormatDuration(options.reconnect_timeout), " (--reconnect-timeout); the ",
          have.size(),
          " units that finished are in its result cache: run the same command "
          "again once it is back"));
    }
    ++resubmissions;
    out << "distcc-cuda: the coordinator is back after " << Seconds(absl::Now() - lost_at)
        << "; submitting the build again (" << reuploaded << " inputs uploaded again)\n";
  }
  cancel_watch.reset();
  if (resubmissions > 0) {
    out << "distcc-cuda: after " << resubmissions << " resubmission"
        << (resubmissions > 1 ? "s" : "") << ", " << came_back_cached
        << " units that had finished came back from the result cache, " << compiled_again
        << " were compiled again\n";
  }
  if (options.cancel != nullptr && options.cancel->cancelled() && !finished) {
    int done = static_cast<int>(reports.size());
    int running = static_cast<int>(started.size());
    out << "\ndistcc-cuda: build cancelled (" << options.cancel->reason() << ")\n"
        << "  " << done << " of " << total << " units had finished"
        << (done > static_cast<int>(failed.size()) ? "; they are in the result cache" : "")
        << "\n  " << running << " units were compiling"
        << (running > 0 ? (embedded != nullptr ? "; they are stopped with this process"
                                               : "; the coordinator stops them on its workers")
                        : "")
        << "\n  " << std::max(0, total - done - running) << " units were still queued\n";
    return absl::CancelledError(absl::StrCat("build cancelled: ", options.cancel->reason()));
  }
  if (!finished && (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                    status.error_code() == grpc::StatusCode::CANCELLED)) {
    return absl::UnavailableError(absl::StrCat(
        "lost the coordinator at ", address, " during the build (",
        TerminalSafe(status.error_message()),
        "); the units that finished are in its result cache: run the same command again once "
        "it is back"));
  }
  RETURN_IF_ERROR(Annotate(FromGrpcStatus(status), "build"));
  if (!finished) {
    return absl::UnavailableError(
        absl::StrCat("the coordinator at ", address, " ended the build without a result"));
  }
  if (!not_downloaded.empty() && download_error.ok()) {
    download_error = absl::UnavailableError(absl::StrCat(
        "the objects of ", not_downloaded.size(), " units (", *not_downloaded.begin(),
        ", ...) could not be downloaded; run the same command again: they are cached"));
  }
  RETURN_IF_ERROR(download_error);
  absl::Duration compile_time = absl::Now() - compile_start;

  int cached = 0;
  PredictionReport predictions;
  int64_t cpu_ms = 0;
  const UnitReport* largest = nullptr;
  std::map<std::string, int> per_worker;
  for (const UnitReport& report : reports) {
    if (report.cached) {
      ++cached;
      continue;
    }
    cpu_ms += report.cpu_ms;
    predictions.Add(report.peak_bytes, report.predicted_bytes, report.prediction_source);
    ++per_worker[report.worker];
    if (largest == nullptr || report.peak_bytes > largest->peak_bytes) largest = &report;
  }
  if (!failed.empty()) {
    out << "distcc-cuda: " << failed.size() << " of " << total
        << " units failed: " << absl::StrJoin(failed, ", ") << "\n"
        << "  the other " << (total - failed.size())
        << " units are in the result cache; fix the errors above and run the "
           "same command again to compile only what failed\n";
    return absl::AbortedError(
        absl::StrCat(failed.size(), " of ", total, " units failed to compile"));
  }

  std::string verified;
  if (options.verify_sample != 0) {
    std::sort(returned.begin(), returned.end(), [](const UnitToVerify& a, const UnitToVerify& b) {
      return a.unit.name() < b.unit.name();
    });
    std::vector<UnitToVerify> sample;
    for (size_t i : PickVerifySample(returned.size(), options.verify_sample)) {
      sample.push_back(returned[i]);
    }
    absl::Time verify_start = absl::Now();
    RETURN_IF_ERROR(
        VerifyUnits(sample, cas, options.nvcc_path, options.state_dir + "/verify", out));
    verified = absl::StrFormat(
        "%d of %d units rebuilt here in %s: device code identical to the "
        "workers'",
        sample.size(), returned.size(), Seconds(absl::Now() - verify_start));
  }

  absl::Time link_start = absl::Now();
  // A unit compiled per target is linked as one object, merged from its parts'.
  std::set<std::string> part_names;
  std::vector<std::string> merged_wholes;
  for (const auto& [whole, parts] : architecture_parts) {
    std::string object =
        local_objects.count(whole) ? local_objects[whole] : plan.object_dir + "/" + whole + ".o";
    RETURN_IF_ERROR(MergePartObjects(whole, parts, object));
    for (const auto& [index, path] : parts.paths) {
      part_names.insert(fs::path(path).stem().string());
    }
    local_objects[whole] = object;
    merged_wholes.push_back(whole);
  }
  std::vector<std::string> order;
  for (const LocalUnit& unit : plan.units) order.push_back(unit.name);
  auto add = [&](const std::string& name) {
    if (part_names.count(name) == 0 && std::find(order.begin(), order.end(), name) == order.end()) {
      order.push_back(name);
    }
  };
  for (const UnitReport& report : reports) add(report.name);
  for (const std::string& whole : merged_wholes) add(whole);
  std::sort(order.begin() + plan.units.size(), order.end());
  std::vector<std::string> objects;
  for (const std::string& name : order) objects.push_back(local_objects[name]);
  ProcessSpec link;
  link.argv = LinkArguments(plan.link, objects, plan.library_path, options.nvcc_path);
  RETURN_IF_ERROR(MakeDirectories(fs::path(plan.library_path).parent_path().string()));
  absl::StatusOr<ProcessResult> ran_link = RunProcess(link);
  if (!ran_link.ok()) {
    return Annotate(ran_link.status(),
                    absl::StrCat("linking ", plan.library_path, " with ", link.argv[0],
                                 " (choose the linker with [link] linker in a manifest, or "
                                 "--link-command for compile_commands.json)"));
  }
  const ProcessResult& linked = *ran_link;
  if (linked.exit_code != 0) {
    out << linked.stdout_text << linked.stderr_text;
    return absl::AbortedError(absl::StrCat("linking ", plan.library_path, " failed (",
                                           DescribeTermination(linked),
                                           "): ", DescribeLink(link.argv, objects),
                                           "; the objects are in place, so fix the link and run ",
                                           "the same command again (every unit will be cached)"));
  }
  absl::Duration link_time = absl::Now() - link_start;
  trace.Add("this machine", "link", "link", link_start, absl::Now());

  std::vector<std::string> worker_counts;
  for (const auto& [worker, count] : per_worker) {
    worker_counts.push_back(absl::StrCat(worker, ": ", count));
  }
  out << "\ndistcc-cuda: built " << plan.library_path << "\n";
  out << absl::StrFormat("  units     %d (%d compiled, %d cached, 0 failed)\n", total,
                         total - cached, cached);
  out << "  workers   " << per_worker.size()
      << (worker_counts.empty() ? "" : absl::StrCat(" (", absl::StrJoin(worker_counts, ", "), ")"))
      << "\n";
  if (!merged_wholes.empty()) {
    out << "  targets   " << merged_wholes.size() << " units compiled one target per unit ("
        << part_names.size() << " parts, merged here before the link)\n";
  }
  out << "  time      " << Seconds(absl::Now() - start) << " (scan " << Seconds(scan_time)
      << ", upload " << Seconds(upload_time) << ", compile " << Seconds(compile_time) << ", link "
      << Seconds(link_time) << ")\n";
  if (largest != nullptr) {
    out << absl::StrFormat("  compile   %.1f s of CPU; largest peak %s (%s)\n", cpu_ms / 1000.0,
                           FormatByteSize(largest->peak_bytes), largest->name);
  }
  if (std::string described = predictions.Describe(); !described.empty()) {
    out << "  memory    " << described << "\n";
  }
  if (!verified.empty()) out << "  verify    " << verified << "\n";
  out << "  link      " << DescribeLink(link.argv, objects) << "\n";
  out << "  toolchain " << DescribeToolchain(toolchain) << "\n";
  if (!options.trace_path.empty()) {
    RETURN_IF_ERROR(Annotate(trace.Write(options.trace_path), "--trace"));
    out << "  trace     " << options.trace_path << " (open it in ui.perfetto.dev)\n";
  }
  return absl::OkStatus();
}

}  // namespace distcc_cuda::client
