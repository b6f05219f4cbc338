// SPDX-License-Identifier: Apache-2.0
#include "client/toolkit/served_toolkit_check.h"

#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/process/confined_run.h"
#include "common/process/memory_cap.h"
#include "common/process/sandbox.h"

namespace distcc_cuda::client {
namespace {

// What `nvcc --version` may use: a real one takes a few MiB.
constexpr int64_t kCheckCapBytes = int64_t{1} << 30;

}  // namespace

absl::StatusOr<NvccRelease> AskServedNvcc(const std::string& cuda_home, bool pinned,
                                          const std::string& pin_hint, std::ostream& progress) {
  const std::string nvcc = cuda_home + "/bin/nvcc";
  // The watchdog, not a cgroup: a client must not move itself between groups.
  MemoryCapOptions cap_options;
  cap_options.cap_bytes = kCheckCapBytes;
  cap_options.name = "toolkit-check";
  cap_options.force_watchdog = true;
  absl::StatusOr<std::unique_ptr<NodeMemoryCap>> cap = NodeMemoryCap::Create(cap_options);
  // Task folders where the sandbox user reaches them: beside the toolkit,
  // or (a root client's home is private) a new folder of the system's.
  std::error_code error;
  const std::string system_temp = std::filesystem::temp_directory_path(error).string();
  absl::StatusOr<std::string> spare =
      MakeTempDirectory(system_temp.empty() ? "/tmp" : system_temp, "distcc-cuda-check-");
  std::vector<std::string> roots = {cuda_home + "-check"};
  if (spare.ok()) roots.push_back(*spare);
  SandboxOptions options;
  options.toolkit_root = cuda_home;
  absl::StatusOr<std::unique_ptr<Sandbox>> sandbox =
      cap.ok() ? Sandbox::Create(options, nvcc, roots,
                                 [&](const ProcessSpec& spec) { return RunCapped(**cap, spec); })
               : absl::StatusOr<std::unique_ptr<Sandbox>>(cap.status());
  // Its probe's words hold the fetched nvcc's output: made safe.
  const std::string why = TerminalSafe(sandbox.status().message(), false, 2048);
  absl::StatusOr<NvccRelease> said;
  if (sandbox.ok()) {
    said = AskNvccRelease(nvcc, ConfinedRunner(sandbox->get(), cap->get(), cuda_home));
  } else if (pinned) {
    progress << "distcc-cuda: no sandbox for the toolkit's nvcc here (" << why
             << "); it is pinned, so it is asked as it is\n";
    said = AskNvccRelease(nvcc);
  } else {
    said = absl::FailedPreconditionError(absl::StrCat(
        "the coordinator's unpinned toolkit is not run outside a sandbox, and none can be made "
        "here (",
        why, "); install bubblewrap, or pin the toolkit: ", "distcc-cuda toolkit install ",
        pin_hint));
  }
  sandbox = absl::UnknownError("done");  // gone before its folders are
  for (const std::string& root : roots) (void)RemoveAll(root);
  return said;
}

}  // namespace distcc_cuda::client
