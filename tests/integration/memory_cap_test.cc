// SPDX-License-Identifier: Apache-2.0
// Real memory caps: a unit too large for a worker's cap is killed inside the
// worker's cgroup (or by its RSS watchdog), retried, and built on a worker
// with a larger cap; and the learned history survives a coordinator restart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/stages/build_command.h"
#include "common/base/files.h"
#include "coordinator/coordinator.h"
#include "tests/support/test_paths.h"
#include "worker/worker.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;
constexpr int64_t kGiB = int64_t{1} << 30;

class MemoryCapTest : public ::testing::TestWithParam<bool /*force_watchdog*/> {
 protected:
  void SetUp() override {
    root_ = testing::NewTempDir("memory-cap-");
    StartCoordinator();
  }

  void StartCoordinator() {
    coordinator::CoordinatorOptions options;
    options.state_dir = root_ + "/coordinator";
    auto started = coordinator::Coordinator::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(*started);
  }

  worker::Worker* AddWorker(const std::string& name, int64_t cap) {
    worker::WorkerOptions options;
    options.coordinator_address = coordinator_->address();
    options.name = name;
    options.slots = 1;
    options.memory_cap_bytes = cap;
    options.force_watchdog = GetParam();
    options.nvcc_path = testing::FakeNvccPath();
    options.work_dir = root_ + "/" + name;
    auto started = worker::Worker::Start(options);
    EXPECT_TRUE(started.ok()) << started.status();
    if (!started.ok()) return nullptr;
    workers_.push_back(std::move(*started));
    return workers_.back().get();
  }

  // AddWorker, and skips the test when the parameter asks for a cgroup and
  // none can be made here (callers check IsSkipped()).
  worker::Worker* AddEnforcingWorker(const std::string& name, int64_t cap) {
    worker::Worker* worker = AddWorker(name, cap);
    if (worker != nullptr && !GetParam() &&
        !absl::StartsWith(worker->memory_mechanism(), "cgroup")) {
      // GTEST_SKIP returns: wrapped, as this function returns a value.
      [&] { GTEST_SKIP() << "no writable memory cgroup here: " << worker->memory_mechanism(); }();
    }
    return worker;
  }

  void Write(const std::string& relative, const std::string& content) {
    ASSERT_TRUE(WriteFileAtomically(root_ + "/" + relative, content).ok());
  }

  client::BuildOptions Options() {
    client::BuildOptions options;
    options.plan_path = root_ + "/src/kernels.toml";
    options.coordinator_address = coordinator_->address();
    options.output_dir = root_ + "/out";
    options.nvcc_path = testing::FakeNvccPath();
    return options;
  }

  // Polls the coordinator until `ready` holds (60 s at most: a loaded
  // machine may take seconds to start a build).
  bool WaitForStatus(const std::function<bool(const std::string&)>& ready) {
    for (absl::Time deadline = absl::Now() + absl::Seconds(60); absl::Now() < deadline;) {
      std::ostringstream out;
      client::RunStatus(coordinator_->address(), absl::Seconds(5), out).IgnoreError();
      if (ready(out.str())) return true;
      absl::SleepFor(absl::Milliseconds(25));
    }
    return false;
  }

  std::string root_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::vector<std::unique_ptr<worker::Worker>> workers_;
};

// The units above a cap hold their peak for a second or two: a kill ends them
// at once, and the watchdog, sampling every 10 ms, still sees the peak when a
// loaded machine starves it for a while.
TEST_P(MemoryCapTest, UnitTooLargeForACapIsKilledThereAndBuiltOnALargerWorker) {
  Write("src/kernels.toml",
        "[build]\noutput = \"libbig.so\"\nsources = [\"busy.cu\", \"big.cu\"]\n");
  Write("src/busy.cu", "// FAKE_TOUCH_MIB=50 FAKE_SLEEP_MS=8000\n");
  // Units go as they are scanned: big's scan waits until busy runs.
  Write("src/big.cu", absl::StrCat("// FAKE_TOUCH_MIB=1536 FAKE_SLEEP_MS=2000 FAKE_SCAN_WAIT_FOR(",
                                   root_, "/busy-runs)\n"));
  // The large worker takes the first unit and is busy for 8 s (long enough
  // for two kills on the small worker on a loaded machine: with 3 s, a slow
  // second lease once found the large worker free and skipped a rung) ...
  worker::Worker* large = AddEnforcingWorker("large", 2 * kGiB + kGiB / 2);
  if (IsSkipped()) return;
  ASSERT_NE(large, nullptr);
  std::string out;
  std::future<absl::Status> build = std::async(std::launch::async, [&] {
    std::ostringstream stream;
    absl::Status status = client::RunBuild(Options(), stream);
    out = stream.str();
    return status;
  });
  ASSERT_TRUE(WaitForStatus([](const std::string& status) {
    return absl::StrContains(status, "running busy");
  })) << "the large worker never took the first unit";
  // ... so the 1.5 GiB unit goes to the 1 GiB worker, where the cap stops it.
  worker::Worker* small = AddWorker("small", 1 * kGiB);
  ASSERT_NE(small, nullptr);
  Write("busy-runs", "");
  ASSERT_EQ(build.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  absl::Status status = build.get();
  ASSERT_TRUE(status.ok()) << status << "\n" << out;
  EXPECT_THAT(out, HasSubstr("re-queued big: killed for memory on small"));
  EXPECT_THAT(out, HasSubstr("retrying on a worker with a cap above 1.0 GiB"));
  EXPECT_THAT(out, HasSubstr("big                                          large"));
  EXPECT_THAT(out, HasSubstr("units     2 (2 compiled, 0 cached, 0 failed)"));
  // The host's OOM killer had nothing to do: this process is alive, and so is
  // every worker, which still answers.
  EXPECT_TRUE(WaitForStatus(
      [](const std::string& status) { return absl::StrContains(status, "2 workers"); }));
}

TEST_P(MemoryCapTest, UnitLargerThanEveryCapFailsNamingItsPeakAndTheLargestCap) {
  Write("src/kernels.toml", "[build]\noutput = \"libbig.so\"\nsources = [\"big.cu\"]\n");
  Write("src/big.cu", "// FAKE_TOUCH_MIB=1536 FAKE_SLEEP_MS=2000\n");
  worker::Worker* small = AddEnforcingWorker("small", 1 * kGiB);
  if (IsSkipped()) return;
  ASSERT_NE(small, nullptr);
  std::ostringstream out;
  absl::Status status = client::RunBuild(Options(), out);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << out.str();
  EXPECT_THAT(out.str(), HasSubstr("unit big peaked at"));
  EXPECT_THAT(out.str(), HasSubstr("above what every worker can give it (largest cap 1.0 GiB)"));
}

TEST_P(MemoryCapTest, UnitOfSeveralInstantiationsAboveEveryCapIsSplitAndBuilt) {
  // Four instantiations of 300 MiB in one unit: 1.2 GiB, above the only
  // worker's 1 GiB cap; two of them fit.
  Write("src/kernels.toml", R"([build]
output = "libsplit.so"

[[instantiations]]
name = "kern"
unit = "kern_{n}"
headers = ["kern.cuh"]
text = "template void Kern<{n}>(); // FAKE_TOUCH_MIB_EACH=300 FAKE_SLEEP_MS=1000"
per_unit = 4

[instantiations.axes]
n = [1, 2, 3, 4]
)");
  Write("src/kern.cuh", "template <int N> void Kern() {}\n");
  worker::Worker* small = AddEnforcingWorker("small", 1 * kGiB);
  if (IsSkipped()) return;
  ASSERT_NE(small, nullptr);
  std::ostringstream out;
  absl::Status status = client::RunBuild(Options(), out);
  ASSERT_TRUE(status.ok()) << status << "\n" << out.str();
  EXPECT_THAT(out.str(), HasSubstr("split kern_1of1 into kern_1of1_1of2, kern_1of1_2of2: killed "
                                   "for memory on small"));
  EXPECT_THAT(out.str(), HasSubstr("its 4 instantiations are split"));
  EXPECT_THAT(out.str(), HasSubstr("units     2 (2 compiled, 0 cached, 0 failed)"));
  // Every instantiation reached the library, once.
  absl::StatusOr<std::string> library = ReadFile(root_ + "/out/libsplit.so");
  ASSERT_TRUE(library.ok());
  for (int n = 1; n <= 4; ++n) {
    std::string text = absl::StrCat("template void Kern<", n, ">();");
    size_t first = library->find(text);
    EXPECT_NE(first, std::string::npos) << text;
    EXPECT_EQ(library->find(text, first + 1), std::string::npos) << text << " twice";
  }
  // A rebuild starts from the halves, which are cached: no kill, no compile.
  std::ostringstream again;
  status = client::RunBuild(Options(), again);
  ASSERT_TRUE(status.ok()) << status << "\n" << again.str();
  EXPECT_THAT(again.str(), HasSubstr("units     2 (0 compiled, 2 cached, 0 failed)"));
  EXPECT_THAT(again.str(), ::testing::Not(HasSubstr("killed for memory")));
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, MemoryCapTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Watchdog" : "Cgroup"; });

TEST(HistoryTest, SurvivesACoordinatorRestartAndChangesTheNextAdmission) {
  std::string root = testing::NewTempDir("history-restart-");
  ASSERT_TRUE(WriteFileAtomically(root + "/src/kernels.toml",
                                  "[build]\noutput = \"libx.so\"\nsources = [\"a.cu\"]\n")
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/src/a.cu", "// FAKE_TOUCH_MIB=100\n").ok());
  client::BuildOptions options;
  options.plan_path = root + "/src/kernels.toml";
  options.output_dir = root + "/out";
  options.nvcc_path = testing::FakeNvccPath();
  std::vector<std::string> outputs;
  for (int run = 0; run < 2; ++run) {
    coordinator::CoordinatorOptions coordinator_options;
    coordinator_options.state_dir = root + "/state";
    auto coordinator = coordinator::Coordinator::Start(coordinator_options);
    ASSERT_TRUE(coordinator.ok());
    worker::WorkerOptions worker_options;
    worker_options.coordinator_address = (*coordinator)->address();
    worker_options.name = "w";
    worker_options.memory_cap_bytes = 4 * kGiB;
    worker_options.nvcc_path = testing::FakeNvccPath();
    worker_options.work_dir = root + "/worker";
    auto worker = worker::Worker::Start(worker_options);
    ASSERT_TRUE(worker.ok());
    // The same unit again, not served from the result cache.
    RemoveAll(root + "/state/results").IgnoreError();
    options.coordinator_address = (*coordinator)->address();
    std::ostringstream out;
    ASSERT_TRUE(client::RunBuild(options, out).ok()) << out.str();
    outputs.push_back(out.str());
  }
  EXPECT_THAT(outputs[0], HasSubstr("(predicted 2.0 GiB, default)"));
  // The second coordinator is a new process's worth of state: only the
  // history file carried the measurement over.
  EXPECT_THAT(outputs[1], HasSubstr(", history)"));
  EXPECT_THAT(outputs[1], ::testing::Not(HasSubstr("predicted 2.0 GiB")));
}

}  // namespace
}  // namespace distcc_cuda
