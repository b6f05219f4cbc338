// SPDX-License-Identifier: Apache-2.0
// What an operator sees of a real coordinator and two workers around builds
// with the fake compiler: /metrics, whose counters move by exactly what each
// build did in Prometheus's exposition format, and `status --watch`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/commands.h"
#include "client/stages/build_command.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "coordinator/coordinator.h"
#include "tests/integration/operated_cluster.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/test_paths.h"
#include "worker/worker.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
class MetricsTest : public testing::OperatedClusterTest {
 protected:
  void SetUp() override {
    coordinator::CoordinatorOptions options;
    options.metrics_listen = "127.0.0.1:0";
    // Every unit fits the workers' small caps until measured.
    options.prediction.peak_bytes = 64 * kMiB;
    StartCluster("metrics-", options, 512 * kMiB);
    if (HasFatalFailure()) return;
    Write("src/kern.cuh", "template <typename T, int N> void Kern() {}\n");
    Write("src/api.cu", "int api() { return 1; } // FAKE_SLEEP_MS=100\n");
    // big is killed wherever it runs (no cap holds it): its long sleep costs
    // nothing, and a watchdog starved by a loaded machine still sees its peak.
    Write("src/big.cu", "int big(); // FAKE_TOUCH_MIB=768 FAKE_SLEEP_MS=10000\n");
  }

  void Write(const std::string& relative, const std::string& content) {
    ASSERT_TRUE(WriteFileAtomically(root_ + "/" + relative, content).ok());
  }

  // A manifest of 8 generated units and `sources`.
  void WriteManifest(const std::string& sources) {
    Write("src/kernels.toml", absl::StrCat(R"([build]
output = "libm.so"
sources = [)",
                                           sources, R"(]

[[instantiations]]
name = "kern"
unit = "kern_{n}"
headers = ["kern.cuh"]
text = "template void Kern<float, {n}>(); // FAKE_SLEEP_MS=100"

[instantiations.axes]
n = [1, 2, 3, 4, 5, 6, 7, 8]
)"));
  }

  // A unit that touches 200 MiB and holds it until Release().
  std::string HoldingUnit() const {
    return absl::StrCat("int hold(); // FAKE_TOUCH_MIB=200 ", HeldUntilRelease(), "\n");
  }

  absl::Status Build(std::string* output) {
    client::BuildOptions options;
    options.plan_path = root_ + "/src/kernels.toml";
    options.coordinator_address = coordinator_->address();
    options.output_dir = root_ + "/out";
    options.nvcc_path = testing::FakeNvccPath();
    std::ostringstream out;
    absl::Status status = client::RunBuild(options, out);
    *output = out.str();
    return status;
  }

  // What the build's summary says it did: "units  9 (9 compiled, 0 cached,
  // 0 failed)".
  struct Summary {
    int units = -1, compiled = -1, cached = -1, failed = -1;
  };
  static Summary SummaryOf(const std::string& output) {
    static const std::regex kLine(R"(units +(\d+) \((\d+) compiled, (\d+) cached, (\d+) failed\))");
    std::smatch match;
    Summary summary;
    if (std::regex_search(output, match, kLine)) {
      summary = {std::stoi(match[1]), std::stoi(match[2]), std::stoi(match[3]),
                 std::stoi(match[4])};
    }
    return summary;
  }

  static testing::ScrapedMetrics Scrape(const std::string& url) {
    absl::StatusOr<std::string> text = testing::HttpGet(url + "/metrics");
    EXPECT_TRUE(text.ok()) << text.status();
    if (!text.ok()) return {};
    absl::StatusOr<testing::ScrapedMetrics> parsed = testing::ParsePrometheusText(*text);
    EXPECT_TRUE(parsed.ok()) << parsed.status() << "\n" << *text;
    return parsed.ok() ? *parsed : testing::ScrapedMetrics{};
  }

  // Both workers' scrapes, summed series by series.
  testing::ScrapedMetrics ScrapeWorkers() {
    testing::ScrapedMetrics sum;
    for (const auto& worker : workers_) {
      testing::ScrapedMetrics one = Scrape(worker->metrics_url());
      for (const auto& [series, value] : one.series) sum.series[series] += value;
      sum.types.insert(one.types.begin(), one.types.end());
    }
    return sum;
  }
};

TEST_F(MetricsTest, CountersMoveByExactlyWhatEachBuildDid) {
  const std::string url = coordinator_->metrics_url();
  ASSERT_THAT(url, HasSubstr("http://127.0.0.1:"));
  testing::ScrapedMetrics before = Scrape(url);
  EXPECT_EQ(before.types.at("distcc_cuda_units_compiled_total"), "counter");
  EXPECT_EQ(before.types.at("distcc_cuda_compile_duration_seconds"), "histogram");
  EXPECT_EQ(before.Value("distcc_cuda_units_compiled_total"), 0);
  EXPECT_EQ(before.Value("distcc_cuda_workers_connected"), 2);
  EXPECT_EQ(before.Value("distcc_cuda_worker_slots{worker=\"worker-a\"}"), 1);
  EXPECT_EQ(before.Value("distcc_cuda_worker_memory_cap_bytes{worker=\"worker-b\"}"), 512 * kMiB);
  EXPECT_EQ(before.Value("distcc_cuda_units_queued"), 0);

  // 8 instantiations in as many units as the coordinator chooses, and
  // api.cu: all compiled.
  WriteManifest(R"("api.cu")");
  std::string out;
  absl::Status built = Build(&out);
  ASSERT_TRUE(built.ok()) << built << "\n" << out;
  const Summary one = SummaryOf(out);
  ASSERT_GE(one.units, 2) << out;
  ASSERT_EQ(one.compiled, one.units) << out;
  const int n = one.units;
  testing::ScrapedMetrics first = Scrape(url);
  EXPECT_EQ(first.Value("distcc_cuda_units_compiled_total"), n);
  EXPECT_EQ(first.Value("distcc_cuda_units_cached_total"), 0);
  EXPECT_EQ(first.Value("distcc_cuda_units_failed_total"), 0);
  EXPECT_EQ(first.Value("distcc_cuda_units_killed_for_memory_total"), 0);
  EXPECT_EQ(first.Value("distcc_cuda_units_requeued_total"), 0);
  EXPECT_EQ(first.Value("distcc_cuda_builds_total{result=\"success\"}"), 1);
  EXPECT_EQ(first.Value("distcc_cuda_compile_duration_seconds_count"), n);
  EXPECT_GE(first.Value("distcc_cuda_compile_duration_seconds_sum"), n * 0.1);
  EXPECT_EQ(first.Value("distcc_cuda_queue_duration_seconds_count"), n);
  EXPECT_EQ(first.Value("distcc_cuda_peak_prediction_ratio_count"), n);
  // Two scans: api.cu's and the instantiation set's header.
  EXPECT_EQ(first.Value("distcc_cuda_scan_duration_seconds_count"), 2);
  EXPECT_GT(first.Value("distcc_cuda_scan_duration_seconds_sum"), 0);
  EXPECT_GT(first.Value("distcc_cuda_store_blobs"), 0);
  EXPECT_GT(first.Value("distcc_cuda_store_bytes"), 0);
  EXPECT_GT(first.Value("distcc_cuda_store_lookups_total{result=\"miss\"}"), 0);
  testing::ScrapedMetrics workers_first = ScrapeWorkers();
  EXPECT_EQ(workers_first.Value("distcc_cuda_tasks_total{outcome=\"completed\"}"), n);
  EXPECT_EQ(workers_first.Value("distcc_cuda_compile_duration_seconds_count"), n);
  EXPECT_EQ(
      workers_first.Value("distcc_cuda_transfer_duration_seconds_count{direction=\"inputs\"}"), n);
  EXPECT_EQ(
      workers_first.Value("distcc_cuda_transfer_duration_seconds_count{direction=\"outputs\"}"), n);
  EXPECT_EQ(workers_first.Value("distcc_cuda_worker_registered"), 2);
  EXPECT_EQ(workers_first.Value("distcc_cuda_worker_slots"), 2);
  EXPECT_GT(workers_first.Value("distcc_cuda_store_lookups_total{result=\"miss\"}"), 0);

  // The same units, cached, and big.cu, which no worker's cap holds: killed
  // for memory, retried alone on a worker, killed again, failed.
  WriteManifest(R"("api.cu", "big.cu")");
  built = Build(&out);
  ASSERT_FALSE(built.ok()) << out;
  EXPECT_THAT(out, HasSubstr("killed for memory"));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("1 of ", n + 1, " units failed: big")));
  testing::ScrapedMetrics second = Scrape(url);
  EXPECT_EQ(second.Value("distcc_cuda_units_compiled_total"), n);
  EXPECT_EQ(second.Value("distcc_cuda_units_cached_total"), n);
  EXPECT_EQ(second.Value("distcc_cuda_units_failed_total"), 1);
  EXPECT_EQ(second.Value("distcc_cuda_units_killed_for_memory_total"), 2);
  EXPECT_EQ(second.Value("distcc_cuda_units_requeued_total"), 1);
  EXPECT_EQ(second.Value("distcc_cuda_builds_total{result=\"success\"}"), 1);
  EXPECT_EQ(second.Value("distcc_cuda_builds_total{result=\"failure\"}"), 1);
  EXPECT_EQ(second.Value("distcc_cuda_compile_duration_seconds_count"), n);
  EXPECT_EQ(second.Value("distcc_cuda_queue_duration_seconds_count"), n + 2);
  EXPECT_EQ(second.Value("distcc_cuda_scan_duration_seconds_count"), 2 + 3);
  testing::ScrapedMetrics workers_second = ScrapeWorkers();
  EXPECT_EQ(workers_second.Value("distcc_cuda_tasks_total{outcome=\"completed\"}"), n);
  EXPECT_EQ(workers_second.Value("distcc_cuda_tasks_total{outcome=\"killed_for_memory\"}"), 2);
  EXPECT_GE(workers_second.Value("distcc_cuda_worker_memory_peak_bytes"), 512 * kMiB);
  // Nothing left running or reserved.
  EXPECT_EQ(second.Value("distcc_cuda_units_running"), 0);
  EXPECT_EQ(second.Sum("distcc_cuda_worker_memory_reserved_bytes"), 0);
  EXPECT_EQ(second.Value("distcc_cuda_builds_active"), 0);
}

TEST_F(MetricsTest, WorkerMemoryInUseReachesTheCoordinatorWithTheHeartbeat) {
  Write("src/kernels.toml", "[build]\noutput = \"libh.so\"\nsources = [\"hold.cu\"]\n");
  // The unit holds its memory until the test has seen it.
  Write("src/hold.cu", HoldingUnit());
  std::string out;
  std::thread build([&] { Build(&out).IgnoreError(); });
  // Within a few heartbeats (1 s apart) of the touch, while it waits.
  double used = 0;
  for (int i = 0; i < 300 && used < 150 * kMiB; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    used = Scrape(coordinator_->metrics_url()).Sum("distcc_cuda_worker_memory_used_bytes");
  }
  Release();
  build.join();
  EXPECT_GE(used, 150 * kMiB) << out;
  EXPECT_LE(used, 512 * kMiB);
}

TEST_F(MetricsTest, StatusWatchShowsTheRunningUnitThenTheEndedBuild) {
  Write("src/kernels.toml", "[build]\noutput = \"libh.so\"\nsources = [\"hold.cu\"]\n");
  Write("src/hold.cu", HoldingUnit());
  std::string out;
  std::thread build([&] { Build(&out).IgnoreError(); });
  // The unit is let go 2 s (10 views) after its memory in use reached the
  // coordinator, however long that took on a loaded machine.
  std::thread releaser([&] {
    for (int i = 0; i < 300; ++i) {
      absl::SleepFor(absl::Milliseconds(100));
      if (Scrape(coordinator_->metrics_url()).Sum("distcc_cuda_worker_memory_used_bytes") > 0) {
        break;
      }
    }
    absl::SleepFor(absl::Seconds(2));
    Release();
  });
  client::StatusWatchOptions watch;
  watch.interval = absl::Milliseconds(200);
  watch.frames = 75;  // 15 s: the unit's start, 2 s held, its end and then some
  std::ostringstream views;
  absl::Status watched =
      client::RunStatusWatch(coordinator_->address(), absl::Seconds(5), watch, views);
  releaser.join();
  build.join();
  ASSERT_TRUE(watched.ok()) << watched;
  const std::string text = views.str();
  std::vector<std::string> frames = absl::StrSplit(text, "coordinator 127.0.0.1:");
  EXPECT_EQ(frames.size(), 76u);  // 75 views, each starting with its heading
  bool saw_running = false, saw_memory = false, saw_ended = false;
  for (const std::string& frame : frames) {
    saw_running |= absl::StrContains(frame, "1 units running") && absl::StrContains(frame, "hold");
    saw_memory |= absl::StrContains(frame, "[#");
    saw_ended |= absl::StrContains(frame, "succeeded 1/1 units (1 compiled, 0 cached, 0 failed)");
  }
  EXPECT_TRUE(saw_running) << text;
  EXPECT_TRUE(saw_memory) << "the worker's memory in use never showed:\n" << text;
  EXPECT_TRUE(saw_ended) << text << out;
  // The first views show the build running, the last ones ended.
  EXPECT_THAT(frames.back(), HasSubstr("succeeded"));
  EXPECT_THAT(frames.back(), HasSubstr("worker-a"));
  EXPECT_THAT(frames.back(), HasSubstr("worker-b"));

  // The command, as people run it (not a terminal here: one view after
  // another, no escape sequences).
  ProcessSpec status;
  status.argv = {testing::BinaryPath("distcc-cuda"),
                 "status",
                 "--coordinator",
                 coordinator_->address(),
                 "--watch",
                 "--watch-interval-s=0.1",
                 "--watch-frames=2"};
  status.timeout = absl::Seconds(30);
  absl::StatusOr<ProcessResult> run = RunProcess(status);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 0) << run->stderr_text;
  std::vector<std::string> cli_frames = absl::StrSplit(run->stdout_text, "builds\n");
  EXPECT_EQ(cli_frames.size(), 3u) << run->stdout_text;
  EXPECT_THAT(run->stdout_text, Not(HasSubstr("\x1b[")));
  EXPECT_THAT(run->stdout_text, HasSubstr("succeeded 1/1 units"));
}

}  // namespace
}  // namespace distcc_cuda
