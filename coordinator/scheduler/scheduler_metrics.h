// SPDX-License-Identifier: Apache-2.0
// What the coordinator tells Prometheus: the scheduler's counts and
// distributions as they happen (units compiled, cached, failed, re-queued,
// killed for memory; compile and queue times; how far predictions were off)
// and, at each scrape, the cluster as ClusterStatus shows it (workers, slots,
// memory reserved, measured and capped per worker, queued and running units).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::coordinator {

class SchedulerMetrics {
 public:
  // Registers its metrics in `registry` (kept alive by it).
  explicit SchedulerMetrics(std::shared_ptr<prometheus::Registry> registry);
  // One over a registry of its own, for a scheduler nobody scrapes.
  SchedulerMetrics();

  // A unit's end: compiled (nvcc exited 0), cached, or failed (a compile
  // error, a timeout, a refusal, or given up on). `result` is what the worker
  // measured, `predicted_peak_bytes` what the scheduler expected.
  void UnitFinished(const v1::TaskResult& result, bool cached, int64_t predicted_peak_bytes);
  void UnitLeased(absl::Duration queued);
  void UnitRequeued();
  void UnitKilledForMemory();
  void BuildFinished(bool success);
  // A client's dependency scans, in microseconds, as it reports them: each
  // clamped to [0, 1 h]; none counted if there are more than `most`.
  void ScansReported(const google::protobuf::RepeatedField<int64_t>& scan_micros, int64_t most);
  // How long one call held the scheduler's lock (every lease, heartbeat and
  // report waits behind it).
  void LockHeld(absl::Duration held);
  // The `quantile` (0 to 1) of the lock hold times so far, read from the
  // histogram's buckets (interpolated within one; each bucket spans a factor
  // of two); zero before the first.
  absl::Duration LockHoldQuantile(double quantile) const;

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* compiled_;
  prometheus::Counter* cached_;
  prometheus::Counter* failed_;
  prometheus::Counter* requeued_;
  prometheus::Counter* killed_for_memory_;
  prometheus::Counter* builds_succeeded_;
  prometheus::Counter* builds_failed_;
  prometheus::Histogram* compile_seconds_;
  prometheus::Histogram* queue_seconds_;
  prometheus::Histogram* peak_prediction_ratio_;
  prometheus::Histogram* scan_seconds_;
  prometheus::Histogram* lock_hold_seconds_;
};

// The cluster at one moment, as gauges: distcc_cuda_workers_connected,
// distcc_cuda_worker_slots / _slots_busy / _memory_cap_bytes /
// _memory_reserved_bytes / _memory_used_bytes {worker}, distcc_cuda_builds_active,
// distcc_cuda_units_queued, distcc_cuda_units_running, distcc_cuda_workers_revoked.
std::vector<prometheus::MetricFamily> ClusterMetrics(const v1::ClusterStatus& status);

}  // namespace distcc_cuda::coordinator
