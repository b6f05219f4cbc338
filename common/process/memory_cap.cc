// SPDX-License-Identifier: Apache-2.0
// Which memory cap a node gets (cgroup v2, cgroup v1, else the RSS
// watchdog) and its default size; the mechanisms are in
// common/process/cgroup_memory_cap.cc and common/process/rss_watchdog.cc.
#include "common/process/memory_cap.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/byte_size.h"
#include "common/process/memory_cap_internal.h"

namespace distcc_cuda {

std::string MechanismName(MemoryCapMechanism mechanism) {
  switch (mechanism) {
    case MemoryCapMechanism::kCgroupV2:
      return "cgroup v2";
    case MemoryCapMechanism::kCgroupV1:
      return "cgroup v1";
    case MemoryCapMechanism::kRssWatchdog:
      return "RSS watchdog";
  }
  return "unknown";
}

DefaultCap DefaultMemoryCap(const CgroupPaths& paths) {
  constexpr int64_t kFloor = 256 * memory_cap_internal::kMiB;
  std::optional<DefaultCap> from_limit;
  if (std::optional<CgroupLimit> limit = OwnCgroupMemoryLimit(paths)) {
    int64_t headroom =
        std::min(std::max(limit->bytes / 20, 256 * memory_cap_internal::kMiB), limit->bytes / 2);
    from_limit =
        DefaultCap{limit->bytes - headroom,
                   absl::StrCat("container cgroup limit ", FormatByteSize(limit->bytes), " (",
                                limit->file, ") less ", FormatByteSize(headroom), " headroom")};
  }
  std::optional<DefaultCap> from_available;
  if (int64_t available = memory_cap_internal::MeminfoBytes(paths.meminfo, "MemAvailable:");
      available > 0) {
    int64_t headroom = std::max(available / 10, 512 * memory_cap_internal::kMiB);
    from_available = DefaultCap{
        available - headroom, absl::StrCat("available memory ", FormatByteSize(available), " less ",
                                           FormatByteSize(headroom), " headroom")};
  }
  DefaultCap cap;
  if (from_limit.has_value() &&
      (!from_available.has_value() || from_limit->bytes <= from_available->bytes)) {
    cap = *from_limit;
  } else if (from_available.has_value()) {
    cap = *from_available;
  } else {
    cap = DefaultCap{kFloor, "a fixed minimum (no cgroup limit, MemAvailable unknown)"};
  }
  cap.bytes = std::max(cap.bytes, kFloor);
  return cap;
}

absl::StatusOr<std::unique_ptr<NodeMemoryCap>> NodeMemoryCap::Create(
    const MemoryCapOptions& options) {
  if (options.cap_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory cap must be positive, not ", options.cap_bytes, " bytes"));
  }
  if (options.watchdog_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("watchdog interval must be positive, not ",
                     absl::FormatDuration(options.watchdog_interval)));
  }
  int64_t total = memory_cap_internal::MeminfoBytes(options.paths.meminfo, "MemTotal:");
  if (total > 0 && options.cap_bytes > total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory cap ", FormatByteSize(options.cap_bytes), " exceeds this machine's memory (",
        FormatByteSize(total), "); the host's OOM killer would act before the cap; use at most ",
        FormatByteSize(DefaultMemoryCap(options.paths).bytes)));
  }
  if (std::optional<CgroupLimit> limit = OwnCgroupMemoryLimit(options.paths);
      limit.has_value() && options.cap_bytes > limit->bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory cap ", FormatByteSize(options.cap_bytes),
        " exceeds the limit of this process's cgroup (", FormatByteSize(limit->bytes), " in ",
        limit->file, "); use at most ", FormatByteSize(DefaultMemoryCap(options.paths).bytes)));
  }
  if (options.force_watchdog) {
    return memory_cap_internal::CreateWatchdogNode(options, "requested");
  }
  std::vector<std::string> reasons;
  for (MemoryCapMechanism version :
       {MemoryCapMechanism::kCgroupV2, MemoryCapMechanism::kCgroupV1}) {
    absl::StatusOr<std::unique_ptr<NodeMemoryCap>> node =
        memory_cap_internal::CreateCgroupNode(version, options);
    if (node.ok()) return node;
    reasons.push_back(absl::StrCat(MechanismName(version), ": ", node.status().message()));
  }
  return memory_cap_internal::CreateWatchdogNode(options, absl::StrJoin(reasons, "; "));
}

}  // namespace distcc_cuda
