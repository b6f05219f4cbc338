// SPDX-License-Identifier: Apache-2.0
#include "client/text/cluster_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace distcc_cuda::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
constexpr int64_t kGiB = int64_t{1} << 30;

TEST(MemoryBarTest, InUseThenReservedThenFreeUnderTheCap) {
  EXPECT_EQ(MemoryBar(0, 0, 10 * kGiB, 10), "..........");
  EXPECT_EQ(MemoryBar(2 * kGiB, 5 * kGiB, 10 * kGiB, 10), "##+++.....");
  // More in use than reserved: what is used shows.
  EXPECT_EQ(MemoryBar(6 * kGiB, 2 * kGiB, 10 * kGiB, 10), "######....");
  EXPECT_EQ(MemoryBar(12 * kGiB, 20 * kGiB, 10 * kGiB, 10), "##########");
  EXPECT_EQ(MemoryBar(1, 1, 0, 4), "????");
}

TEST(ClusterViewTest, ShowsEachWorkersMemoryAndUnitsTheQueueAndTheBuilds) {
  v1::ClusterStatus status;
  status.set_queued_units(7);
  status.set_running_units(2);
  status.set_queued_predicted_wall_ms(90'000);
  auto* worker = status.add_workers();
  worker->set_name("gpu-box-1");
  worker->set_slots(2);
  worker->set_running_tasks(2);
  worker->set_memory_cap_bytes(10 * kGiB);
  worker->set_reserved_bytes(8 * kGiB);
  worker->set_memory_used_bytes(4 * kGiB);
  status.add_workers()->set_name("idle\x1b[2Jbox");
  auto* on_time = status.add_running();
  on_time->set_unit_name("flash_fwd_hdim128");
  on_time->set_worker_name("gpu-box-1");
  on_time->set_elapsed_ms(12'000);
  on_time->set_predicted_wall_ms(60'000);
  on_time->set_reserved_bytes(4 * kGiB);
  on_time->set_prediction_source("history");
  auto* late = status.add_running();
  late->set_unit_name("flash_bwd_hdim256");
  late->set_worker_name("gpu-box-1");
  late->set_elapsed_ms(70'000);
  late->set_predicted_wall_ms(60'000);
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  auto* build = status.add_builds();
  build->set_build_id("b1234567890abcdef");
  build->set_name("kernels.toml");
  build->set_outcome("succeeded");
  build->set_units_total(96);
  build->set_units_done(96);
  build->set_units_compiled(90);
  build->set_units_cached(6);
  build->set_started_unix_micros(absl::ToUnixMicros(now - absl::Minutes(5)));
  build->set_finished_unix_micros(absl::ToUnixMicros(now - absl::Minutes(2)));

  std::string view = RenderClusterView(status, "10.0.0.1:3633", now, 100);
  EXPECT_THAT(view, HasSubstr("2 units running, 7 queued (~90.0 s of predicted work)"));
  EXPECT_THAT(view, HasSubstr("gpu-box-1"));
  EXPECT_THAT(view, HasSubstr("4.0 GiB in use, 8.0 GiB reserved of 10.0 GiB  slots 2/2"));
  EXPECT_THAT(view, HasSubstr("[################++++++++++++++++........]"));
  EXPECT_THAT(view, HasSubstr("flash_fwd_hdim128"));
  EXPECT_THAT(view, HasSubstr("12.0 s of ~60.0 s"));
  EXPECT_THAT(view, HasSubstr("70.0 s of ~60.0 s   late"));
  EXPECT_THAT(view, HasSubstr("96/96 units (90 compiled, 6 cached, 0 failed) in 3m00s, 2m00s ago"));
  EXPECT_THAT(view, HasSubstr("~90abcdef  kernels.toml"));
  EXPECT_THAT(view, HasSubstr("succeeded"));
  // A hostile worker name cannot clear the terminal.
  EXPECT_THAT(view, Not(HasSubstr("\x1b[2J")));
}

}  // namespace
}  // namespace distcc_cuda::client
