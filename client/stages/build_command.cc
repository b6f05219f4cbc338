// SPDX-License-Identifier: Apache-2.0
#include "client/stages/build_command.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cluster/embedded_cluster.h"
#include "client/plan/build_plan.h"
#include "client/plan/link_step.h"
#include "client/plan/unit_request.h"
#include "client/scan/scan_cache.h"
#include "client/stages/build_follower.h"
#include "client/stages/build_submission.h"
#include "client/stages/verify.h"
#include "client/text/prediction_report.h"
#include "client/text/progress.h"
#include "client/text/trace.h"
#include "common/base/byte_size.h"
#include "common/base/cancellation.h"
#include "common/base/files.h"
#include "common/base/host_resources.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/nvcc/compile_identity.h"
#include "common/nvcc/fatbin.h"
#include "common/nvcc/toolchain.h"
#include "common/process/subprocess.h"
#include "common/store/cas_client.h"
#include "distcc_cuda/v1/build.grpc.pb.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

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

// The checks of `options` that need no file read: a plan of a kind this
// command reads, and only the flags that apply to it.
absl::Status CheckPlanOptions(const BuildOptions& options, bool is_compdb) {
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
  return absl::OkStatus();
}

// Targets no GPU that loads the result can run: said (or, with
// --strict-arch, refused) before anything runs.
absl::Status CheckTargets(const LocalPlan& plan, const BuildOptions& options, std::ostream& out) {
  ArchCheck arch(options.target_gpus, options.strict_arch);
  auto check = [&](const std::string& name, const std::vector<std::string>& flags) {
    absl::StatusOr<std::vector<std::string>> warnings = arch.Check(flags);
    if (!warnings.ok()) return Annotate(warnings.status(), name);
    for (const std::string& warning : *warnings) out << "distcc-cuda: warning: " << warning << "\n";
    return absl::OkStatus();
  };
  for (const LocalUnit& unit : plan.units) {
    RETURN_IF_ERROR(check(absl::StrCat("unit ", unit.name), unit.flags));
  }
  for (const LocalSet& set : plan.sets) {
    RETURN_IF_ERROR(check(absl::StrCat("instantiation set ", set.set.name()), set.flags));
  }
  return absl::OkStatus();
}

// The build as this machine sees it before anything runs: the toolchain
// that will compile it, and its plan read and checked.
struct PreparedBuild {
  v1::ToolchainFingerprint toolchain;
  LocalPlan plan;
};

absl::StatusOr<PreparedBuild> PrepareBuild(const BuildOptions& options, std::ostream& out) {
  PreparedBuild prepared;
  ASSIGN_OR_RETURN(prepared.toolchain, ComputeToolchainFingerprint(options.nvcc_path, kHostCompiler,
                                                                   options.state_dir));
  RETURN_IF_ERROR(CheckRequiredRelease(prepared.toolchain, options.required_nvcc_release));
  const bool is_compdb = absl::EndsWith(options.plan_path, ".json");
  RETURN_IF_ERROR(CheckPlanOptions(options, is_compdb));
  ASSIGN_OR_RETURN(prepared.plan, LoadLocalPlan(options, is_compdb));
  RETURN_IF_ERROR(CheckEntriesCompiler(prepared.plan, options.nvcc_path, prepared.toolchain, out));
  // Nothing runs here (not even the scan) with arguments a worker would refuse.
  RETURN_IF_ERROR(CheckPlanBeforeScan(prepared.plan));
  RETURN_IF_ERROR(CheckTargets(prepared.plan, options, out));
  if (is_compdb) out << DescribeObjectPlacement(prepared.plan, options.objects_dir);
  return prepared;
}

bool Cancelled(const BuildOptions& options) {
  return options.cancel != nullptr && options.cancel->cancelled();
}

// How long the scans and the uploads of parts took, traced.
struct SubmissionTimes {
  absl::Duration scan;
  absl::Duration upload;
};

SubmissionTimes TraceSubmission(const BuildSubmission::Figures& figures, BuildTrace& trace) {
  SubmissionTimes times;
  times.scan = figures.scan_ended - figures.scan_began;
  trace.Add("this machine", absl::StrCat("scan (", figures.units, ")"), "scan", figures.scan_began,
            figures.scan_ended);
  for (size_t i = 0; i < figures.parts.size(); ++i) {
    const BuildSubmission::Figures::Part& part = figures.parts[i];
    times.upload += part.sent - part.began;
    trace.Add("this machine", absl::StrCat("part ", i + 1, " (", part.units, " units)"), "upload",
              part.began, part.sent);
  }
  return times;
}

// What was cancelled, and the CANCELLED that ends the build.
absl::Status ReportCancel(const FollowedBuild& followed, const BuildOptions& options, bool embedded,
                          std::ostream& out) {
  const int total = followed.total;
  const int done = static_cast<int>(followed.reports.size());
  const int running = static_cast<int>(followed.started.size());
  out << "\ndistcc-cuda: build cancelled (" << options.cancel->reason() << ")\n"
      << "  " << done << " of " << total << " units had finished"
      << (done > static_cast<int>(followed.failed.size()) ? "; they are in the result cache" : "")
      << "\n  " << running << " units were compiling"
      << (running > 0 ? (embedded ? "; they are stopped with this process"
                                  : "; the coordinator stops them on its workers")
                      : "")
      << "\n  " << std::max(0, total - done - running) << " units were still queued\n";
  return absl::CancelledError(absl::StrCat("build cancelled: ", options.cancel->reason()));
}

// UNAVAILABLE: the coordinator went away during the build, for `why`.
absl::Status LostCoordinatorError(const std::string& address, const std::string& why) {
  return absl::UnavailableError(absl::StrCat(
      "lost the coordinator at ", address, " during the build (", TerminalSafe(why),
      "); the units that finished are in its result cache: run the same command again once "
      "it is back"));
}

// OK when the build's stream ended with its result and every unit that
// came back is here to link; otherwise why not, said for the user.
absl::Status CheckBuildEnded(const FollowedBuild& followed, const BuildOptions& options,
                             const ClusterConnection& cluster, std::ostream& out) {
  if (followed.resubmissions > 0) {
    out << "distcc-cuda: after " << followed.resubmissions << " resubmission"
        << (followed.resubmissions > 1 ? "s" : "") << ", " << followed.came_back_cached
        << " units that had finished came back from the result cache, " << followed.compiled_again
        << " were compiled again\n";
  }
  if (Cancelled(options) && !followed.finished) {
    return ReportCancel(followed, options, cluster.embedded != nullptr, out);
  }
  const grpc::Status& status = followed.status;
  if (!followed.finished && (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             status.error_code() == grpc::StatusCode::CANCELLED)) {
    return LostCoordinatorError(cluster.address, status.error_message());
  }
  RETURN_IF_ERROR(Annotate(FromGrpcStatus(status), "build"));
  if (!followed.finished) {
    return absl::UnavailableError(
        absl::StrCat("the coordinator at ", cluster.address, " ended the build without a result"));
  }
  if (!followed.not_downloaded.empty() && followed.download_error.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "the objects of ", followed.not_downloaded.size(), " units (",
        *followed.not_downloaded.begin(),
        ", ...) could not be downloaded; run the same command again: they are cached"));
  }
  return followed.download_error;
}

// ABORTED, after saying which, when a unit did not compile.
absl::Status CheckNoUnitFailed(const FollowedBuild& followed, std::ostream& out) {
  if (followed.failed.empty()) return absl::OkStatus();
  const int total = followed.total;
  out << "distcc-cuda: " << followed.failed.size() << " of " << total
      << " units failed: " << absl::StrJoin(followed.failed, ", ") << "\n"
      << "  the other " << (total - followed.failed.size())
      << " units are in the result cache; fix the errors above and run the "
         "same command again to compile only what failed\n";
  return absl::AbortedError(
      absl::StrCat(followed.failed.size(), " of ", total, " units failed to compile"));
}

// --verify: a sample of the units rebuilt here and compared; what the
// summary says of it ("" without --verify).
absl::StatusOr<std::string> VerifySample(std::vector<UnitToVerify> returned,
                                         const BuildOptions& options, CasClient& cas,
                                         std::ostream& out) {
  if (options.verify_sample == 0) return std::string();
  std::sort(returned.begin(), returned.end(), [](const UnitToVerify& a, const UnitToVerify& b) {
    return a.unit.name() < b.unit.name();
  });
  std::vector<UnitToVerify> sample;
  for (size_t i : PickVerifySample(returned.size(), options.verify_sample)) {
    sample.push_back(returned[i]);
  }
  absl::Time verify_start = absl::Now();
  RETURN_IF_ERROR(VerifyUnits(sample, cas, options.nvcc_path, options.state_dir + "/verify", out));
  return absl::StrFormat(
      "%d of %d units rebuilt here in %s: device code identical to the "
      "workers'",
      sample.size(), returned.size(), Seconds(absl::Now() - verify_start));
}

// The objects to link, in the plan's order (units the coordinator made
// after it, sorted); a unit compiled per target is one object, merged here
// from its parts'.
struct LinkObjects {
  std::vector<std::string> paths;
  int merged_units = 0;  // units merged from their parts
  int parts = 0;         // the parts they were merged from
};

absl::StatusOr<LinkObjects> MergeAndOrderObjects(const LocalPlan& plan,
                                                 const FollowedBuild& followed) {
  std::map<std::string, std::string> local_objects = followed.local_objects;
  std::set<std::string> part_names;
  std::vector<std::string> merged_wholes;
  for (const auto& [whole, parts] : followed.architecture_parts) {
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
  for (const UnitReport& report : followed.reports) add(report.name);
  for (const std::string& whole : merged_wholes) add(whole);
  std::sort(order.begin() + plan.units.size(), order.end());
  LinkObjects objects;
  for (const std::string& name : order) objects.paths.push_back(local_objects[name]);
  objects.merged_units = static_cast<int>(merged_wholes.size());
  objects.parts = static_cast<int>(part_names.size());
  return objects;
}

// Links `objects` into the plan's library; ABORTED with the linker's
// output printed when it fails. Returns the link's argv.
absl::StatusOr<std::vector<std::string>> Link(const LocalPlan& plan,
                                              const std::vector<std::string>& objects,
                                              const BuildOptions& options, std::ostream& out) {
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
  return link.argv;
}

// What the summary says besides the units: the times of each stage, the
// verification and the link.
struct BuildFigures {
  absl::Time start;
  SubmissionTimes submission;
  absl::Duration compile_time;
  absl::Duration link_time;
  std::string verified;  // "" without --verify
  std::vector<std::string> link_argv;
  LinkObjects objects;
  std::string workspaces;  // DescribeWorkspaces
};

void PrintSummary(const LocalPlan& plan, const FollowedBuild& followed, const BuildFigures& figures,
                  const v1::ToolchainFingerprint& toolchain, std::ostream& out) {
  int cached = 0;
  PredictionReport predictions;
  int64_t cpu_ms = 0;
  const UnitReport* largest = nullptr;
  std::map<std::string, int> per_worker;
  for (const UnitReport& report : followed.reports) {
    if (report.cached) {
      ++cached;
      continue;
    }
    cpu_ms += report.cpu_ms;
    predictions.Add(report.peak_bytes, report.predicted_bytes, report.prediction_source);
    ++per_worker[report.worker];
    if (largest == nullptr || report.peak_bytes > largest->peak_bytes) largest = &report;
  }
  std::vector<std::string> worker_counts;
  for (const auto& [worker, count] : per_worker) {
    worker_counts.push_back(absl::StrCat(worker, ": ", count));
  }
  const int total = followed.total;
  out << "\ndistcc-cuda: built " << plan.library_path << "\n";
  out << absl::StrFormat("  units     %d (%d compiled, %d cached, 0 failed)\n", total,
                         total - cached, cached);
  out << "  workers   " << per_worker.size()
      << (worker_counts.empty() ? "" : absl::StrCat(" (", absl::StrJoin(worker_counts, ", "), ")"))
      << "\n";
  if (figures.objects.merged_units > 0) {
    out << "  targets   " << figures.objects.merged_units << " units compiled one target per unit ("
        << figures.objects.parts << " parts, merged here before the link)\n";
  }
  out << "  time      " << Seconds(absl::Now() - figures.start) << " (scan "
      << Seconds(figures.submission.scan) << " and upload " << Seconds(figures.submission.upload)
      << " beside the compile, compile " << Seconds(figures.compile_time) << ", link "
      << Seconds(figures.link_time) << ")\n";
  if (largest != nullptr) {
    out << absl::StrFormat("  compile   %.1f s of CPU; largest peak %s (%s)\n", cpu_ms / 1000.0,
                           FormatByteSize(largest->peak_bytes), largest->name);
  }
  if (std::string described = predictions.Describe(); !described.empty()) {
    out << "  memory    " << described << "\n";
  }
  if (!figures.verified.empty()) out << "  verify    " << figures.verified << "\n";
  out << "  link      " << DescribeLink(figures.link_argv, figures.objects.paths) << "\n";
  out << "  toolchain " << DescribeToolchain(toolchain) << "\n";
  out << "  " << figures.workspaces << "\n";
}

}  // namespace

absl::Status RunBuild(const BuildOptions& options, std::ostream& out) {
  BuildFigures figures;
  figures.start = absl::Now();
  ASSIGN_OR_RETURN(PreparedBuild prepared, PrepareBuild(options, out));
  LocalPlan& plan = prepared.plan;
  ASSIGN_OR_RETURN(ClusterConnection cluster, ConnectToCluster(options, out));

  // The units are scanned on every core and sent as they are scanned, a
  // part at a time, to one build opened before the first scan ends; the
  // follower reads its events, downloads its objects and resubmits it
  // after a lost coordinator.
  ScanCache scan_cache(ScanCache::FolderFor(options.state_dir, options.scan_cache),
                       prepared.toolchain.digest(), options.nvcc_variables);
  BuildTrace trace;
  const absl::Duration reconnect_timeout =
      cluster.embedded == nullptr ? options.reconnect_timeout : absl::ZeroDuration();
  BuildFollower follower({&plan, prepared.toolchain.digest(), DescribeToolchain(prepared.toolchain),
                          cluster.address, reconnect_timeout, options.cancel, figures.start},
                         cluster.channel, trace, out);
  BuildSubmission submission(
      plan,
      {options.nvcc_path, &scan_cache, UsableCores(),
       cluster.embedded != nullptr ? cluster.embedded->machine_slots().get() : nullptr,
       reconnect_timeout > absl::ZeroDuration(), [&] { follower.EndStream(); }, cluster.address,
       options.absolute_paths},
      cluster.channel, [&](const absl::Status&) { follower.SubmissionFailed(); });
  absl::Time compile_start = absl::Now();
  {
    // A cancel ends the stream; the coordinator, seeing its client go,
    // stops the build's units on the workers.
    CancelWatch cancel_watch(options.cancel, [&] { follower.EndStream(); });
    v1::SubmitBuildRequest opening =
        OpeningRequest(options.plan_path, prepared.toolchain, options.architecture_split);
    // Every entry is known before the first is scanned: the coordinator
    // keeps slots for those still to come.
    opening.set_entries_expected(static_cast<int32_t>(plan.units.size() + plan.sets.size()));
    RETURN_IF_ERROR(follower.Follow(opening, submission, scan_cache));
  }
  const FollowedBuild& followed = follower.result();
  // Scans, checks and parts: a failure there ended the build.
  absl::Status submitted = submission.Finish();
  if (absl::IsUnavailable(submitted) && !followed.finished && !Cancelled(options)) {
    // A part or an upload found the coordinator gone (the stream's end may
    // say so too): the same words, whichever noticed first.
    return LostCoordinatorError(cluster.address, std::string(submitted.message()));
  }
  if (!submitted.ok() && !Cancelled(options)) {
    out << "distcc-cuda: the build stopped: " << submitted.message() << "\n";
    if (!followed.reports.empty()) {
      out << "  the " << followed.reports.size()
          << " units that finished are in the result cache: run the same command again once "
             "this is fixed\n";
    }
    return submitted;
  }
  // A coordinator that does not know parts ends the opened build at once.
  if (followed.finished && !followed.last_part_seen) return OlderCoordinatorError(cluster.address);
  scan_cache.Trim(kScanCacheBytes);
  figures.submission = TraceSubmission(submission.figures(), trace);
  figures.workspaces =
      DescribeWorkspaces(submission.figures().workspaces, submission.figures().input_roots,
                         submission.figures().outside, options.absolute_paths);
  RETURN_IF_ERROR(CheckBuildEnded(followed, options, cluster, out));
  figures.compile_time = absl::Now() - compile_start;
  RETURN_IF_ERROR(CheckNoUnitFailed(followed, out));

  CasClient cas(v1::ContentStore::NewStub(cluster.channel));
  ASSIGN_OR_RETURN(figures.verified, VerifySample(followed.returned, options, cas, out));
  absl::Time link_start = absl::Now();
  ASSIGN_OR_RETURN(figures.objects, MergeAndOrderObjects(plan, followed));
  ASSIGN_OR_RETURN(figures.link_argv, Link(plan, figures.objects.paths, options, out));
  figures.link_time = absl::Now() - link_start;
  trace.Add("this machine", "link", "link", link_start, absl::Now());

  PrintSummary(plan, followed, figures, prepared.toolchain, out);
  if (!options.trace_path.empty()) {
    RETURN_IF_ERROR(Annotate(trace.Write(options.trace_path), "--trace"));
    out << "  trace     " << options.trace_path << " (open it in ui.perfetto.dev)\n";
  }
  return absl::OkStatus();
}

}  // namespace distcc_cuda::client
