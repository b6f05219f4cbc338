// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/build_records.h"

#include <algorithm>
#include <utility>

namespace distcc_cuda::coordinator {

BuildLog::BuildLog(std::string id, std::string name, absl::Time started)
    : id_(std::move(id)), name_(std::move(name)), started_(started) {}

void BuildLog::UnitEnded(int unit_index, const v1::TaskResult& result, bool cached, bool failed,
                         absl::Time leased, absl::Time finished, int64_t predicted_peak_bytes,
                         int attempts) {
  ++done_;
  if (failed) {
    ++failed_;
  } else if (cached) {
    ++cached_;
  } else {
    ++compiled_;
  }
  int worker = -1;
  if (!cached && !result.worker_name().empty()) {
    auto found = std::find(workers_.begin(), workers_.end(), result.worker_name());
    worker = found - workers_.begin();
    if (found == workers_.end()) workers_.push_back(result.worker_name());
  }
  if (static_cast<int>(spans_.size()) >= kMaxSpans) {
    ++spans_left_out_;
    return;
  }
  spans_.push_back(Span{unit_index, worker,
                        leased == absl::InfinitePast() ? 0 : absl::ToUnixMicros(leased),
                        absl::ToUnixMicros(finished), result.peak_memory_bytes(),
                        predicted_peak_bytes, attempts, cached, failed});
}

v1::BuildRecord BuildLog::Record(const std::string& outcome, int units_total, bool with_spans,
                                 const std::function<std::string(int)>& unit_name) const {
  v1::BuildRecord record;
  record.set_build_id(id_);
  record.set_name(name_);
  record.set_started_unix_micros(absl::ToUnixMicros(started_));
  if (finished_ != absl::InfinitePast()) {
    record.set_finished_unix_micros(absl::ToUnixMicros(finished_));
  }
  record.set_outcome(outcome);
  record.set_units_total(std::max(units_total, done_));
  record.set_units_done(done_);
  record.set_units_compiled(compiled_);
  record.set_units_cached(cached_);
  record.set_units_failed(failed_);
  for (const std::string& worker : workers_) record.add_workers_used(worker);
  if (with_spans) {
    for (const Span& span : spans_) {
      v1::UnitSpan* out = record.add_spans();
      out->set_unit_name(unit_name(span.unit_index));
      if (span.worker >= 0) out->set_worker_name(workers_[span.worker]);
      out->set_leased_unix_micros(span.leased_us);
      out->set_finished_unix_micros(span.finished_us);
      out->set_cached(span.cached);
      out->set_failed(span.failed);
      out->set_peak_memory_bytes(span.peak_bytes);
      out->set_predicted_peak_bytes(span.predicted_bytes);
      out->set_attempts(span.attempts);
    }
    record.set_spans_left_out(spans_left_out_);
  }
  return record;
}

v1::BuildRecord BuildLog::Finish(const std::string& outcome, int units_total, absl::Time finished,
                                 const std::function<std::string(int)>& unit_name) {
  finished_ = finished;
  v1::BuildRecord record = Record(outcome, units_total, /*with_spans=*/true, unit_name);
  std::vector<Span>().swap(spans_);
  return record;
}

void RecentBuilds::Add(v1::BuildRecord record) {
  records_.push_front(std::move(record));
  while (records_.size() > keep_) records_.pop_back();
}

const v1::BuildRecord* RecentBuilds::Find(const std::string& build_id) const {
  for (const v1::BuildRecord& record : records_) {
    if (record.build_id() == build_id) return &record;
  }
  return nullptr;
}

}  // namespace distcc_cuda::coordinator
