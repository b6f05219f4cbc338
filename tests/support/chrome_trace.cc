// SPDX-License-Identifier: Apache-2.0
#include "tests/support/chrome_trace.h"

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "nlohmann/json.hpp"

namespace distcc_cuda::testing {

absl::StatusOr<std::vector<TraceSpan>> ReadChromeTrace(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  nlohmann::json document = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded() || !document.contains("traceEvents") ||
      !document["traceEvents"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a Chrome trace"));
  }
  std::map<int, std::string> places;
  for (const nlohmann::json& event : document["traceEvents"]) {
    if (event.value("ph", "") == "M" && event.value("name", "") == "process_name") {
      places[event.value("pid", -1)] = event["args"].value("name", "");
    }
  }
  std::vector<TraceSpan> spans;
  for (const nlohmann::json& event : document["traceEvents"]) {
    if (event.value("ph", "") != "X") continue;
    if (!event.contains("ts") || !event.contains("dur") || !event.contains("pid") ||
        !event.contains("tid") || !event.contains("name")) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": an X event lacks a field: ", event.dump()));
    }
    auto place = places.find(event["pid"].get<int>());
    if (place == places.end()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": pid without a process_name"));
    }
    TraceSpan span;
    span.place = place->second;
    span.name = event["name"].get<std::string>();
    span.category = event.value("cat", "");
    span.track = event["tid"].get<int>();
    span.start_us = event["ts"].get<int64_t>();
    span.duration_us = event["dur"].get<int64_t>();
    if (event.contains("args")) {
      for (const auto& [key, value] : event["args"].items()) {
        span.args[key] = value.is_string() ? value.get<std::string>() : value.dump();
      }
    }
    spans.push_back(std::move(span));
  }
  return spans;
}

std::vector<TraceSpan> SpansOf(const std::vector<TraceSpan>& spans, const std::string& category) {
  std::vector<TraceSpan> of;
  for (const TraceSpan& span : spans) {
    if (span.category == category) of.push_back(span);
  }
  return of;
}

}  // namespace distcc_cuda::testing
