// SPDX-License-Identifier: Apache-2.0
#include "client/text/progress.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/byte_size.h"

namespace distcc_cuda::client {
namespace {

std::string Clock(absl::Duration d) {
  int64_t seconds = absl::ToInt64Seconds(d);
  if (seconds < 60) return absl::StrCat(seconds, "s");
  if (seconds < 3600) return absl::StrFormat("%dm%02ds", seconds / 60, seconds % 60);
  return absl::StrFormat("%dh%02dm", seconds / 3600, (seconds / 60) % 60);
}

}  // namespace

void ProgressDisplay::Erase() {
  if (live_ && !status_.empty() && !finished_) lines_ << "\r\033[K" << std::flush;
}

void ProgressDisplay::Draw() {
  if (live_ && !status_.empty() && !finished_) lines_ << status_ << std::flush;
}

void ProgressDisplay::Print(const std::string& text) {
  absl::MutexLock lock(&mu_);
  Erase();
  lines_ << text << std::flush;
  Draw();
}

void ProgressDisplay::PrintOut(const std::string& text) {
  absl::MutexLock lock(&mu_);
  Erase();
  out_ << text << std::flush;
  Draw();
}

void ProgressDisplay::SetStatus(const std::string& status) {
  absl::MutexLock lock(&mu_);
  if (!live_ || finished_) return;
  Erase();
  status_ = status;
  Draw();
}

void ProgressDisplay::Finish() {
  absl::MutexLock lock(&mu_);
  Erase();
  finished_ = true;
}

std::string StatusLine(int done, absl::Duration elapsed, const v1::ClusterStatus& status) {
  int64_t reserved = 0, cap = 0;
  int slots = 0;
  for (const v1::WorkerStatus& worker : status.workers()) {
    reserved += worker.reserved_bytes();
    cap += worker.memory_cap_bytes();
    slots += worker.slots();
  }
  int64_t left_ms = status.queued_predicted_wall_ms();
  for (const v1::RunningUnit& unit : status.running()) {
    left_ms += std::max<int64_t>(0, unit.predicted_wall_ms() - unit.elapsed_ms());
  }
  std::string line =
      absl::StrCat("distcc-cuda: ", done, " done, ", status.running_units(), " compiling, ",
                   status.queued_units(), " queued | ", FormatByteSize(reserved), " of ",
                   FormatByteSize(cap), " reserved | ", Clock(elapsed));
  if (slots > 0 && left_ms > 0) {
    absl::StrAppend(&line, " | about ", Clock(absl::Milliseconds(left_ms / slots)), " left");
  }
  return line;
}

bool IsLiveTerminal(int fd, const std::string& term) {
  return isatty(fd) && !term.empty() && term != "dumb";
}

std::string Seconds(absl::Duration duration) {
  int64_t ms = absl::ToInt64Milliseconds(duration);
  if (ms < 100'000) return absl::StrFormat("%.1f s", ms / 1000.0);
  if (ms < 6'000'000) return absl::StrFormat("%dm%02ds", ms / 60'000, ms / 1000 % 60);
  return absl::StrFormat("%dh%02dm", ms / 3'600'000, ms / 60'000 % 60);
}

}  // namespace distcc_cuda::client
