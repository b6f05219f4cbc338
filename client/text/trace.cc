// SPDX-License-Identifier: Apache-2.0
#include "client/text/trace.h"

#include <algorithm>

#include "common/base/files.h"
#include "nlohmann/json.hpp"

namespace distcc_cuda::client {

absl::Time CoordinatorTimeOrNow(int64_t unix_micros) {
  return unix_micros > 0 ? absl::FromUnixMicros(unix_micros) : absl::Now();
}

void BuildTrace::Add(const std::string& place, const std::string& name, const std::string& category,
                     absl::Time start, absl::Time end, std::map<std::string, std::string> args) {
  if (end < start || start == absl::InfinitePast()) return;
  absl::MutexLock lock(&mu_);
  spans_.push_back(Span{place, name, category, start, end, std::move(args)});
}

std::string BuildTrace::ToJson() const {
  std::vector<Span> spans;
  {
    absl::MutexLock lock(&mu_);
    spans = spans_;
  }
  std::stable_sort(spans.begin(), spans.end(),
                   [](const Span& a, const Span& b) { return a.start < b.start; });
  nlohmann::json events = nlohmann::json::array();
  std::map<std::string, int> process_of;                 // place -> pid
  std::map<std::string, std::vector<absl::Time>> lanes;  // place -> each lane's end
  auto micros = [this](absl::Time t) { return absl::ToInt64Microseconds(t - origin_); };
  for (const Span& span : spans) {
    auto [it, added] = process_of.emplace(span.place, static_cast<int>(process_of.size()) + 1);
    const int pid = it->second;
    if (added) {
      events.push_back(
          {{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", span.place}}}});
      events.push_back({{"name", "process_sort_index"},
                        {"ph", "M"},
                        {"pid", pid},
                        {"args", {{"sort_index", pid}}}});
    }
    // The first track free when the span starts: slots, as the place ran them.
    std::vector<absl::Time>& ends = lanes[span.place];
    size_t lane = 0;
    while (lane < ends.size() && ends[lane] > span.start) ++lane;
    if (lane == ends.size()) {
      ends.push_back(span.end);
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", pid},
                        {"tid", static_cast<int>(lane)},
                        {"args", {{"name", "slot " + std::to_string(lane + 1)}}}});
    } else {
      ends[lane] = span.end;
    }
    nlohmann::json args = nlohmann::json::object();
    for (const auto& [key, value] : span.args) args[key] = value;
    events.push_back(
        {{"name", span.name},
         {"cat", span.category},
         {"ph", "X"},
         {"ts", micros(span.start)},
         {"dur", std::max<int64_t>(1, absl::ToInt64Microseconds(span.end - span.start))},
         {"pid", pid},
         {"tid", static_cast<int>(lane)},
         {"args", args}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump(1) + "\n";
}

absl::Status BuildTrace::Write(const std::string& path) const {
  return WriteFileAtomically(path, ToJson());
}

}  // namespace distcc_cuda::client
