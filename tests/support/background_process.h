// SPDX-License-Identifier: Apache-2.0
// A long-running process for end-to-end tests (a coordinator, a worker):
// output goes to a log file the test can wait on; destruction kills it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"

namespace distcc_cuda::testing {

// Runs `argv` to its end (at most `timeout`) and returns what it printed and
// how it ended; a program that cannot be run fails the test and gives an
// empty result.
ProcessResult RunToEnd(const std::vector<std::string>& argv,
                       absl::Duration timeout = absl::Minutes(10));
// The same for `spec` as it is (its folder, environment and timeout).
ProcessResult RunToEnd(const ProcessSpec& spec);

class BackgroundProcess {
 public:
  // Starts `argv` with stdout and stderr appended to `log_path`.
  static absl::StatusOr<std::unique_ptr<BackgroundProcess>> Start(
      const std::vector<std::string>& argv, const std::string& log_path);
  // Stops the process if it still runs (SIGTERM, and SIGCONT in case it is
  // stopped; SIGKILL after 5 s) and reaps it.
  ~BackgroundProcess();

  // Waits until the log contains `text`; returns the log's line holding it.
  // DEADLINE_EXCEEDED (with the log) if it does not appear in time or the
  // process exits first.
  absl::StatusOr<std::string> WaitForLog(const std::string& text, absl::Duration timeout);
  // Sends `signal` and waits up to `timeout` for the exit; returns the wait
  // status.
  absl::StatusOr<int> Stop(int signal, absl::Duration timeout);
  std::string Log() const;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string log_path_;
};

}  // namespace distcc_cuda::testing
