// SPDX-License-Identifier: Apache-2.0
#include "client/stages/build_follower.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/text/coordinator_text.h"
#include "client/text/progress.h"
#include "common/base/byte_size.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/nvcc/nvcc_args.h"
#include "common/store/digest.h"

namespace distcc_cuda::client {
namespace {

// Why a unit failed, for its error line: nvcc's exit code, or what the
// worker says when nvcc did not run or ran to an end its outputs were
// refused at (exit -1: an output missing or larger than a compile's, from
// an engine or a sandbox).
std::string WhyItFailed(const v1::TaskResult& result) {
  if (result.outcome() != v1::TASK_COMPLETED) return result.error_message();
  if (result.exit_code() == -1 && !result.error_message().empty()) {
    return TerminalSafe(result.error_message());
  }
  return absl::StrCat("nvcc exit code ", result.exit_code());
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

BuildFollower::BuildFollower(Settings settings, std::shared_ptr<grpc::Channel> channel,
                             BuildTrace& trace, std::ostream& out)
    : settings_(std::move(settings)),
      channel_(std::move(channel)),
      stub_(v1::BuildService::NewStub(channel_)),
      cas_(v1::ContentStore::NewStub(channel_)),
      trace_(trace),
      out_(out) {
  for (const LocalUnit& unit : settings_.plan->units) {
    result_.local_objects[unit.name] = unit.local_object;
  }
}

void BuildFollower::EndStream() {
  absl::MutexLock lock(&stream_mu_);
  if (stream_context_ != nullptr) stream_context_->TryCancel();
}

void BuildFollower::SubmissionFailed() {
  submission_failed_ = true;
  EndStream();
}

bool BuildFollower::cancelled() const {
  return settings_.cancel != nullptr && settings_.cancel->cancelled();
}

absl::Status BuildFollower::Follow(const v1::SubmitBuildRequest& request,
                                   BuildSubmission& submission, const ScanCache& scan_cache) {
  for (;;) {
    submitted_at_ = absl::Now();
    grpc::ClientContext context;
    {
      absl::MutexLock lock(&stream_mu_);
      stream_context_ = &context;
      // A cancel, or a scan that failed, before this stream began.
      if (cancelled() || submission_failed_) context.TryCancel();
    }
    auto reader = stub_->SubmitBuild(&context, request);
    v1::BuildEvent event;
    result_.started.clear();
    while (reader->Read(&event)) {
      MakePrintable(event);
      OnEvent(event, submission, scan_cache);
    }
    result_.status = reader->Finish();
    {
      absl::MutexLock lock(&stream_mu_);
      stream_context_ = nullptr;
    }
    if (submission_failed_ || !ShouldReconnect()) return absl::OkStatus();
    // The coordinator went away (a restart, a crash, the network): keep the
    // build, wait for it, submit again. Its result cache survives restarts,
    // so what finished comes back without compiling.
    absl::Time lost_at = absl::Now();
    out_ << "distcc-cuda: lost the coordinator at " << settings_.address << " ("
         << TerminalSafe(result_.status.error_message()) << "); reconnecting for up to "
         << absl::FormatDuration(settings_.reconnect_timeout) << " (" << have_.size()
         << " finished units are kept)\n";
    if (!WaitForCoordinator(lost_at)) {
      if (cancelled()) return absl::OkStatus();
      return absl::UnavailableError(
          absl::StrCat("the coordinator at ", settings_.address,
                       " went away during the build and was not back within ",
                       absl::FormatDuration(settings_.reconnect_timeout),
                       " (--reconnect-timeout); the ", have_.size(),
                       " units that finished are in its result cache: run the same command "
                       "again once it is back"));
    }
    ++result_.resubmissions;
    out_ << "distcc-cuda: the coordinator is back after " << Seconds(absl::Now() - lost_at)
         << "; submitting the build again (the inputs it lacks go up again)\n";
  }
}

bool BuildFollower::ShouldReconnect() const {
  // UNAVAILABLE: the connection broke; CANCELLED that this client did not
  // ask for: the coordinator shut down.
  const bool lost = result_.status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                    result_.status.error_code() == grpc::StatusCode::CANCELLED;
  return lost && !result_.finished && !cancelled() &&
         settings_.reconnect_timeout > absl::ZeroDuration();
}

bool BuildFollower::WaitForCoordinator(absl::Time lost_at) {
  // Back means it answered: a channel can still look connected for a
  // moment after its coordinator died.
  while (absl::Now() - lost_at < settings_.reconnect_timeout && !cancelled()) {
    if (!channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(1))) {
      continue;
    }
    grpc::ClientContext probe;
    probe.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::ClusterStatus cluster;
    if (stub_->GetClusterStatus(&probe, v1::GetClusterStatusRequest(), &cluster).ok()) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  return false;
}

void BuildFollower::OnEvent(const v1::BuildEvent& event, BuildSubmission& submission,
                            const ScanCache& scan_cache) {
  if (event.has_accepted()) {
    OnAccepted(event.accepted(), submission);
  } else if (event.has_units_added()) {
    const auto& added = event.units_added();
    result_.total += added.unit_names_size();
    const absl::Time added_at = CoordinatorTimeOrNow(added.added_unix_micros());
    for (const std::string& name : added.unit_names()) queued_at_[name] = added_at;
    result_.last_part_seen = result_.last_part_seen || added.last();
    for (const std::string& note : added.notes()) out_ << "  " << note << "\n";
    if (added.last() && result_.resubmissions == 0) {
      out_ << DescribeSubmission(submission.figures(), scan_cache, settings_.start);
    }
  } else if (event.has_unit_split()) {
    const auto& split = event.unit_split();
    result_.total += split.into_size() - 1;
    out_ << "  split " << split.unit_name() << " into " << absl::StrJoin(split.into(), ", ") << ": "
         << split.reason() << "\n";
  } else if (event.has_unit_started()) {
    result_.started.insert(event.unit_started().unit_name());
    started_at_[event.unit_started().unit_name()] =
        CoordinatorTimeOrNow(event.unit_started().leased_unix_micros());
  } else if (event.has_unit_requeued()) {
    result_.started.erase(event.unit_requeued().unit_name());
    out_ << "  re-queued " << event.unit_requeued().unit_name() << ": "
         << event.unit_requeued().reason() << "\n";
  } else if (event.has_unit_finished()) {
    OnUnitFinished(event.unit_finished(), submission);
  } else if (event.has_finished()) {
    result_.finished = true;
  }
}

void BuildFollower::OnAccepted(const v1::BuildEvent::Accepted& accepted,
                               BuildSubmission& submission) {
  result_.total = accepted.unit_names_size();
  out_ << "distcc-cuda: build " << accepted.build_id()
       << (result_.resubmissions > 0 ? " (resubmitted)" : "") << " on " << settings_.address << " ("
       << accepted.eligible_workers()
       << " workers with this toolchain): its units go as they are scanned\n";
  for (const std::string& note : accepted.notes()) out_ << "  " << note << "\n";
  if (!opened_) {
    submission.SendTo(accepted.build_id());
    opened_ = true;
  } else {
    submission.Reopen(accepted.build_id());
  }
}

std::string BuildFollower::MessagesOf(const std::string& unit, const v1::TaskResult& result,
                                      const BuildSubmission& submission) {
  if (result.stdout_text().empty() && result.stderr_text().empty()) return "";
  if (directories_.empty() && settings_.plan != nullptr) {
    for (const LocalUnit& local : settings_.plan->units) {
      directories_.emplace(local.name, local.directory);
    }
  }
  auto directory = directories_.find(unit);
  return submission.ToLocalText(absl::StrCat(result.stdout_text(), result.stderr_text()),
                                directory != directories_.end() ? directory->second : "");
}

void BuildFollower::OnUnitFinished(const v1::BuildEvent::UnitFinished& done,
                                   const BuildSubmission& submission) {
  const bool all_sent = submission.closed();
  result_.started.erase(done.unit_name());
  if (have_.count(done.unit_name())) {
    // Came back before the coordinator was lost: already here.
    ++(done.cached() ? result_.came_back_cached : result_.compiled_again);
    return;
  }
  have_.insert(done.unit_name());
  const v1::TaskResult& result = done.result();
  const absl::Time finished_at = CoordinatorTimeOrNow(done.finished_unix_micros());
  TraceUnit(done, finished_at);
  UnitReport report{done.unit_name(),
                    result.worker_name(),
                    done.cached(),
                    result.outcome() == v1::TASK_COMPLETED && result.exit_code() == 0,
                    result.wall_time_ms(),
                    result.cpu_time_ms(),
                    result.peak_memory_bytes(),
                    done.predicted_peak_bytes(),
                    done.prediction_source()};
  result_.reports.push_back(report);
  PrintUnitLine(done, report, all_sent);
  if (!report.ok) {
    result_.failed.push_back(done.unit_name());
    out_ << "\nerror: unit " << done.unit_name() << " failed on worker " << result.worker_name()
         << " (" << WhyItFailed(result) << "):\n";
    const std::string messages = MessagesOf(done.unit_name(), result, submission);
    out_ << messages;
    if (!messages.empty() && messages.back() != '\n') out_ << "\n";
    out_ << "\n";
    return;
  }
  out_ << MessagesOf(done.unit_name(), result, submission);
  if (result.toolchain_digest() != settings_.toolchain_digest) {
    // Never link an object of another toolchain into this library.
    if (result_.download_error.ok()) {
      result_.download_error = absl::FailedPreconditionError(
          absl::StrCat("unit ", done.unit_name(), " came back compiled with toolchain [",
                       result.toolchain_digest().substr(0, 12), "], not this build's ",
                       settings_.toolchain_description, "; not linking it"));
    }
    return;
  }
  if (!DownloadObjects(done, finished_at)) {
    have_.erase(done.unit_name());
    result_.reports.pop_back();
    result_.not_downloaded.insert(done.unit_name());
  }
}

void BuildFollower::TraceUnit(const v1::BuildEvent::UnitFinished& done, absl::Time finished_at) {
  auto it = started_at_.find(done.unit_name());
  const absl::Time began = it == started_at_.end() ? absl::InfinitePast() : it->second;
  auto queued = queued_at_.find(done.unit_name());
  trace_.Add("coordinator queue", done.unit_name(), "queue",
             queued == queued_at_.end() ? submitted_at_ : queued->second,
             done.cached() || began == absl::InfinitePast() ? finished_at : began);
  if (done.cached()) return;
  const v1::TaskResult& result = done.result();
  trace_.Add("worker " + result.worker_name(), done.unit_name(), "compile", began, finished_at,
             {{"peak memory", FormatByteSize(result.peak_memory_bytes())},
              {"predicted peak", FormatByteSize(done.predicted_peak_bytes())},
              {"nvcc wall time", Seconds(absl::Milliseconds(result.wall_time_ms()))}});
}

void BuildFollower::PrintUnitLine(const v1::BuildEvent::UnitFinished& done,
                                  const UnitReport& report, bool all_sent) {
  // "+": more units may come with parts not yet sent.
  out_ << absl::StrFormat(
      "  [%d/%d%s] %-44s %s\n", result_.reports.size(), result_.total, all_sent ? "" : "+",
      done.unit_name(),
      report.cached
          ? (done.result().engine_cache_hit() ? "cached (the engine's ActionCache)" : "cached")
          : absl::StrFormat("%-10s %5.1f s  peak %s (predicted %s, %s)", report.worker,
                            report.wall_ms / 1000.0, FormatByteSize(report.peak_bytes),
                            FormatByteSize(report.predicted_bytes), report.prediction_source));
}

namespace {

// The unit's names, fit to name files of this machine (DownloadToFile
// bounds their sizes).
absl::Status CheckObjectsToWrite(const v1::BuildEvent::UnitFinished& done) {
  std::vector<absl::string_view> names = {done.unit_name()};
  if (done.unit().has_architecture_part()) names.push_back(done.unit().architecture_part().of());
  for (absl::string_view name : names) {
    if (!ValidateUnitName(name).ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the coordinator named a unit '", TerminalSafe(name, false, 200),
          "' that is no unit's name; no object of it is written (is that coordinator yours?)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool BuildFollower::DownloadObjects(const v1::BuildEvent::UnitFinished& done,
                                    absl::Time finished_at) {
  const LocalPlan& plan = *settings_.plan;
  // The names become files' names: a coordinator's words, checked before
  // any byte is written.
  if (absl::Status refused = CheckObjectsToWrite(done); !refused.ok()) {
    if (result_.download_error.ok()) result_.download_error = refused;
    return true;
  }
  // Objects land in the order the plan names them, whoever compiled them.
  auto named = result_.local_objects.find(done.unit_name());
  std::string local = named != result_.local_objects.end()
                          ? named->second
                          : plan.object_dir + "/" + done.unit_name() + ".o";
  if (done.unit().has_architecture_part()) {
    const v1::ArchitecturePart& part = done.unit().architecture_part();
    local = plan.object_dir + "/" + done.unit_name() + ".o";
    result_.architecture_parts[part.of()].count = part.count();
    result_.architecture_parts[part.of()].paths[part.index()] = local;
  }
  for (const auto& output : done.result().outputs()) {
    absl::Status got = cas_.DownloadToFile(FromProto(output.digest()), local);
    if (got.ok()) continue;
    if (absl::IsUnavailable(got) && settings_.reconnect_timeout > absl::ZeroDuration()) {
      // The coordinator went away mid-download: the unit comes back
      // (cached) when the build is submitted again.
      return false;
    }
    if (result_.download_error.ok()) {
      result_.download_error = Annotate(got, absl::StrCat("downloading ", done.unit_name()));
    }
  }
  result_.not_downloaded.erase(done.unit_name());
  trace_.Add("this machine", done.unit_name(), "download", finished_at, absl::Now());
  result_.local_objects[done.unit_name()] = local;
  const v1::TaskResult& result = done.result();
  result_.returned.push_back(UnitToVerify{
      done.unit(), done.cached() ? result.worker_name() + ", cached" : result.worker_name(),
      local});
  return true;
}

}  // namespace distcc_cuda::client
