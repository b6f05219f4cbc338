// SPDX-License-Identifier: Apache-2.0
// What a worker tells Prometheus (distcc-cuda-worker --metrics-listen): its
// tasks by how they ended, how long compiles and transfers took, and at each
// scrape its slots, memory and input cache.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::worker {

class WorkerMetrics {
 public:
  explicit WorkerMetrics(std::shared_ptr<prometheus::Registry> registry);

  // A task's end, by its outcome (distcc_cuda_tasks_total{outcome}: completed,
  // compile_error, killed_for_memory, timed_out, rejected, failed_to_start,
  // cancelled) and, for a compile that ran, its wall time.
  void TaskEnded(const v1::TaskResult& result);
  // A task's inputs made ready (fetched into the cache where missing, copied
  // into its tree); its outputs stored on the coordinator.
  void InputsReady(absl::Duration took);
  void OutputsUploaded(absl::Duration took);
  // A bot's call to its engine's Bots service
  // (distcc_cuda_worker_bot_calls_total{call=create|update, result=ok|error}).
  void BotCall(absl::string_view call, bool ok);

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* tasks_;
  prometheus::Histogram* compile_seconds_;
  prometheus::Histogram* inputs_seconds_;
  prometheus::Histogram* outputs_seconds_;
  prometheus::Family<prometheus::Counter>* bot_calls_;
};

// The worker at one moment.
struct WorkerGauges {
  bool registered = false;  // the coordinator knows it now (a bot: its session is open)
  int slots = 0;
  int busy = 0;
  int64_t memory_cap_bytes = 0;
  int64_t memory_used_bytes = 0;
  int64_t memory_peak_bytes = 0;
};
// distcc_cuda_worker_registered, _slots, _slots_busy, _memory_cap_bytes,
// _memory_used_bytes, _memory_peak_bytes.
std::vector<prometheus::MetricFamily> WorkerGaugeMetrics(const WorkerGauges& gauges);

}  // namespace distcc_cuda::worker
