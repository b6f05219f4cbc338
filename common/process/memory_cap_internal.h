// SPDX-License-Identifier: Apache-2.0
// What the memory cap's mechanisms share inside common/: small files read
// and written with plain syscalls (cgroup files must be written with one
// write(), and errno says why a write was refused), and each mechanism's
// constructor for NodeMemoryCap::Create. Not for use outside the memory cap
// (common/process/memory_cap_files.cc, cgroup_memory_cap.cc, rss_watchdog.cc,
// memory_cap.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/process/memory_cap.h"

namespace distcc_cuda::memory_cap_internal {

inline constexpr int64_t kMiB = int64_t{1} << 20;

// A whole small file; errors name the path.
absl::StatusOr<std::string> ReadText(const std::string& path);
// Writes `text` to `path` in one write(); 0 or the errno.
int WriteRaw(const std::string& path, absl::string_view text);
// WriteRaw, its errno as a status naming the path.
absl::Status WriteText(const std::string& path, absl::string_view text);
// Whether whitespace-separated `text` holds `word` ("cpu memory pids").
bool HasWord(absl::string_view text, absl::string_view word);
bool Exists(const std::string& path);
bool IsDirectory(const std::string& path);
// The folder above `path`, and its last component.
std::string Parent(const std::string& path);
std::string BaseName(const std::string& path);
// Names of the subdirectories of `dir` (empty if it cannot be listed).
std::vector<std::string> SubdirectoryNames(const std::string& dir);
// A whole-file integer such as "268435456\n"; nullopt for "max" or garbage.
std::optional<int64_t> ParseCount(absl::string_view text);
// The value of `key` in "key value" lines (memory.events, memory.oom_control).
std::optional<int64_t> KeyedCount(absl::string_view text, absl::string_view key);
// A field of /proc/meminfo in bytes ("MemTotal:"), 0 if unknown.
int64_t MeminfoBytes(const std::string& meminfo_path, absl::string_view key);
// Characters of a cgroup name, at most `max_length` of them.
std::string SanitizeName(absl::string_view name, size_t max_length);

// A node cap of cgroup `version` (common/process/cgroup_memory_cap.cc): an error
// saying why this machine cannot have one.
absl::StatusOr<std::unique_ptr<NodeMemoryCap>> CreateCgroupNode(MemoryCapMechanism version,
                                                                const MemoryCapOptions& options);
// The RSS watchdog (common/process/rss_watchdog.cc), chosen for `why`.
std::unique_ptr<NodeMemoryCap> CreateWatchdogNode(const MemoryCapOptions& options, std::string why);

}  // namespace distcc_cuda::memory_cap_internal
