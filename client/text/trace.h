// SPDX-License-Identifier: Apache-2.0
// `--trace FILE`: a build's timeline as Chrome trace-event JSON, which
// Perfetto (ui.perfetto.dev) and chrome://tracing open. One process per
// place (this machine, the coordinator's queue, each worker), one track per
// slot: spans that overlap in time go to tracks of their own.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace distcc_cuda::client {

// The time the coordinator stamped on an event (`unix_micros`, by its
// clock), or now for a coordinator that stamps none. A worker slot's spans
// come from the coordinator's stamps: timed by when each event reached a
// client, one slot's back-to-back compiles could overlap by the delivery lag.
absl::Time CoordinatorTimeOrNow(int64_t unix_micros);

class BuildTrace {
 public:
  BuildTrace() : origin_(absl::Now()) {}

  // One span: `name` (the unit) of `category` ("scan", "upload", "queue",
  // "compile", "download") at `place` ("this machine", "queue", "worker
  // l-a"), with `args` shown beside it (peak memory, worker, ...).
  // Thread-safe; spans that end before they start are dropped.
  void Add(const std::string& place, const std::string& name, const std::string& category,
           absl::Time start, absl::Time end, std::map<std::string, std::string> args = {});

  // The JSON document.
  std::string ToJson() const;
  // Writes it to `path` (atomically).
  absl::Status Write(const std::string& path) const;

 private:
  struct Span {
    std::string place, name, category;
    absl::Time start, end;
    std::map<std::string, std::string> args;
  };
  const absl::Time origin_;
  mutable absl::Mutex mu_;
  std::vector<Span> spans_ ABSL_GUARDED_BY(mu_);
};

}  // namespace distcc_cuda::client
