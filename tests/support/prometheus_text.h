// SPDX-License-Identifier: Apache-2.0
// A strict reader of the Prometheus text exposition format (version 0.0.4)
// for tests that scrape /metrics: it refuses what a Prometheus server would
// (bad names, bad label syntax, samples of undeclared families, a family
// declared twice, histogram buckets that are not cumulative or lack +Inf),
// and gives each series' value by its text, e.g.
// `distcc_cuda_tasks_total{outcome="completed"}`.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace distcc_cuda::testing {

struct ScrapedMetrics {
  // Series (name with its labels in sorted order, as written by
  // SeriesName) to value.
  std::map<std::string, double> series;
  // Family name to its type ("counter", "gauge", "histogram", ...).
  std::map<std::string, std::string> types;

  // The value of `series`, or 0 if absent (a counter not yet incremented).
  double Value(const std::string& series_name) const;
  // The sum over every series of family `name` whose labels include
  // `label_filter` (e.g. `outcome="completed"`; "" for all).
  double Sum(const std::string& name, const std::string& label_filter = "") const;
};

// INVALID_ARGUMENT naming the line that does not follow the format.
absl::StatusOr<ScrapedMetrics> ParsePrometheusText(const std::string& text);

struct HttpAnswer {
  int status = 0;
  std::string content_type;
  std::string body;
};
// Sends `method` (GET, HEAD, POST...) for `url` (http://HOST:PORT/PATH) with
// no body; UNAVAILABLE if nothing answers.
absl::StatusOr<HttpAnswer> HttpCall(const std::string& method, const std::string& url);
// GETs `url`: the body of a 200 answer, else an error with the status and
// body.
absl::StatusOr<std::string> HttpGet(const std::string& url);

}  // namespace distcc_cuda::testing
