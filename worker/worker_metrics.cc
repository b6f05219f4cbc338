// SPDX-License-Identifier: Apache-2.0
#include "worker/worker_metrics.h"

#include <utility>

#include "common/transport/metrics.h"

namespace distcc_cuda::worker {
namespace {

const char* OutcomeLabel(const v1::TaskResult& result) {
  switch (result.outcome()) {
    case v1::TASK_COMPLETED:
      return result.exit_code() == 0 ? "completed" : "compile_error";
    case v1::TASK_KILLED_FOR_MEMORY:
      return "killed_for_memory";
    case v1::TASK_TIMED_OUT:
      return "timed_out";
    case v1::TASK_REJECTED:
      return "rejected";
    case v1::TASK_CANCELLED:
      return "cancelled";
    default:
      return "failed_to_start";
  }
}

}  // namespace

WorkerMetrics::WorkerMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)) {
  tasks_ = &prometheus::BuildCounter()
                .Name("distcc_cuda_tasks_total")
                .Help("Tasks this worker ran, by how they ended")
                .Register(*registry_);
  compile_seconds_ = &prometheus::BuildHistogram()
                          .Name("distcc_cuda_compile_duration_seconds")
                          .Help("Wall time of each nvcc run on this worker")
                          .Register(*registry_)
                          .Add({}, DurationBuckets());
  auto& transfer = prometheus::BuildHistogram()
                       .Name("distcc_cuda_transfer_duration_seconds")
                       .Help(
                           "Time to make a task's inputs ready (fetched from the "
                           "coordinator where the cache lacks them) and to store its outputs "
                           "on the coordinator")
                       .Register(*registry_);
  inputs_seconds_ = &transfer.Add({{"direction", "inputs"}}, DurationBuckets());
  outputs_seconds_ = &transfer.Add({{"direction", "outputs"}}, DurationBuckets());
  bot_calls_ = &prometheus::BuildCounter()
                    .Name("distcc_cuda_worker_bot_calls_total")
                    .Help(
                        "A bot's calls to its engine's Bots service (--bots-api): create and "
                        "update of its session, by result")
                    .Register(*registry_);
}

void WorkerMetrics::BotCall(absl::string_view call, bool ok) {
  bot_calls_->Add({{"call", std::string(call)}, {"result", ok ? "ok" : "error"}}).Increment();
}

void WorkerMetrics::TaskEnded(const v1::TaskResult& result) {
  tasks_->Add({{"outcome", OutcomeLabel(result)}}).Increment();
  if (result.outcome() == v1::TASK_COMPLETED || result.outcome() == v1::TASK_KILLED_FOR_MEMORY ||
      result.outcome() == v1::TASK_TIMED_OUT) {
    compile_seconds_->Observe(result.wall_time_ms() / 1000.0);
  }
}

void WorkerMetrics::InputsReady(absl::Duration took) {
  inputs_seconds_->Observe(absl::ToDoubleSeconds(took));
}

void WorkerMetrics::OutputsUploaded(absl::Duration took) {
  outputs_seconds_->Observe(absl::ToDoubleSeconds(took));
}

std::vector<prometheus::MetricFamily> WorkerGaugeMetrics(const WorkerGauges& gauges) {
  std::vector<prometheus::MetricFamily> families;
  auto add = [&families](const char* name, const char* help, double value) {
    AddSample(families.emplace_back(MetricFamilyOf(name, help, prometheus::MetricType::Gauge)),
              value);
  };
  add("distcc_cuda_worker_registered", "1 while the coordinator knows this worker",
      gauges.registered ? 1 : 0);
  add("distcc_cuda_worker_slots", "Units this worker runs at once", gauges.slots);
  add("distcc_cuda_worker_slots_busy", "Units this worker runs now", gauges.busy);
  add("distcc_cuda_worker_memory_cap_bytes", "The memory cap on all of this worker's compiles",
      gauges.memory_cap_bytes);
  add("distcc_cuda_worker_memory_used_bytes", "Memory this worker's compiles hold now",
      gauges.memory_used_bytes);
  add("distcc_cuda_worker_memory_peak_bytes",
      "The most memory this worker's compiles held at once since it started",
      gauges.memory_peak_bytes);
  return families;
}

}  // namespace distcc_cuda::worker
