// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/scheduler_metrics.h"

#include <prometheus/gauge.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "common/transport/metrics.h"

namespace distcc_cuda::coordinator {
namespace {

prometheus::Counter* CounterOf(prometheus::Registry& registry, const std::string& name,
                               const std::string& help, const prometheus::Labels& labels = {}) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add(labels);
}

}  // namespace

SchedulerMetrics::SchedulerMetrics() : SchedulerMetrics(std::make_shared<prometheus::Registry>()) {}

SchedulerMetrics::SchedulerMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)) {
  prometheus::Registry& r = *registry_;
  compiled_ = CounterOf(r, "distcc_cuda_units_compiled_total",
                        "Units a worker compiled (nvcc exited 0), not counting cache hits");
  cached_ = CounterOf(r, "distcc_cuda_units_cached_total",
                      "Units answered from the result cache: nothing compiled");
  failed_ = CounterOf(r, "distcc_cuda_units_failed_total",
                      "Units that ended without an object: a compile error, a timeout, a "
                      "refusal, or given up on after losses or memory kills");
  requeued_ = CounterOf(r, "distcc_cuda_units_requeued_total",
                        "Units queued again after a lease ended without their object: a "
                        "worker lost, a report refused, a compile that could not start or "
                        "was killed for memory");
  killed_for_memory_ = CounterOf(r, "distcc_cuda_units_killed_for_memory_total",
                                 "Compiles stopped by a worker's memory cap (each is retried "
                                 "with more memory, alone, on a larger worker or split)");
  auto& builds = prometheus::BuildCounter()
                     .Name("distcc_cuda_builds_total")
                     .Help("Builds that ended, by whether every unit compiled")
                     .Register(r);
  builds_succeeded_ = &builds.Add({{"result", "success"}});
  builds_failed_ = &builds.Add({{"result", "failure"}});
  compile_seconds_ = &prometheus::BuildHistogram()
                          .Name("distcc_cuda_compile_duration_seconds")
                          .Help("Wall time of each compile on a worker, as it measured it")
                          .Register(r)
                          .Add({}, DurationBuckets());
  queue_seconds_ = &prometheus::BuildHistogram()
                        .Name("distcc_cuda_queue_duration_seconds")
                        .Help("How long each unit waited in the queue before a worker leased it")
                        .Register(r)
                        .Add({}, DurationBuckets());
  peak_prediction_ratio_ =
      &prometheus::BuildHistogram()
           .Name("distcc_cuda_peak_prediction_ratio")
           .Help(
               "Predicted peak memory divided by the measured peak, per compiled unit: below "
               "1, the unit needed more than was reserved; far above 1, memory sat idle")
           .Register(r)
           .Add({}, prometheus::Histogram::BucketBoundaries{0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25,
                                                            1.5, 2, 4});
  scan_seconds_ = &prometheus::BuildHistogram()
                       .Name("distcc_cuda_scan_duration_seconds")
                       .Help(
                           "Each dependency scan (nvcc -M, or the scan cache's answer) as the "
                           "clients that ran it report it")
                       .Register(r)
                       .Add({}, DurationBuckets());
  prometheus::Histogram::BucketBoundaries hold_bounds;
  for (double bound = 1e-6; bound < 2; bound *= 2) hold_bounds.push_back(bound);
  lock_hold_seconds_ = &prometheus::BuildHistogram()
                            .Name("distcc_cuda_scheduler_lock_hold_seconds")
                            .Help(
                                "How long each call held the scheduler's lock, which every "
                                "lease, heartbeat, report and status call waits for")
                            .Register(r)
                            .Add({}, hold_bounds);
}

void SchedulerMetrics::LockHeld(absl::Duration held) {
  lock_hold_seconds_->Observe(absl::ToDoubleSeconds(held));
}

absl::Duration SchedulerMetrics::LockHoldQuantile(double quantile) const {
  const prometheus::ClientMetric collected = lock_hold_seconds_->Collect();
  const prometheus::ClientMetric::Histogram& histogram = collected.histogram;
  if (histogram.sample_count == 0) return absl::ZeroDuration();
  const double rank = quantile * static_cast<double>(histogram.sample_count);
  double lower_bound = 0;
  uint64_t below = 0;
  for (const prometheus::ClientMetric::Bucket& bucket : histogram.bucket) {
    if (static_cast<double>(bucket.cumulative_count) >= rank) {
      const uint64_t in_bucket = bucket.cumulative_count - below;
      const double upper = std::isinf(bucket.upper_bound) ? lower_bound * 2 : bucket.upper_bound;
      const double share = in_bucket == 0 ? 1 : (rank - below) / static_cast<double>(in_bucket);
      return absl::Seconds(lower_bound + share * (upper - lower_bound));
    }
    below = bucket.cumulative_count;
    lower_bound = bucket.upper_bound;
  }
  return absl::Seconds(lower_bound);
}

void SchedulerMetrics::ScansReported(const google::protobuf::RepeatedField<int64_t>& scan_micros,
                                     int64_t most) {
  if (scan_micros.size() > most) return;
  for (int64_t micros : scan_micros) {
    scan_seconds_->Observe(std::clamp<int64_t>(micros, 0, int64_t{3600} * 1000000) / 1e6);
  }
}

void SchedulerMetrics::UnitFinished(const v1::TaskResult& result, bool cached,
                                    int64_t predicted_peak_bytes) {
  bool ok = result.outcome() == v1::TASK_COMPLETED && result.exit_code() == 0;
  if (!ok) {
    failed_->Increment();
    return;
  }
  if (cached) {
    cached_->Increment();
    return;
  }
  compiled_->Increment();
  compile_seconds_->Observe(result.wall_time_ms() / 1000.0);
  if (result.peak_memory_bytes() > 0 && predicted_peak_bytes > 0) {
    peak_prediction_ratio_->Observe(static_cast<double>(predicted_peak_bytes) /
                                    result.peak_memory_bytes());
  }
}

void SchedulerMetrics::UnitLeased(absl::Duration queued) {
  queue_seconds_->Observe(absl::ToDoubleSeconds(queued));
}

void SchedulerMetrics::UnitRequeued() { requeued_->Increment(); }

void SchedulerMetrics::UnitKilledForMemory() { killed_for_memory_->Increment(); }

void SchedulerMetrics::BuildFinished(bool success) {
  (success ? builds_succeeded_ : builds_failed_)->Increment();
}

namespace {

std::string VersionOf(const v1::ToolchainFingerprint& toolchain) {
  return toolchain.nvcc_version().empty() ? toolchain.nvcc_release() : toolchain.nvcc_version();
}

// Each worker's toolkits (its own, and the further ones served to it), once
// per name (as the gauges above).
void AddToolkits(const v1::ClusterStatus& status, prometheus::MetricFamily& out) {
  std::set<std::string> named;
  std::set<std::pair<std::string, std::string>> added;
  for (const v1::WorkerStatus& worker : status.workers()) {
    if (!named.insert(worker.name()).second) continue;
    added.insert({worker.name(), VersionOf(worker.toolchain())});
    AddSample(out, 1,
              {{"worker", worker.name()},
               {"nvcc", VersionOf(worker.toolchain())},
               {"source", worker.toolkit_source().empty() ? "installed" : "served"}});
    for (const v1::ToolchainFingerprint& more : worker.more_toolchains()) {
      if (!added.insert({worker.name(), VersionOf(more)}).second) continue;
      AddSample(out, 1,
                {{"worker", worker.name()}, {"nvcc", VersionOf(more)}, {"source", "served"}});
    }
  }
}

}  // namespace

std::vector<prometheus::MetricFamily> ClusterMetrics(const v1::ClusterStatus& status) {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> families;
  auto family = [&families](const char* name, const char* help) -> prometheus::MetricFamily& {
    return families.emplace_back(MetricFamilyOf(name, help, MetricType::Gauge));
  };
  AddSample(family("distcc_cuda_workers_connected", "Workers registered and heartbeating"),
            status.workers_size());
  AddSample(family("distcc_cuda_builds_active", "Builds running now"), status.active_builds());
  AddSample(family("distcc_cuda_units_queued", "Units waiting for a worker"),
            status.queued_units());
  AddSample(family("distcc_cuda_units_running", "Units leased to workers now"),
            status.running_units());
  AddSample(family("distcc_cuda_workers_revoked",
                   "Worker identities refused: revoked by an operator or quarantined by a "
                   "cross-check"),
            status.revoked_workers_size());
  struct PerWorker {
    const char* name;
    const char* help;
    double (*value)(const v1::WorkerStatus&);
  };
  const PerWorker per_worker[] = {
      {"distcc_cuda_worker_slots", "Units a worker runs at once",
       [](const v1::WorkerStatus& w) -> double { return w.slots(); }},
      {"distcc_cuda_worker_slots_busy", "Units a worker runs now",
       [](const v1::WorkerStatus& w) -> double { return w.running_tasks(); }},
      {"distcc_cuda_worker_memory_cap_bytes", "A worker's memory cap for all its compiles",
       [](const v1::WorkerStatus& w) -> double { return w.memory_cap_bytes(); }},
      {"distcc_cuda_worker_memory_reserved_bytes",
       "Memory the scheduler reserved on a worker for the units it runs",
       [](const v1::WorkerStatus& w) -> double { return w.reserved_bytes(); }},
      {"distcc_cuda_worker_memory_used_bytes",
       "Memory a worker's compiles held at its last heartbeat, as its cap measures it",
       [](const v1::WorkerStatus& w) -> double { return w.memory_used_bytes(); }},
  };
  // One series per worker name: a worker registered again under its name
  // (restarted before its old registration timed out) is summed with it
  // for those seconds, rather than given twice, which fails the scrape.
  std::map<std::string, std::vector<double>> by_name;
  for (const v1::WorkerStatus& worker : status.workers()) {
    std::vector<double>& values = by_name[worker.name()];
    values.resize(std::size(per_worker));
    for (size_t i = 0; i < std::size(per_worker); ++i) values[i] += per_worker[i].value(worker);
  }
  for (size_t i = 0; i < std::size(per_worker); ++i) {
    prometheus::MetricFamily& out = family(per_worker[i].name, per_worker[i].help);
    for (const auto& [name, values] : by_name) AddSample(out, values[i], {{"worker", name}});
  }
  AddToolkits(status, family("distcc_cuda_worker_toolkit_info",
                             "1 per worker: its nvcc version and where its toolkit came from "
                             "(source: installed on it, or served by the coordinator and "
                             "fetched)"));
  return families;
}

}  // namespace distcc_cuda::coordinator
