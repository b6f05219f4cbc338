// SPDX-License-Identifier: Apache-2.0
// A worker that compiles with a toolkit its coordinator serves
// (`distcc-cuda-worker --served-toolkit 13.2`) instead of one installed on
// its machine: fetched once, every file checked against the toolkit's
// manifest, kept in the work dir's bounded cache (the least recently used
// toolkits leave first) and checked again at each start; the worker then
// fingerprints, sandboxes and caps it exactly as a toolkit of its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/nvcc/toolkit_download.h"
#include "common/transport/tls_credentials.h"

namespace distcc_cuda::worker {

struct ServedToolkitRequest {
  // Releases ("13.2": the newest served) or versions, each pinned or not
  // to its manifest's digest ("13.2@sha256:HEX"), comma-separated.
  std::string wanted;
  std::string coordinator_address;
  std::optional<TlsMaterial> tls;
  std::string cache_dir;                       // WORK_DIR/toolkits
  int64_t cache_max_bytes = int64_t{8} << 30;  // --toolkit-cache-size
  ToolkitFetchLimits limits;                   // --toolkit-max-size, -stall-, -fetch-timeout
};

struct ServedToolkitUse {
  std::string nvcc;     // the toolkit's, in the cache
  std::string source;   // for status: "served by the coordinator: CUDA ..., fetched in 2.2s"
  bool pinned = false;  // taken only because its manifest had the pinned digest
};

// Each wanted toolkit, in order: the cache's copy when it is intact and
// has the listed (or pinned) manifest, else fetched into the cache
// (DownloadToolkit: bounded by `limits`, nothing written outside its
// folder) once the least recently used others have made room for it; a
// toolkit larger than the whole cache is refused before its first byte.
// An unpinned one is said to be, with the pin that would take only it.
// Waits up to a minute for the coordinator. Errors say what the
// coordinator serves and which file did not match, terminal-safe.
absl::StatusOr<std::vector<ServedToolkitUse>> UseServedToolkits(
    const ServedToolkitRequest& request);

}  // namespace distcc_cuda::worker
