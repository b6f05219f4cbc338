// SPDX-License-Identifier: Apache-2.0
// Reads a `--trace` file back (Chrome trace-event JSON) for tests.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace distcc_cuda::testing {

// One complete ("X") event, with its process's name.
struct TraceSpan {
  std::string place;  // the process_name of its pid: "worker l-a"
  std::string name;
  std::string category;
  int track = 0;  // tid: the slot
  int64_t start_us = 0;
  int64_t duration_us = 0;
  std::map<std::string, std::string> args;
};

// The spans of the trace at `path`; INVALID_ARGUMENT when it is not a trace
// (not JSON, no traceEvents, an X event without its fields, a pid with no
// process_name).
absl::StatusOr<std::vector<TraceSpan>> ReadChromeTrace(const std::string& path);

// The spans of `category`.
std::vector<TraceSpan> SpansOf(const std::vector<TraceSpan>& spans, const std::string& category);

}  // namespace distcc_cuda::testing
