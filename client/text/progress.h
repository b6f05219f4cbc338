// SPDX-License-Identifier: Apache-2.0
// What a build shows while it runs. On a terminal: one status line at the
// bottom, redrawn in place (done, compiling, queued, memory reserved of the
// cluster's cap, elapsed, an estimate of what is left), with every other
// line printed above it. Elsewhere (a log, CI): the other lines only.
#pragma once

#include <ostream>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::client {

class ProgressDisplay {
 public:
  // Lines go to `lines` (the build's own output) and `out` (stdout, the
  // command's output); the status line lives on `lines`, drawn only when
  // `live`.
  ProgressDisplay(std::ostream& lines, std::ostream& out, bool live)
      : lines_(lines), out_(out), live_(live) {}

  // `text` (whole lines) on the build's stream, above the status line.
  void Print(const std::string& text);
  // `text` (whole lines) on stdout, above the status line.
  void PrintOut(const std::string& text);
  // Replaces the status line (a no-op unless live).
  void SetStatus(const std::string& status);
  // Takes the status line away for good (before the summary).
  void Finish();
  bool live() const { return live_; }

 private:
  void Erase() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Draw() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::ostream& lines_;
  std::ostream& out_;
  const bool live_;
  absl::Mutex mu_;
  std::string status_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// The status line: "3 done, 2 compiling, 4 queued | 7.5 GiB of 16.0 GiB
// reserved | 1m05s | about 2m left". `done` and `elapsed` are the build's;
// the rest is the cluster's `status` (the estimate: the queued units' and
// the running units' remaining predicted time, spread over its slots).
std::string StatusLine(int done, absl::Duration elapsed, const v1::ClusterStatus& status);

// "12.3 s", "2m05s", "1h07m": a duration as the progress lines, the
// summaries and the cluster view print it.
std::string Seconds(absl::Duration duration);

// True when `fd` is a terminal that understands "\r\033[K": `term` ($TERM)
// set and not "dumb".
bool IsLiveTerminal(int fd, const std::string& term);

}  // namespace distcc_cuda::client
