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
#include "client/build_plan.h"
#include "client/build_submission.h"
#include "client/coordinator_text.h"
#include "client/dependency_scan.h"
#include "client/embedded_cluster.h"
#include "client/link_step.h"
#include "client/prediction_report.h"
#include "client/progress.h"
#include "client/scan_cache.h"
#include "client/trace.h"
#include "client/unit_request.h"
#include "client/verify.h"
#include "common/base/byte_size.h"
#include "common/base/cancellation.h"
#include "common/base/files.h"
#include "common/base/host_resources.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/nvcc/compile_identity.h"
#include "common/nvcc/fatbin.h"
#include "common/nvcc/forwarded_flags.h"
#include "common/nvcc/nvcc_args.h"
#include "common/nvcc/toolchain.h"
#include "common/process/subprocess.h"
#include "common/store/cas_client.h"
#include "common/transport/tls_credentials.h"
#include "distcc_cuda/v1/build.grpc.pb.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

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

// The line that says what went to the coordinator: the inputs, the scans
// and the parts, once the last part went.
std::string DescribeSubmission(const BuildSubmission::Figures& figures, const ScanCache& cache,
                               absl::Time start) {
  std::string text = absl::StrCat("distcc-cuda: ", figures.input_files, " input files under ",
                                  figures.roots.empty() ? "/" : figures.roots[0]);
  if (figures.roots.size() > 1) absl::StrAppend(&text, " and ", figures.roots.size() - 1, " more");
  absl::StrAppend(&text, " (", figures.uploaded, " uploaded), scanned in ",
                  Seconds(figures.scan_ended - figures.scan_began));
  if (figures.scans_cached > 0) {
    absl::StrAppend(&text, " (", figures.scans_cached, " of ", cache.hits() + cache.misses(),
                    " scans unchanged since the last build, from the scan cache)");
  }
  if (!figures.parts.empty()) {
    absl::StrAppend(&text, "; sent in ", figures.parts.size(),
                    figures.parts.size() == 1 ? " part" : " parts", " as scanned, the first after ",
                    Seconds(figures.parts[0].sent - start));
  }
  return text + "\n";
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
  ASSIGN_OR_RETURN(LocalPlan plan, LoadLocalPlan(options, is_compdb));
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

  // The units are scanned on every core and sent as they are scanned, a
  // part at a time, to one build opened before the first scan ends.
  ScanCache scan_cache(ScanCache::FolderFor(options.state_dir), toolchain.digest());
  std::map<std::string, std::string> local_objects;  // unit name -> local path
  for (const LocalUnit& unit : plan.units) local_objects[unit.name] = unit.local_object;
  auto stub = v1::BuildService::NewStub(channel);
  CasClient cas(v1::ContentStore::NewStub(channel));
  BuildTrace trace;
  // The current submission's stream. A cancel ends it; the coordinator,
  // seeing its client go, stops the build's units on the workers. So does
  // a failed scan or part.
  absl::Mutex stream_mu;
  grpc::ClientContext* stream_context = nullptr;  // guarded by stream_mu
  auto end_stream = [&] {
    absl::MutexLock lock(&stream_mu);
    if (stream_context != nullptr) stream_context->TryCancel();
  };
  std::atomic<bool> submission_failed{false};
  const bool reconnects = embedded == nullptr && options.reconnect_timeout > absl::ZeroDuration();
  BuildSubmission submission(
      plan, {options.nvcc_path, &scan_cache, UsableCores(), reconnects, end_stream, address},
      channel, [&](const absl::Status&) {
        submission_failed = true;
        end_stream();
      });
  absl::Time compile_start = absl::Now();
  std::optional<CancelWatch> cancel_watch;
  cancel_watch.emplace(options.cancel, end_stream);
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
  const v1::SubmitBuildRequest request =
      OpeningRequest(options.plan_path, toolchain, options.architecture_split);
  bool opened = false;
  bool last_part_seen = false;                  // the coordinator has every unit
  std::map<std::string, absl::Time> queued_at;  // for --trace
  for (;;) {
    submitted_at = absl::Now();
    grpc::ClientContext context;
    {
      absl::MutexLock lock(&stream_mu);
      stream_context = &context;
      // A cancel, or a scan that failed, before this stream began.
      if ((options.cancel != nullptr && options.cancel->cancelled()) || submission_failed) {
        context.TryCancel();
      }
    }
    auto reader = stub->SubmitBuild(&context, request);
    v1::BuildEvent event;
    started.clear();
    while (reader->Read(&event)) {
      MakePrintable(event);
      if (event.has_accepted()) {
        total = event.accepted().unit_names_size();
        out << "distcc-cuda: build " << event.accepted().build_id()
            << (resubmissions > 0 ? " (resubmitted)" : "") << " on " << address << " ("
            << event.accepted().eligible_workers()
            << " workers with this toolchain): its units go as they are scanned\n";
        for (const std::string& note : event.accepted().notes()) out << "  " << note << "\n";
        if (!opened) {
          submission.SendTo(event.accepted().build_id());
          opened = true;
        } else {
          submission.Reopen(event.accepted().build_id());
        }
      } else if (event.has_units_added()) {
        total += event.units_added().unit_names_size();
        const absl::Time added_at = CoordinatorTimeOrNow(event.units_added().added_unix_micros());
        for (const std::string& name : event.units_added().unit_names()) {
          queued_at[name] = added_at;
        }
        last_part_seen = last_part_seen || event.units_added().last();
        for (const std::string& note : event.units_added().notes()) out << "  " << note << "\n";
        if (event.units_added().last() && resubmissions == 0) {
          out << DescribeSubmission(submission.figures(), scan_cache, start);
        }
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
          auto queued = queued_at.find(done.unit_name());
          trace.Add("coordinator queue", done.unit_name(), "queue",
                    queued == queued_at.end() ? submitted_at : queued->second,
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
        // "+": more units may come with parts not yet sent.
        out << absl::StrFormat(
            "  [%d/%d%s] %-44s %s\n", reports.size(), total, submission.closed() ? "" : "+",
            done.unit_name(),
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
    if (submission_failed) break;  // Finish says why
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
    // Back means it answered: a channel can still look connected for a
    // moment after its coordinator died.
    bool back = false;
    while (!back && absl::Now() - lost_at < options.reconnect_timeout &&
           !(options.cancel != nullptr && options.cancel->cancelled())) {
      if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(1))) {
        continue;
      }
      grpc::ClientContext probe;
      probe.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      v1::ClusterStatus cluster;
      if (!stub->GetClusterStatus(&probe, v1::GetClusterStatusRequest(), &cluster).ok()) {
        absl::SleepFor(absl::Milliseconds(200));
        continue;
      }
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
        << "; submitting the build again (the inputs it lacks go up again)\n";
  }
  cancel_watch.reset();
  // Scans, checks and parts: a failure there ended the build.
  absl::Status submitted = submission.Finish();
  if (!submitted.ok() && !(options.cancel != nullptr && options.cancel->cancelled())) {
    out << "distcc-cuda: the build stopped: " << submitted.message() << "\n";
    if (!reports.empty()) {
      out << "  the " << reports.size()
          << " units that finished are in the result cache: run the same command again once "
             "this is fixed\n";
    }
    return submitted;
  }
  // A coordinator that does not know parts ends the opened build at once.
  if (finished && !last_part_seen) return OlderCoordinatorError(address);
  const BuildSubmission::Figures figures = submission.figures();
  scan_cache.Trim(kScanCacheBytes);
  const absl::Duration scan_time = figures.scan_ended - figures.scan_began;
  absl::Duration upload_time;
  trace.Add("this machine", absl::StrCat("scan (", figures.units, ")"), "scan", figures.scan_began,
            figures.scan_ended);
  for (size_t i = 0; i < figures.parts.size(); ++i) {
    const BuildSubmission::Figures::Part& part = figures.parts[i];
    upload_time += part.sent - part.began;
    trace.Add("this machine", absl::StrCat("part ", i + 1, " (", part.units, " units)"), "upload",
              part.began, part.sent);
  }
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
      << " and upload " << Seconds(upload_time) << " beside the compile, compile "
      << Seconds(compile_time) << ", link " << Seconds(link_time) << ")\n";
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
