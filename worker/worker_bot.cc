// SPDX-License-Identifier: Apache-2.0
// A worker as a bot of another Remote Execution API engine: the leased
// Action read from the engine's CAS (its Command and input root converted
// into the worker's own store), checked and run as a unit like any other
// (Worker::RunTask: the argument model, the sandbox, the node's cap), and
// its ActionResult made from the unit's result. The session with the
// engine is worker/bot_session.cc.
#include <sys/utsname.h>

#include <algorithm>
#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/reapi/action_unit.h"
#include "common/reapi/engine_channel.h"
#include "common/reapi/input_root.h"
#include "common/store/input_tree.h"
#include "spdlog/spdlog.h"
#include "worker/worker.h"

namespace distcc_cuda::worker {
namespace {

// A leased Action without a timeout of its own, and the longest it may ask.
constexpr absl::Duration kDefaultLeaseTimeout = absl::Hours(1);
constexpr absl::Duration kMaxLeaseTimeout = absl::Hours(4);
// The most a leased Action's input files may take, all together: an engine
// must not fill a bot's disk through one Action.
constexpr int64_t kMaxLeaseInputBytes = int64_t{16} << 30;

// Bazel's names for the machine's instruction set.
std::string InstructionSet() {
  struct utsname name;
  if (uname(&name) != 0) return "unknown";
  std::string machine = name.machine;
  if (machine == "x86_64") return "x86-64";
  return machine;
}

// The status of a lease whose unit ended with `result` without an
// ActionResult: refused (INVALID_ARGUMENT), or lost (the engine retries it).
absl::Status LeaseStatusOf(const v1::TaskResult& result, const std::string& unit) {
  // The worker's own messages name the unit already.
  std::string why = absl::StrContains(result.error_message(), unit)
                        ? result.error_message()
                        : absl::StrCat(unit, ": ", result.error_message());
  const absl::StatusCode code = StatusCodeOfOutcome(result.outcome());
  if (code == absl::StatusCode::kInternal || code == absl::StatusCode::kOk) {
    return absl::InternalError(absl::StrCat(unit, " could not run: ", result.error_message()));
  }
  return absl::Status(code, why);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> Worker::BotProperties() const {
  v1::ToolchainFingerprint fingerprint = toolchain();
  return {{"OSFamily", "linux"},
          {"ISA", InstructionSet()},
          {kToolchainProperty, fingerprint.digest().substr(0, 12)},
          {"nvcc", fingerprint.nvcc_release()},
          {"memory", absl::StrCat(memory_cap_->cap_bytes())}};
}

absl::Status Worker::StartBot() {
  const WorkerOptions& options = options_;
  const EngineAddress engine{options.bots_api, options.bots_api_tls};
  channel_ = OpenEngineChannel(engine, options.bots_api_tls ? options.tls : std::nullopt, {});
  auto engine_cas = std::make_unique<ReapiCasClient>(channel_, options.instance);
  engine_cas_ = engine_cas.get();
  cas_client_ = std::move(engine_cas);
  BotOptions bot;
  bot.engine_address = engine.Url();
  bot.instance = options.instance;
  bot.bot_id = options.name;
  bot.capacity = options.slots;
  bot.properties = BotProperties();
  bot.on_call = [metrics = metrics_.get()](absl::string_view call, const absl::Status& status) {
    metrics->BotCall(call, status.ok());
  };
  bot_ = BotSession::Start(
      channel_, std::move(bot),
      [this](const reapi::Action& action, const std::string& lease_id, const CancelToken& cancel) {
        LogFields fields{{"task", lease_id}};
        return RunLease(action, cancel);
      });
  return absl::OkStatus();
}

absl::Status Worker::CheckLeaseInputs(const v1::CompileUnit& unit) {
  v1::CompileUnit listed = unit;
  RETURN_IF_ERROR(ExpandUnitInputs(listed, [this](const Digest& digest) {
    return engine_cas_->FetchThroughStore(digest, *cache_);
  }));
  int64_t bytes = 0;
  std::vector<Digest> not_here;
  std::map<Digest, std::string> paths;
  for (const v1::InputFile& input : listed.inputs()) {
    const Digest digest = FromProto(input.digest());
    bytes += std::max<int64_t>(digest.size_bytes, 0);
    if (!cache_->Contains(digest) && paths.emplace(digest, input.path()).second) {
      not_here.push_back(digest);
    }
  }
  if (bytes > kMaxLeaseInputBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the action's inputs take ",
                                                   FormatByteSize(bytes),
                                                   "; a compile that distcc-cuda runs "
                                                   "reads at most ",
                                                   FormatByteSize(kMaxLeaseInputBytes)));
  }
  if (not_here.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<Digest> missing, engine_cas_->FindMissing(not_here));
  if (missing.empty()) return absl::OkStatus();
  // What the client must upload again (REAPI: a MISSING precondition).
  std::vector<std::string> subjects;
  for (const Digest& digest : missing) subjects.push_back(BlobSubject(ToReapi(digest)));
  return MissingBlobsError(absl::StrCat("the engine lacks ", missing.size(), " input file",
                                        missing.size() > 1 ? "s" : "", " of the action (",
                                        absl::CHexEscape(paths[missing[0]].substr(0, 200)),
                                        missing.size() > 1 ? ", ..." : "", ")"),
                           subjects);
}

v1::TaskResult Worker::RunLeasedTask(v1::Task& task, const CancelToken& cancel) {
  bool alone = true;
  v1::TaskResult result;
  {
    absl::ReaderMutexLock shared(&lease_gate_);
    alone = ++leases_compiling_ == 1;
    result = RunTask(task, cancel);
    alone = leases_compiling_-- == 1 && alone;
  }
  metrics_->TaskEnded(result);
  if (result.outcome() != v1::TASK_KILLED_FOR_MEMORY || alone || cancel.cancelled()) return result;
  spdlog::warn(
      "bot {}: {} was killed for memory beside other units (its peak {} of the cap {}); "
      "running it again alone",
      options_.name, task.unit().name(), FormatByteSize(result.peak_memory_bytes()),
      FormatByteSize(memory_cap_->cap_bytes()));
  // Waits for the units running now to end; new ones wait for this.
  absl::WriterMutexLock exclusive(&lease_gate_);
  task.set_task_id(absl::StrCat(task.task_id(), "-alone"));
  task.set_reserved_bytes(memory_cap_->cap_bytes());
  result = RunTask(task, cancel);
  metrics_->TaskEnded(result);
  return result;
}

LeaseOutcome Worker::RunLease(const reapi::Action& action, const CancelToken& cancel) {
  LeaseOutcome outcome;
  // A blob the engine lacks is its client's to upload again.
  auto fail = [&outcome](absl::Status status) {
    outcome.status = absl::IsNotFound(status) ? absl::FailedPreconditionError(status.message())
                                              : std::move(status);
    return outcome;
  };
  reapi::Command command;
  if (absl::Status read = engine_cas_->ReadMessage(action.command_digest(), "the action's command",
                                                   *cache_, command);
      !read.ok()) {
    return fail(read);
  }
  const reapi::Platform& platform =
      action.platform().properties_size() > 0 ? action.platform() : command.platform();
  if (std::optional<std::string> asked = PlatformProperty(platform, kToolchainProperty)) {
    v1::ToolchainFingerprint mine = toolchain();
    if (!ToolchainMatches(mine, *asked)) {
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "the action asks for toolchain '", absl::CHexEscape(asked->substr(0, 80)), "'; bot ",
          options_.name, " has nvcc ", mine.nvcc_release(), " (", mine.digest().substr(0, 12),
          "): have the engine match the property (BuildGrid: add 'toolchain' to "
          "match-property-keys, and ask for the 12-digit digest), or drop it")));
    }
  }
  absl::StatusOr<std::optional<int64_t>> hint = MemoryHint(platform);
  if (!hint.ok()) return fail(hint.status());
  if (hint->value_or(0) > memory_cap_->cap_bytes()) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "the action says it takes ", FormatByteSize(**hint), " of memory; bot ", options_.name,
        " has a cap of ", FormatByteSize(memory_cap_->cap_bytes()),
        ": it can never run here (have the engine match memory, or start bots with a larger "
        "--memory-cap)")));
  }
  std::unique_ptr<CasPin> pin = cache_->Pin({});
  auto read_folder = [this, &cancel](const reapi::Digest& digest, reapi::Directory& folder) {
    if (cancel.cancelled()) return absl::CancelledError(cancel.reason());
    return engine_cas_->ReadMessage(digest, "a folder of the input root", *cache_, folder);
  };
  // The same bound as the tree's expansion before the unit runs.
  absl::StatusOr<Digest> root =
      ConvertInputRoot(action.input_root_digest(), read_folder, *cache_,
                       InputTreeLimits().max_files, "the most a distcc-cuda unit reads", *pin);
  if (!root.ok()) return fail(root.status());
  absl::StatusOr<v1::CompileUnit> unit = UnitOfCommand(command, *root);
  if (!unit.ok()) return fail(unit.status());
  if (absl::Status inputs = CheckLeaseInputs(*unit); !inputs.ok()) return fail(inputs);
  v1::Task task;
  task.set_task_id(absl::StrCat("lease-", ++leases_run_));
  *task.mutable_unit() = *unit;
  task.set_reserved_bytes(hint->value_or(0));
  absl::Duration timeout =
      action.has_timeout() && action.timeout().seconds() > 0
          ? std::min(absl::Seconds(action.timeout().seconds()), kMaxLeaseTimeout)
          : kDefaultLeaseTimeout;
  task.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  v1::TaskResult result = RunLeasedTask(task, cancel);
  spdlog::info("bot {}: {} ended: {} (exit {}, {} reserved)", options_.name, unit->name(),
               v1::TaskOutcome_Name(result.outcome()), result.exit_code(),
               task.reserved_bytes() > 0 ? FormatByteSize(task.reserved_bytes()) : "nothing");
  if (result.outcome() != v1::TASK_COMPLETED && result.outcome() != v1::TASK_KILLED_FOR_MEMORY) {
    return fail(LeaseStatusOf(result, unit->name()));
  }
  std::vector<BlobSource> texts;
  absl::StatusOr<reapi::ActionResult> action_result =
      ActionResultOf(result, *unit, task.reserved_bytes(),
                     [&texts](const std::string& text) -> absl::StatusOr<Digest> {
                       texts.push_back(BlobSource{DigestOf(text), "", text});
                       return texts.back().digest;
                     });
  if (!action_result.ok()) return fail(action_result.status());
  if (absl::StatusOr<int> sent = cas_client_->UploadMissing(texts); !sent.ok()) {
    return fail(absl::UnavailableError(
        absl::StrCat("cannot upload the action's stdout and stderr: ", sent.status().message())));
  }
  outcome.result = *std::move(action_result);
  return outcome;
}

}  // namespace distcc_cuda::worker
