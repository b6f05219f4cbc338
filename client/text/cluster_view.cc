// SPDX-License-Identifier: Apache-2.0
#include "client/text/cluster_view.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/text/progress.h"
#include "common/base/byte_size.h"
#include "common/base/terminal_text.h"

namespace distcc_cuda::client {
namespace {

std::string Cut(const std::string& text, size_t width) {
  std::string safe = TerminalSafe(text);
  if (safe.size() <= width) return safe;
  return safe.substr(0, width - 1) + "~";
}

// A build id's random end: its start (the coordinator's epoch) is the same
// for every build of one coordinator run.
std::string ShortId(const std::string& id) {
  std::string safe = TerminalSafe(id);
  return safe.size() > 10 ? "~" + safe.substr(safe.size() - 8) : safe;
}

}  // namespace

std::string MemoryBar(int64_t used_bytes, int64_t reserved_bytes, int64_t cap_bytes, int width) {
  if (cap_bytes <= 0 || width <= 0) return std::string(std::max(width, 0), '?');
  auto cells = [&](int64_t bytes) {
    return static_cast<int>(std::clamp<int64_t>(
        (std::max<int64_t>(bytes, 0) * width + cap_bytes / 2) / cap_bytes, 0, width));
  };
  int used = cells(used_bytes);
  int reserved = std::max(used, cells(reserved_bytes));
  return std::string(used, '#') + std::string(reserved - used, '+') +
         std::string(width - reserved, '.');
}

std::string RenderClusterView(const v1::ClusterStatus& status, const std::string& address,
                              absl::Time now, int width) {
  std::string out = absl::StrCat(
      "coordinator ", TerminalSafe(address), ": ", status.workers_size(), " workers, ",
      status.running_units(), " units running, ", status.queued_units(), " queued (~",
      Seconds(absl::Milliseconds(status.queued_predicted_wall_ms())), " of predicted work)   ",
      absl::FormatTime("%H:%M:%S", now, absl::LocalTimeZone()), "\n\n");
  std::map<std::string, std::vector<const v1::RunningUnit*>> running;
  for (const v1::RunningUnit& unit : status.running()) running[unit.worker_name()].push_back(&unit);
  const int bar = std::clamp(width - 60, 10, 40);
  absl::StrAppend(&out, "workers (memory: # in use, + reserved, . free under the cap)\n");
  if (status.workers_size() == 0) absl::StrAppend(&out, "  none connected\n");
  for (const v1::WorkerStatus& worker : status.workers()) {
    absl::StrAppend(
        &out,
        absl::StrFormat(
            "  %-20s [%s] %s in use, %s reserved of %s  slots %d/%d\n", Cut(worker.name(), 20),
            MemoryBar(worker.memory_used_bytes(), worker.reserved_bytes(),
                      worker.memory_cap_bytes(), bar),
            FormatByteSize(worker.memory_used_bytes()), FormatByteSize(worker.reserved_bytes()),
            FormatByteSize(worker.memory_cap_bytes()), worker.running_tasks(), worker.slots()));
    for (const v1::RunningUnit* unit : running[worker.name()]) {
      const bool late =
          unit->predicted_wall_ms() > 0 && unit->elapsed_ms() > unit->predicted_wall_ms();
      absl::StrAppend(
          &out, absl::StrFormat("      %-36s %8s of ~%-8s%s reserved %s (%s)\n",
                                Cut(unit->unit_name(), 36),
                                Seconds(absl::Milliseconds(unit->elapsed_ms())),
                                Seconds(absl::Milliseconds(unit->predicted_wall_ms())),
                                late ? " late" : "     ", FormatByteSize(unit->reserved_bytes()),
                                TerminalSafe(unit->prediction_source())));
    }
  }
  absl::StrAppend(&out, "\nbuilds\n");
  if (status.builds_size() == 0) absl::StrAppend(&out, "  none yet\n");
  for (const v1::BuildRecord& build : status.builds()) {
    const bool running_now = build.outcome() == "running";
    const absl::Time started = absl::FromUnixMicros(build.started_unix_micros());
    const absl::Time ended = running_now ? now : absl::FromUnixMicros(build.finished_unix_micros());
    std::string when = running_now ? absl::StrCat("for ", Seconds(now - started))
                                   : absl::StrCat("in ", Seconds(ended - started), ", ",
                                                  Seconds(now - ended), " ago");
    absl::StrAppend(
        &out,
        absl::StrFormat("  %-10s %-24s %-9s %d/%d units (%d compiled, %d cached, %d "
                        "failed) %s\n",
                        ShortId(build.build_id()), Cut(build.name(), 24),
                        TerminalSafe(build.outcome()), build.units_done(), build.units_total(),
                        build.units_compiled(), build.units_cached(), build.units_failed(), when));
  }
  return out;
}

}  // namespace distcc_cuda::client
