// SPDX-License-Identifier: Apache-2.0
#include "worker/task_result.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/store/digest.h"

namespace distcc_cuda::worker {

v1::TaskResult FailedToStart(const std::string& message) {
  v1::TaskResult result;
  result.set_outcome(v1::TASK_FAILED_TO_START);
  result.set_exit_code(-1);
  result.set_error_message(message);
  return result;
}

v1::TaskResult Cancelled(const std::string& reason) {
  v1::TaskResult result;
  result.set_outcome(v1::TASK_CANCELLED);
  result.set_exit_code(-1);
  result.set_error_message(absl::StrCat("cancelled: ", reason));
  return result;
}

std::string CappedOutput(std::string text, int64_t limit, bool truncated) {
  if (!truncated && static_cast<int64_t>(text.size()) <= limit) return text;
  if (static_cast<int64_t>(text.size()) > limit) text.resize(limit);
  return absl::StrCat(text, "\n[distcc-cuda: output cut at ", FormatByteSize(limit),
                      "; the worker's --max-output limit]\n");
}

std::optional<std::string> SandboxNeverBuilt(const ProcessResult& run) {
  if (run.exit_code != 1 || !absl::StartsWith(run.stderr_text, "bwrap: ")) return std::nullopt;
  return absl::StrCat("the sandbox could not be built: ",
                      absl::StripAsciiWhitespace(run.stderr_text));
}

v1::TaskResult ResultOfRun(const ProcessResult& run, const TaskMemoryUsage& usage,
                           const RunLimits& limits) {
  // RunProcess stops keeping a stream at its limit: a stream that reached
  // it was cut.
  auto cut = [&](const std::string& text) {
    return run.output_truncated && static_cast<int64_t>(text.size()) >= limits.max_output_bytes;
  };
  v1::TaskResult result;
  result.set_outcome(run.timed_out ? v1::TASK_TIMED_OUT : v1::TASK_COMPLETED);
  result.set_exit_code(run.exit_code);
  result.set_stdout_text(
      CappedOutput(run.stdout_text, limits.max_output_bytes, cut(run.stdout_text)));
  result.set_stderr_text(
      CappedOutput(run.stderr_text, limits.max_output_bytes, cut(run.stderr_text)));
  result.set_wall_time_ms(absl::ToInt64Milliseconds(run.wall_time));
  result.set_cpu_time_ms(absl::ToInt64Milliseconds(run.user_cpu_time + run.system_cpu_time));
  // The watchdog samples; rusage has the largest single process exactly.
  result.set_peak_memory_bytes(std::max(usage.peak_bytes, run.peak_rss_bytes));
  if (usage.killed_for_memory) {
    result.set_outcome(v1::TASK_KILLED_FOR_MEMORY);
    result.set_error_message(absl::StrCat(
        "killed for memory at ", FormatByteSize(result.peak_memory_bytes()), " (reserved ",
        FormatByteSize(limits.reserved_bytes), ", cap ", FormatByteSize(limits.cap_bytes), ")"));
  } else if (run.exit_code != 0) {
    result.set_error_message(DescribeTermination(run));
  }
  return result;
}

absl::StatusOr<CollectedOutputs> CollectOutputs(const TaskTree& tree, const v1::CompileUnit& unit,
                                                const std::string& task_dir,
                                                v1::TaskResult& result) {
  // Read back from the task's tree without following any link: the
  // compile may have rearranged its own tree (as the sandbox user) to point
  // an output's folder at a file of this machine. The copies live where the
  // compile never could reach.
  const std::string collected = task_dir + "/outputs";
  RETURN_IF_ERROR(MakeDirectories(collected));
  if (chmod(collected.c_str(), 0700) != 0) {
    return absl::ErrnoToStatus(errno, "cannot make the outputs folder private");
  }
  CollectedOutputs outputs;
  for (int i = 0; i < unit.output_paths_size(); ++i) {
    const std::string& output = unit.output_paths(i);
    const std::string path = absl::StrCat(collected, "/", i);
    absl::Status copied = tree.CollectOutput(i, path);
    absl::StatusOr<Digest> digest = copied.ok() ? DigestOfFile(path) : copied;
    if (!digest.ok()) {
      outputs.refused =
          absl::StrCat("nvcc exited 0 but its output ", output,
                       " is not a file the compile wrote: ", digest.status().message());
      return outputs;
    }
    v1::OutputFile* out = result.add_outputs();
    out->set_path(output);
    *out->mutable_digest() = ToProto(*digest);
    outputs.uploads.push_back(BlobSource{*digest, path, ""});
  }
  return outputs;
}

}  // namespace distcc_cuda::worker
