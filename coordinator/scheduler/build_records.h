// SPDX-License-Identifier: Apache-2.0
// What the coordinator keeps of each build for people (distcc-cuda status,
// the dashboard): its summary while it runs, each unit's span as it ends
// (worker, lease to result, peak against prediction: what --trace draws),
// and the last few builds after they end. Not thread-safe: the scheduler
// holds it under its lock.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::coordinator {

// One build's record while it runs.
class BuildLog {
 public:
  // Spans kept per build; the rest are counted (a 55,000-unit build's would
  // be megabytes for a picture nobody can read at that size).
  static constexpr int kMaxSpans = 10000;

  BuildLog(std::string id, std::string name, absl::Time started);

  // A unit ended: `unit_index` is its place in the build, for its name;
  // `leased` is zero for a cached unit.
  void UnitEnded(int unit_index, const v1::TaskResult& result, bool cached, bool failed,
                 absl::Time leased, absl::Time finished, int64_t predicted_peak_bytes,
                 int attempts);
  // Its record, of `units_total` units so far; `with_spans` names each
  // span's unit through `unit_name`.
  v1::BuildRecord Record(const std::string& outcome, int units_total, bool with_spans,
                         const std::function<std::string(int)>& unit_name) const;
  // Ends it: the record to keep, spans included.
  v1::BuildRecord Finish(const std::string& outcome, int units_total, absl::Time finished,
                         const std::function<std::string(int)>& unit_name);

 private:
  struct Span {
    int unit_index;
    int worker;  // index into workers_; -1: none (cached)
    int64_t leased_us;
    int64_t finished_us;
    int64_t peak_bytes;
    int64_t predicted_bytes;
    int attempts;
    bool cached;
    bool failed;
  };
  std::string id_;
  std::string name_;
  absl::Time started_;
  absl::Time finished_ = absl::InfinitePast();
  int done_ = 0, compiled_ = 0, cached_ = 0, failed_ = 0;
  int spans_left_out_ = 0;
  std::vector<std::string> workers_;
  std::vector<Span> spans_;
};

// The last builds that ended, newest first.
class RecentBuilds {
 public:
  explicit RecentBuilds(size_t keep = 10) : keep_(keep) {}
  void Add(v1::BuildRecord record);
  const std::deque<v1::BuildRecord>& records() const { return records_; }
  const v1::BuildRecord* Find(const std::string& build_id) const;

 private:
  size_t keep_;
  std::deque<v1::BuildRecord> records_;
};

}  // namespace distcc_cuda::coordinator
