// SPDX-License-Identifier: Apache-2.0
// A worker as the client of another Remote Execution API engine (`distcc-cuda
// build --remote-executor`): each unit it leases from its coordinator runs
// on the engine as an Action. The coordinator's planning, admission, retry
// ladder and result cache stay as they are; the engine's workers compile,
// each under the engine's own rules. The unit's reservation goes to the
// engine in the memory property it reads, so a memory kill the engine
// reports (exit 137, RESOURCE_EXHAUSTED) comes back as a kill and the
// ladder sends the unit again with a larger property.
#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/nvcc/canonical_paths.h"
#include "common/nvcc/nvcc_args.h"
#include "common/reapi/action_unit.h"
#include "common/store/input_tree.h"
#include "spdlog/spdlog.h"
#include "worker/task_result.h"
#include "worker/worker.h"

namespace distcc_cuda::worker {
namespace {

// At most this many memory values asked of the engine's ActionCache before
// a unit is sent (a lookup each; about 9 within 4 times either way).
constexpr size_t kMostEngineCacheLookups = 12;

// The peak a distcc-cuda bot measured (its UnitMemoryUsage), within
// `most`; nullopt from other engines, which report none.
std::optional<int64_t> ReportedPeak(const reapi::ActionResult& result, int64_t most) {
  for (const google::protobuf::Any& any : result.execution_metadata().auxiliary_metadata()) {
    v1::UnitMemoryUsage memory;
    if (any.UnpackTo(&memory) && memory.peak_bytes() > 0) {
      return std::min(memory.peak_bytes(), most);
    }
  }
  return std::nullopt;
}

// How long the engine's worker ran the action (its execution's start to
// end), 0 when it does not say or says nonsense; at most a day.
int64_t RunTimeMs(const reapi::ExecutedActionMetadata& metadata) {
  if (!metadata.has_execution_start_timestamp() || !metadata.has_execution_completed_timestamp()) {
    return 0;
  }
  auto millis = [](const google::protobuf::Timestamp& at) -> int64_t {
    // Up to the year 5000; an engine's nonsense beyond is not a time.
    if (at.seconds() < 0 || at.seconds() > int64_t{100'000'000'000}) return 0;
    return at.seconds() * 1000 + at.nanos() / 1000000;
  };
  const int64_t ms = millis(metadata.execution_completed_timestamp()) -
                     millis(metadata.execution_start_timestamp());
  return ms > 0 && ms < 24 * 3600 * 1000 ? ms : 0;
}

// The result of an execution the engine ended with a status other than OK:
// a memory kill (RESOURCE_EXHAUSTED), a refusal (INVALID_ARGUMENT: a
// distcc-cuda bot's argument model), a timeout, or a loss the coordinator
// re-queues.
v1::TaskResult ResultOfEngineStatus(const google::rpc::Status& status, const std::string& engine,
                                    int64_t reserved_bytes) {
  const auto code = status.code() > 0 && status.code() <= 16
                        ? static_cast<absl::StatusCode>(status.code())
                        : absl::StatusCode::kUnknown;
  std::string why = absl::StrCat("the engine at ", engine, " says ", absl::StatusCodeToString(code),
                                 ": ", TerminalSafe(status.message().substr(0, 2000)));
  v1::TaskResult result;
  result.set_error_message(why);
  switch (code) {
    case absl::StatusCode::kResourceExhausted:
      // Any quota in REAPI; a memory kill only where it says so.
      if (!absl::StrContains(absl::AsciiStrToLower(status.message()), "memory")) {
        return FailedToStart(why);
      }
      result.set_outcome(v1::TASK_KILLED_FOR_MEMORY);
      result.set_peak_memory_bytes(reserved_bytes);
      return result;
    case absl::StatusCode::kInvalidArgument:
      result.set_outcome(v1::TASK_REJECTED);
      return result;
    case absl::StatusCode::kDeadlineExceeded:
      result.set_outcome(v1::TASK_TIMED_OUT);
      return result;
    default:
      return FailedToStart(why);
  }
}

}  // namespace

std::string Worker::memory_mechanism() const {
  if (memory_cap_ != nullptr) return memory_cap_->Describe();
  const MemoryProperty& property = options_.memory_property;
  return absl::StrCat(
      "the engine at ", options_.remote_executor->Url(), " (its largest worker taken as ",
      FormatByteSize(options_.memory_cap_bytes), "; ",
      property.name.empty() ? "no memory property sent"
                            : absl::StrCat("each unit's reservation sent as ", property.name),
      ")");
}

void Worker::StartEngine() {
  const WorkerOptions& options = options_;
  std::shared_ptr<grpc::Channel> channel =
      OpenEngineChannel(*options.remote_executor, options.remote_tls, options.remote_headers);
  engine_store_ = std::make_unique<ReapiCasClient>(channel, options.instance);
  engine_execution_ = std::make_unique<ReapiExecutionClient>(channel, options.instance);
}

v1::TaskResult Worker::RunOnEngine(const v1::Task& task, const CancelToken& cancel) {
  const absl::Time start = absl::Now();
  const std::string engine = options_.remote_executor->Url();
  // The unit's files listed and checked as for a compile here.
  v1::CompileUnit unit = task.unit();
  absl::Status expanded = ExpandUnitInputs(unit, [this](const Digest& digest) {
    return cas_client_->FetchThroughStore(digest, *cache_);
  });
  if (!expanded.ok()) {
    return FailedToStart(absl::StrCat("cannot read the unit's input tree: ", expanded.message()));
  }
  if (absl::Status valid = ValidateCompileUnit(unit, SystemIncludePrefixes(toolkit_root_));
      !valid.ok()) {
    v1::TaskResult result = FailedToStart(std::string(valid.message()));
    result.set_outcome(v1::TASK_REJECTED);
    return result;
  }
  // Its files in the local store, kept there until the engine has them.
  std::vector<Digest> inputs;
  for (const v1::InputFile& input : unit.inputs()) {
    if (!input.has_content()) inputs.push_back(FromProto(input.digest()));
  }
  std::unique_ptr<CasPin> pin = cache_->Pin(inputs);
  for (const Digest& digest : inputs) {
    if (absl::Status fetched = cas_client_->DownloadToStore(digest, *cache_); !fetched.ok()) {
      return FailedToStart(absl::StrCat("cannot fetch an input: ", fetched.message()));
    }
  }
  absl::StatusOr<std::string> compiler = CompilerFor(unit, options_.nvcc_path);
  if (!compiler.ok()) return FailedToStart(std::string(compiler.status().message()));
  ActionSettings settings;
  settings.compiler = *compiler;
  // A worker of the engine with another toolchain refuses the unit (a
  // distcc-cuda bot) or the engine schedules it elsewhere.
  settings.platform.push_back({kToolchainProperty, toolchain().digest().substr(0, 12)});
  if (!options_.memory_property.name.empty() && task.reserved_bytes() > 0) {
    settings.platform.push_back(
        {options_.memory_property.name,
         MemoryPropertyValue(options_.memory_property, task.reserved_bytes())});
  }
  settings.timeout = absl::Milliseconds(task.timeout_ms());
  // The engine's workers run this machine's toolkit at its own place, and
  // the Action's input root in a folder of their own: the canonical places
  // (the workspace, a venv's site-packages) go relative to its working
  // directory.
  const std::vector<std::string> arguments =
      CanonicalPathsRelativeTo(ArgumentsInToolkit(unit, toolkit_root_), unit.working_directory());
  unit.mutable_arguments()->Assign(arguments.begin(), arguments.end());
  absl::StatusOr<UnitAction> action =
      ActionOfUnit(unit, settings, [this](const Digest& digest) { return cache_->PathOf(digest); });
  if (!action.ok()) return FailedToStart(std::string(action.status().message()));
  if (std::optional<v1::TaskResult> cached = CachedOnEngine(*action, unit, task, cancel)) {
    return *std::move(cached);
  }
  if (cancel.cancelled()) return Cancelled(cancel.reason());
  if (absl::StatusOr<int> sent = engine_store_->UploadMissing(action->blobs); !sent.ok()) {
    if (cancel.cancelled()) return Cancelled(cancel.reason());
    return FailedToStart(
        absl::StrCat("cannot upload the unit's inputs to ", engine, ": ", sent.status().message()));
  }
  absl::StatusOr<reapi::ExecuteResponse> response =
      engine_execution_->Execute(action->action_digest, cancel);
  if (cancel.cancelled()) return Cancelled(cancel.reason());
  if (!response.ok()) {
    return FailedToStart(absl::StrCat("the engine at ", engine, " did not run ", unit.name(), ": ",
                                      response.status().message()));
  }
  if (response->status().code() != 0) {
    return ResultOfEngineStatus(response->status(), engine, task.reserved_bytes());
  }
  v1::TaskResult result = ResultOfEngineAction(*response, unit, task);
  if (result.wall_time_ms() <= 0) {
    result.set_wall_time_ms(absl::ToInt64Milliseconds(absl::Now() - start));
  }
  return result;
}

std::optional<v1::TaskResult> Worker::CachedOnEngine(const UnitAction& action,
                                                     const v1::CompileUnit& unit,
                                                     const v1::Task& task,
                                                     const CancelToken& cancel) {
  // The memory value is part of the Action, so of the ActionCache's key;
  // but it says only where the engine may run the compile, not what the
  // compile makes. A reservation that moved a step since the result was
  // made (the history learnt more; a teammate's history is another) must
  // not compile again what the engine holds: the values within 4 times the
  // reservation either way are asked too, each a lookup of its digest.
  std::vector<reapi::Digest> candidates = {action.action_digest};
  const MemoryProperty& property = options_.memory_property;
  const int64_t reserved = task.reserved_bytes();
  if (!property.name.empty() && reserved > 0) {
    const std::string own = MemoryPropertyValue(property, reserved);
    const int64_t highest = std::max(reserved, std::min(reserved * 4, options_.memory_cap_bytes));
    for (const std::string& value :
         MemoryPropertyValues(property, reserved / 4, highest, kMostEngineCacheLookups)) {
      if (value != own)
        candidates.push_back(ActionDigestWithProperty(action, property.name, value));
    }
  }
  for (const reapi::Digest& digest : candidates) {
    if (cancel.cancelled()) return std::nullopt;
    absl::StatusOr<std::optional<reapi::ActionResult>> cached =
        engine_execution_->CachedResult(digest, cancel);
    if (!cached.ok()) {
      // Execute looks up the reservation's own value again, and runs it.
      spdlog::debug("{}: no lookup in the engine's ActionCache: {}", unit.name(),
                    cached.status().ToString());
      return std::nullopt;
    }
    if (!cached->has_value() || (*cached)->exit_code() != 0) continue;
    reapi::ExecuteResponse response;
    *response.mutable_result() = **std::move(cached);
    response.set_cached_result(true);
    v1::TaskResult result = ResultOfEngineAction(response, unit, task);
    // An entry whose outputs the engine no longer holds is no result.
    if (result.outcome() == v1::TASK_COMPLETED && result.exit_code() == 0) {
      if (digest.hash() != action.action_digest.hash()) {
        spdlog::info("{}: the engine's ActionCache holds it at another memory value", unit.name());
      }
      return result;
    }
  }
  return std::nullopt;
}

v1::TaskResult Worker::ResultOfEngineAction(const reapi::ExecuteResponse& response,
                                            const v1::CompileUnit& unit, const v1::Task& task) {
  const reapi::ActionResult& action_result = response.result();
  const std::string engine = options_.remote_executor->Url();
  v1::TaskResult result;
  const int64_t limit = options_.max_output_bytes;
  auto text = [&](const std::string& raw, const reapi::Digest& digest) -> std::string {
    if (!raw.empty() || digest.size_bytes() == 0) return raw;
    if (digest.size_bytes() > limit) {
      return absl::StrCat("[distcc-cuda: ", FormatByteSize(digest.size_bytes()), " of output on ",
                          engine, ", above the ", FormatByteSize(limit), " read back]\n");
    }
    absl::StatusOr<std::string> bytes = engine_store_->DownloadBytes(FromReapi(digest));
    return bytes.ok() ? *bytes
                      : absl::StrCat("[distcc-cuda: could not read the output from ", engine, ": ",
                                     bytes.status().message(), "]\n");
  };
  result.set_stdout_text(
      CappedOutput(text(action_result.stdout_raw(), action_result.stdout_digest()), limit, false));
  result.set_stderr_text(
      CappedOutput(text(action_result.stderr_raw(), action_result.stderr_digest()), limit, false));
  const std::string worker =
      TerminalSafe(action_result.execution_metadata().worker().substr(0, 64));
  result.set_engine_cache_hit(response.cached_result());
  result.set_worker_name(response.cached_result() ? "ActionCache"
                         : worker.empty()         ? options_.name
                                                  : worker);
  // A cached result's peak and time are those of the run that made it:
  // the same Action, so the same to learn from. From an engine's worker that
  // measures none, 0: unknown, and nothing is learnt.
  const std::optional<int64_t> peak = ReportedPeak(action_result, options_.memory_cap_bytes);
  result.set_peak_memory_bytes(peak.value_or(0));
  result.set_wall_time_ms(RunTimeMs(action_result.execution_metadata()));
  if (action_result.exit_code() == kKilledExitCode) {
    result.set_outcome(v1::TASK_KILLED_FOR_MEMORY);
    result.set_peak_memory_bytes(std::max(peak.value_or(0), task.reserved_bytes()));
    result.set_error_message(absl::StrCat("killed for memory on the engine at ", engine, " (",
                                          worker.empty() ? "" : worker + ", ", "exit 137",
                                          peak.has_value() ? "" : ", peak unknown", ")"));
    return result;
  }
  result.set_outcome(v1::TASK_COMPLETED);
  result.set_exit_code(action_result.exit_code());
  if (action_result.exit_code() != 0) return result;
  return CollectEngineOutputs(action_result, unit, std::move(result));
}

v1::TaskResult Worker::CollectEngineOutputs(const reapi::ActionResult& action_result,
                                            const v1::CompileUnit& unit, v1::TaskResult result) {
  const std::string engine = options_.remote_executor->Url();
  std::vector<std::pair<std::string, Digest>> outputs;
  for (const std::string& path : unit.output_paths()) {
    const reapi::OutputFile* found = nullptr;
    for (const reapi::OutputFile& file : action_result.output_files()) {
      if (file.path() == path) found = &file;
    }
    if (found == nullptr) {
      result.set_exit_code(-1);
      result.set_error_message(absl::StrCat("the engine at ", engine, " ran ", unit.name(),
                                            " to exit 0 but returned no ", path));
      return result;
    }
    if (found->digest().size_bytes() > kMaxCompileOutputBytes) {
      result.set_exit_code(-1);
      result.set_error_message(absl::StrCat("the engine at ", engine, " returned ", path, " of ",
                                            FormatByteSize(found->digest().size_bytes()),
                                            ", more than a compile's output may be (",
                                            FormatByteSize(kMaxCompileOutputBytes), ")"));
      return result;
    }
    outputs.push_back({path, FromReapi(found->digest())});
  }
  std::vector<Digest> digests;
  for (const auto& [path, digest] : outputs) digests.push_back(digest);
  // Kept in the local store until the coordinator has them.
  std::unique_ptr<CasPin> pin = cache_->Pin(digests);
  std::vector<BlobSource> uploads;
  for (const auto& [path, digest] : outputs) {
    if (absl::Status fetched = engine_store_->DownloadToStore(digest, *cache_); !fetched.ok()) {
      return FailedToStart(
          absl::StrCat("cannot download ", path, " from ", engine, ": ", fetched.message()));
    }
    v1::OutputFile* output = result.add_outputs();
    output->set_path(path);
    *output->mutable_digest() = ToProto(digest);
    uploads.push_back({digest, cache_->PathOf(digest), ""});
  }
  if (absl::StatusOr<int> sent = cas_client_->UploadMissing(uploads); !sent.ok()) {
    return FailedToStart(absl::StrCat("cannot upload outputs: ", sent.status().message()));
  }
  return result;
}

}  // namespace distcc_cuda::worker
