// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/scheduler_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <sstream>
#include <string>

#include "tests/support/prometheus_text.h"

namespace distcc_cuda::coordinator {
namespace {

TEST(ClusterMetricsTest, OneSeriesPerWorkerNameEvenWhenAWorkerRegisteredTwice) {
  v1::ClusterStatus status;
  status.set_queued_units(4);
  status.set_running_units(2);
  for (const char* name : {"node-1", "node-2", "node-1"}) {
    v1::WorkerStatus* worker = status.add_workers();
    worker->set_name(name);
    worker->set_slots(2);
    worker->set_running_tasks(1);
    worker->set_memory_cap_bytes(1000);
    worker->set_reserved_bytes(300);
    worker->set_memory_used_bytes(100);
  }
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, ClusterMetrics(status));
  auto scraped = testing::ParsePrometheusText(text.str());
  ASSERT_TRUE(scraped.ok()) << scraped.status() << "\n" << text.str();
  EXPECT_EQ(scraped->Value("distcc_cuda_workers_connected"), 3);
  EXPECT_EQ(scraped->Value("distcc_cuda_units_queued"), 4);
  EXPECT_EQ(scraped->Value("distcc_cuda_units_running"), 2);
  EXPECT_EQ(scraped->Value("distcc_cuda_worker_slots{worker=\"node-1\"}"), 4);
  EXPECT_EQ(scraped->Value("distcc_cuda_worker_slots{worker=\"node-2\"}"), 2);
  EXPECT_EQ(scraped->Value("distcc_cuda_worker_memory_reserved_bytes{worker=\"node-1\"}"), 600);
  EXPECT_EQ(scraped->Value("distcc_cuda_worker_memory_used_bytes{worker=\"node-2\"}"), 100);
  EXPECT_EQ(scraped->Sum("distcc_cuda_worker_memory_cap_bytes"), 3000);
}

// Which nvcc each worker has and whether it fetched it from the
// coordinator, once per name.
TEST(ClusterMetricsTest, EachWorkersToolkitAndWhereItCameFrom) {
  v1::ClusterStatus status;
  for (const char* name : {"pinned", "fetching", "pinned"}) {
    v1::WorkerStatus* worker = status.add_workers();
    worker->set_name(name);
    worker->mutable_toolchain()->set_nvcc_release("13.2");
    worker->mutable_toolchain()->set_nvcc_version("13.2.86");
    if (std::string(name) == "fetching") {
      worker->set_toolkit_source("served by the coordinator: CUDA 13.2.86, fetched in 2.2s");
      worker->add_more_toolchains()->set_nvcc_version("12.8.93");
    }
  }
  status.add_workers()->set_name("old");  // a worker that said no version
  status.mutable_workers(3)->mutable_toolchain()->set_nvcc_release("12.8");
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, ClusterMetrics(status));
  auto scraped = testing::ParsePrometheusText(text.str());
  ASSERT_TRUE(scraped.ok()) << scraped.status() << "\n" << text.str();
  EXPECT_EQ(scraped->Sum("distcc_cuda_worker_toolkit_info"), 4) << text.str();
  EXPECT_EQ(scraped->Value("distcc_cuda_worker_toolkit_info{nvcc=\"13.2.86\",source=\"installed\","
                           "worker=\"pinned\"}"),
            1)
      << text.str();
  EXPECT_EQ(scraped->Value("distcc_cuda_worker_toolkit_info{nvcc=\"13.2.86\",source=\"served\","
                           "worker=\"fetching\"}"),
            1);
  EXPECT_EQ(scraped->Value("distcc_cuda_worker_toolkit_info{nvcc=\"12.8.93\",source=\"served\","
                           "worker=\"fetching\"}"),
            1);
  EXPECT_EQ(scraped->Value("distcc_cuda_worker_toolkit_info{nvcc=\"12.8\",source=\"installed\","
                           "worker=\"old\"}"),
            1);
}

// What a client reports of its scans is hostile input: each value is
// clamped, and a report of more values than a build may have units is
// dropped whole.
TEST(SchedulerMetricsTest, ScanTimesAClientReportsAreClampedOrDropped) {
  auto registry = std::make_shared<prometheus::Registry>();
  SchedulerMetrics metrics(registry);
  google::protobuf::RepeatedField<int64_t> reported;
  for (int64_t micros : {int64_t{-5}, int64_t{2'000'000}, int64_t{1} << 62}) reported.Add(micros);
  metrics.ScansReported(reported, /*most=*/3);
  google::protobuf::RepeatedField<int64_t> too_many;
  for (int i = 0; i < 4; ++i) too_many.Add(1'000'000);
  metrics.ScansReported(too_many, /*most=*/3);
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, registry->Collect());
  auto scraped = testing::ParsePrometheusText(text.str());
  ASSERT_TRUE(scraped.ok()) << scraped.status();
  EXPECT_EQ(scraped->Value("distcc_cuda_scan_duration_seconds_count"), 3);
  // 0 + 2 s + one hour.
  EXPECT_EQ(scraped->Value("distcc_cuda_scan_duration_seconds_sum"), 3602);
  EXPECT_EQ(scraped->Value("distcc_cuda_scan_duration_seconds_bucket{le=\"0.01\"}"), 1);
}

TEST(SchedulerMetricsTest, LockHoldQuantilesFallInTheBucketsOfWhatWasHeld) {
  SchedulerMetrics metrics;
  EXPECT_EQ(metrics.LockHoldQuantile(0.5), absl::ZeroDuration()) << "nothing held yet";
  // 98 short holds of 10 us and two of 50 ms.
  for (int i = 0; i < 98; ++i) metrics.LockHeld(absl::Microseconds(10));
  for (int i = 0; i < 2; ++i) metrics.LockHeld(absl::Milliseconds(50));
  const absl::Duration median = metrics.LockHoldQuantile(0.5);
  EXPECT_GE(median, absl::Microseconds(8));
  EXPECT_LE(median, absl::Microseconds(16)) << "the bucket of 10 us spans 8 to 16";
  const absl::Duration p99 = metrics.LockHoldQuantile(0.99);
  EXPECT_GE(p99, absl::Microseconds(32768));
  EXPECT_LE(p99, absl::Microseconds(65536)) << "the bucket of 50 ms spans 32.8 to 65.5 ms";
}

}  // namespace
}  // namespace distcc_cuda::coordinator
