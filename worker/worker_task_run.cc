// SPDX-License-Identifier: Apache-2.0
// How a worker runs one leased task: its inputs materialized from the
// store into a task tree, the compiler the unit names placed in the
// sandbox (or at the unit root) under the node's memory cap, and its
// outputs collected and uploaded. The worker's life (registration,
// heartbeats, slots, reports) is in worker.cc.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/canonical_paths.h"
#include "common/nvcc/nvcc_args.h"
#include "common/nvcc/toolchain.h"
#include "common/process/subprocess.h"
#include "common/process/task_tree.h"
#include "common/store/digest.h"
#include "common/store/input_tree.h"
#include "spdlog/spdlog.h"
#include "worker/task_result.h"
#include "worker/worker.h"

namespace distcc_cuda::worker {
namespace {

// `path` is a folder (made if missing), not a link, owned by this process's
// user: safe to mount a sandbox on.
bool IsOwnDirectory(const std::string& path) {
  if (!MakeDirectories(path).ok()) return false;
  struct stat info;
  return lstat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode) && info.st_uid == geteuid();
}

}  // namespace

std::string Worker::sandbox_description() const {
  if (options_.remote_executor.has_value()) {
    return absl::StrCat("compiles run on the engine at ", options_.remote_executor->Url(),
                        ", isolated by its own workers");
  }
  if (sandbox_ != nullptr) return absl::StrCat("compiles sandboxed by ", sandbox_->Describe());
  return absl::StrCat("INSECURE: compiles run without a sandbox (--insecure-no-sandbox), at ",
                      unit_root_.empty() ? "their task folders' paths" : unit_root_);
}

Worker::MaterializedTask::~MaterializedTask() {
  tree.reset();
  if (!keep && !folder.empty()) RemoveAll(folder).IgnoreError();
}

std::optional<v1::TaskResult> Worker::Materialize(const v1::Task& task, const CancelToken& cancel,
                                                  MaterializedTask& out) {
  // A unit names the headers it shares with others as a tree: its files
  // are listed here, from folders kept in the cache, before any check.
  out.unit = task.unit();
  out.toolkit = ToolkitOf(task);
  const absl::Time inputs_start = absl::Now();
  absl::Status expanded = ExpandUnitInputs(out.unit, [this](const Digest& digest) {
    return cas_client_->FetchThroughStore(digest, *cache_);
  });
  if (!expanded.ok()) {
    return FailedToStart(absl::StrCat("cannot read the unit's input tree: ", expanded.message()));
  }
  // The same checks as the client's and the coordinator's, with the task's
  // toolkit as the system folder it allows.
  absl::Status valid = ValidateCompileUnit(out.unit, SystemIncludePrefixes(out.toolkit.root));
  if (!valid.ok()) {
    v1::TaskResult result = FailedToStart(std::string(valid.message()));
    result.set_outcome(v1::TASK_REJECTED);
    return result;
  }
  absl::StatusOr<std::string> task_dir = MakeTempDirectory(tasks_dir_, "task-");
  if (!task_dir.ok()) return FailedToStart(std::string(task_dir.status().message()));
  out.folder = *task_dir;
  out.keep = options_.keep_sandboxes;
  // The unit's inputs stay in the cache until they are copied into its tree.
  std::vector<Digest> inputs;
  for (const v1::InputFile& input : out.unit.inputs()) {
    inputs.push_back(FromProto(input.digest()));
  }
  out.pin = cache_->Pin(inputs);
  // The input tree, as the client's workspace root: copies of the stored
  // blobs, read-only to the compile.
  absl::StatusOr<TaskTree> prepared = TaskTree::Prepare(
      out.unit, out.folder, sandbox_.get(),
      [this](const v1::InputFile& input, const std::string& destination) -> absl::Status {
        Digest digest = FromProto(input.digest());
        RETURN_IF_ERROR(cas_client_->DownloadToStore(digest, *cache_));
        absl::Status placed = cache_->Materialize(digest, destination, input.is_executable());
        if (absl::IsDataLoss(placed)) {
          // The cached copy was damaged and is gone: fetch it afresh.
          RETURN_IF_ERROR(cas_client_->DownloadToStore(digest, *cache_));
          placed = cache_->Materialize(digest, destination, input.is_executable());
        }
        return placed;
      });
  if (cancel.cancelled()) return Cancelled(cancel.reason());
  if (!prepared.ok()) return FailedToStart(std::string(prepared.status().message()));
  out.tree.emplace(*std::move(prepared));
  metrics_->InputsReady(absl::Now() - inputs_start);
  return std::nullopt;
}

absl::StatusOr<std::string> Worker::CompilerFor(const v1::CompileUnit& unit,
                                                const std::string& nvcc) const {
  if (unit.compiler() != v1::UNIT_COMPILER_HOST_CXX) return nvcc;
  // The g++ whose version the toolchain fingerprint names (found in PATH as
  // the fingerprint found it), by its absolute path: the sandbox runs it.
  std::map<std::string, std::string> environment;
  if (const char* path = std::getenv("PATH")) environment["PATH"] = path;
  absl::StatusOr<std::string> host = ResolveProgram(kHostCompiler, environment, "");
  if (!host.ok()) {
    return Annotate(host.status(), absl::StrCat("worker ", options_.name,
                                                " has no host compiler for a .cpp unit"));
  }
  return AbsolutePath(*host);
}

absl::StatusOr<ProcessSpec> Worker::PlaceProcess(ProcessSpec spec,
                                                 const MaterializedTask& materialized) const {
  const TaskTree& tree = *materialized.tree;
  if (sandbox_ != nullptr) {
    // Inside, the tree is at the client's own workspace root: nvcc sees the
    // paths of a local build.
    return sandbox_->Wrap(spec, tree.ForSandbox(), materialized.toolkit.root);
  }
  const v1::CompileUnit& unit = materialized.unit;
  std::string unit_root = unit_root_;
  if (!unit_root.empty() && !IsOwnDirectory(unit_root)) {
    // Removed by a /tmp cleaner, or replaced by someone else's link.
    spdlog::warn("{} is not a folder of this worker's own; unit {} compiles at its task path",
                 unit_root, unit.name());
    unit_root.clear();
  }
  spec.working_directory = tree.working_directory();
  if (!unit_root.empty()) {
    spec.working_directory =
        unit.working_directory().empty() ? unit_root : unit_root + "/" + unit.working_directory();
    spec.binds = {{tree.tree(), unit_root}};
    // The same process ids on every worker and in every part of a split
    // unit: nvcc names internal device entities after them.
    spec.new_pid_namespace = true;
  }
  return spec;
}

std::variant<Worker::CompileRun, v1::TaskResult> Worker::RunCompile(
    const v1::Task& task, const MaterializedTask& materialized, const CancelToken& cancel) {
  absl::StatusOr<std::unique_ptr<TaskMemoryScope>> scope =
      memory_cap_->StartTask(task.task_id(), task.reserved_bytes());
  if (!scope.ok()) return FailedToStart(std::string(scope.status().message()));
  absl::StatusOr<std::string> compiler =
      CompilerFor(materialized.unit, materialized.toolkit.nvcc_path);
  if (!compiler.ok()) return FailedToStart(std::string(compiler.status().message()));
  ProcessSpec spec;
  // The unit runs under the node's cap from its first instruction.
  (*scope)->PrepareProcess(spec);
  spec.argv.push_back(*compiler);
  for (std::string& argument : ArgumentsInToolkit(materialized.unit, materialized.toolkit.root)) {
    spec.argv.push_back(std::move(argument));
  }
  spec.timeout = task.timeout_ms() > 0 ? absl::Milliseconds(task.timeout_ms()) : absl::Hours(1);
  spec.output_limit_bytes = static_cast<size_t>(std::max<int64_t>(options_.max_output_bytes, 0));
  // Kills the unit's process group at once; the cgroup's leftovers go when
  // the memory scope finishes below.
  spec.cancel = &cancel;
  absl::StatusOr<ProcessSpec> placed = PlaceProcess(std::move(spec), materialized);
  absl::StatusOr<ProcessResult> run =
      placed.ok() ? RunProcess(*placed) : absl::StatusOr<ProcessResult>(placed.status());
  if (!run.ok()) {
    return FailedToStart(absl::StrCat("cannot run ", *compiler, ": ", run.status().message()));
  }
  // Finish reports Attach's failure too: the unit was killed before it ran.
  absl::StatusOr<TaskMemoryUsage> usage = (*scope)->Finish();
  scope->reset();
  if (run->cancelled) return Cancelled(cancel.reason());
  if (!usage.ok()) return FailedToStart(absl::StrCat("memory cap: ", usage.status().message()));
  if (sandbox_ != nullptr) {
    // nvcc never ran: not a compile error, the unit is re-queued (and fails
    // after a few such losses).
    if (std::optional<std::string> why = SandboxNeverBuilt(*run)) return FailedToStart(*why);
  }
  return CompileRun{*std::move(run), *usage};
}

v1::TaskResult Worker::RunTask(const v1::Task& task, const CancelToken& cancel) {
  if (cancel.cancelled()) return Cancelled(cancel.reason());
  // The task's transfers (inputs, outputs, the engine's): its cancel ends
  // them, not the other tasks' (a leased task's and a bot's lease alike).
  BlobClient::TaskScope transfers(&cancel);
  cancel.OnCancel([this, token = &cancel] {
    cas_client_->CancelTask(token);
    if (engine_store_ != nullptr) engine_store_->CancelTask(token);
  });
  RefreshToolchainIfChanged();
  if (engine_execution_ != nullptr) return RunOnEngine(task, cancel);
  MaterializedTask materialized;
  if (std::optional<v1::TaskResult> ended = Materialize(task, cancel, materialized)) {
    return *ended;
  }
  std::variant<CompileRun, v1::TaskResult> compiled = RunCompile(task, materialized, cancel);
  if (auto* ended = std::get_if<v1::TaskResult>(&compiled)) return *ended;
  const CompileRun& run = std::get<CompileRun>(compiled);
  v1::TaskResult result = ResultOfRun(
      run.process, run.usage,
      RunLimits{options_.max_output_bytes, task.reserved_bytes(), memory_cap_->cap_bytes()});
  if (result.outcome() == v1::TASK_KILLED_FOR_MEMORY) return result;
  result.set_worker_name(options_.name);
  if (run.process.exit_code != 0) return result;
  absl::StatusOr<CollectedOutputs> outputs =
      CollectOutputs(*materialized.tree, materialized.unit, materialized.folder, result);
  if (!outputs.ok()) return FailedToStart(std::string(outputs.status().message()));
  if (!outputs->refused.empty()) {
    result.set_exit_code(-1);
    result.set_outcome(v1::TASK_COMPLETED);
    result.set_error_message(outputs->refused);
    return result;
  }
  const absl::Time upload_start = absl::Now();
  absl::StatusOr<int> uploaded = cas_client_->UploadMissing(outputs->uploads);
  metrics_->OutputsUploaded(absl::Now() - upload_start);
  if (!uploaded.ok()) {
    return FailedToStart(absl::StrCat("cannot upload outputs: ", uploaded.status().message()));
  }
  return result;
}

}  // namespace distcc_cuda::worker
