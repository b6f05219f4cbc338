// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <sstream>

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

}  // namespace
}  // namespace distcc_cuda::coordinator
