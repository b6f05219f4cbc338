// SPDX-License-Identifier: Apache-2.0
// Chaos in a bounded test: a 2,000-unit build through 8 worker processes
// while workers and the coordinator are killed (SIGKILL) and started again
// at random (a fixed seed, a bounded count), and a second build is cancelled
// half-way. The real binaries, the fake compiler, loopback only.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "tests/support/background_process.h"
#include "tests/support/process_tree.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

constexpr int kWorkers = 8;
constexpr int kAxisA = 40;
constexpr int kAxisB = 50;  // 40 x 50 = 2,000 units
// Small enough to evict during the run; each blob counts 8 KiB or more on
// disk (BlobDiskCost), and the build's 2,000 objects are pinned until its
// client has them.
constexpr int64_t kCoordinatorStoreLimit = 24 << 20;
constexpr int64_t kWorkerStoreLimit = 1 << 20;

// A manifest of `a` x `b` units of one instantiation each, named
// PREFIX_A_B (prefixes no other process's command line holds), each sleeping `sleep_ms` in the fake
// compiler.
std::string Manifest(const std::string& prefix, int a, int b, int sleep_ms) {
  std::vector<int> as(a), bs(b);
  for (int i = 0; i < a; ++i) as[i] = i;
  for (int i = 0; i < b; ++i) bs[i] = i;
  return absl::StrCat(R"([build]
output = "lib)",
                      prefix, R"(.so"
flags = ["-O3"]

[[instantiations]]
name = ")",
                      prefix, R"("
unit = ")",
                      prefix, R"(_{a}_{b}"
headers = ["kern.cuh"]
text = "template void Kern<{a}, {b}>(); // marker )",
                      prefix, R"( {a} {b} FAKE_SLEEP_MS=)", sleep_ms, R"("
per_unit = 1

[instantiations.axes]
a = [)",
                      absl::StrJoin(as, ", "), R"(]
b = [)",
                      absl::StrJoin(bs, ", "), "]\n");
}

class Cluster {
 public:
  explicit Cluster(std::string root) : root_(std::move(root)) {}

  void StartCoordinator(const std::string& address) {
    address_ = address;
    auto started = testing::BackgroundProcess::Start(
        {testing::BinaryPath("distcc-cuda-coordinator"), "--listen", address, "--state-dir",
         root_ + "/coordinator", "--cas-max-size", std::to_string(kCoordinatorStoreLimit)},
        absl::StrCat(root_, "/coordinator-", ++coordinator_starts_, ".log"));
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(*started);
    ASSERT_TRUE(coordinator_->WaitForLog("listening on", absl::Seconds(30)).ok())
        << coordinator_->Log();
  }

  void StartWorker(int index) {
    const std::string name = absl::StrCat("chaos-w", index);
    auto started = testing::BackgroundProcess::Start(
        {testing::BinaryPath("distcc-cuda-worker"), "--coordinator", address_, "--name", name,
         "--slots", "1", "--memory-cap", "512MiB", "--nvcc", testing::FakeNvccPath(), "--work-dir",
         root_ + "/" + name, "--cas-max-size", std::to_string(kWorkerStoreLimit),
         "--insecure-no-sandbox"},
        absl::StrCat(root_, "/", name, "-", ++worker_starts_, ".log"));
    ASSERT_TRUE(started.ok()) << started.status();
    if (workers_.size() <= static_cast<size_t>(index)) workers_.resize(index + 1);
    workers_[index] = std::move(*started);
  }

  void Kill(std::unique_ptr<testing::BackgroundProcess>& process) {
    ASSERT_TRUE(process->Stop(SIGKILL, absl::Seconds(10)).ok());
    process.reset();
  }

  std::string root_;
  std::string address_;
  int coordinator_starts_ = 0;
  int worker_starts_ = 0;
  std::unique_ptr<testing::BackgroundProcess> coordinator_;
  std::vector<std::unique_ptr<testing::BackgroundProcess>> workers_;
};

TEST(ChaosTest, BuildsFinishThroughKilledWorkersAndCoordinatorRestarts) {
  const std::string root = testing::NewTempDir("chaos-");
  for (const char* prefix : {"zzchaos", "zzcancel"}) {
    const std::string dir = absl::StrCat(root, "/", prefix);
    ASSERT_TRUE(
        WriteFileAtomically(dir + "/kern.cuh", "template <int A, int B> void Kern() {}\n").ok());
  }
  ASSERT_TRUE(
      WriteFileAtomically(root + "/zzchaos/kernels.toml", Manifest("zzchaos", kAxisA, kAxisB, 20))
          .ok());
  ASSERT_TRUE(
      WriteFileAtomically(root + "/zzcancel/kernels.toml", Manifest("zzcancel", 10, 20, 2000))
          .ok());
  Cluster cluster(root);
  // A port of its own, the same across the coordinator's restarts.
  const int port = testing::FreeLoopbackPort();
  ASSERT_NE(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  ASSERT_NO_FATAL_FAILURE(cluster.StartCoordinator(address));
  for (int i = 0; i < kWorkers; ++i) ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(i));

  const absl::Time start = absl::Now();
  auto client = [&](const std::string& prefix) {
    return testing::BackgroundProcess::Start(
        {testing::BinaryPath("distcc-cuda"), "build",
         absl::StrCat(root, "/", prefix, "/kernels.toml"), "--coordinator", address, "-o",
         absl::StrCat(root, "/out-", prefix), "--nvcc", testing::FakeNvccPath(),
         "--reconnect-timeout", "120s"},
        absl::StrCat(root, "/client-", prefix, ".log"));
  };
  auto build = client("zzchaos");
  ASSERT_TRUE(build.ok());
  auto cancelled = client("zzcancel");
  ASSERT_TRUE(cancelled.ok());

  std::mt19937 random(20261130);
  int worker_kills = 0;
  int coordinator_kills = 0;
  bool cancel_sent = false;
  // At most 16 events, one every 1-3 s, and never past 4 minutes.
  for (int event = 0; event < 16 && absl::Now() - start < absl::Minutes(4); ++event) {
    absl::SleepFor(absl::Milliseconds(1000 + random() % 2000));
    // The build is over (looked at without reaping it).
    siginfo_t info{};
    if (waitid(P_PID, (*build)->pid(), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == (*build)->pid()) {
      break;
    }
    if (!cancel_sent && event == 2) {
      // Cancel the second build half-way, as Ctrl-C would.
      kill((*cancelled)->pid(), SIGINT);
      cancel_sent = true;
      continue;
    }
    if (coordinator_kills < 2 && random() % 4 == 0) {
      ASSERT_NO_FATAL_FAILURE(cluster.Kill(cluster.coordinator_));
      ++coordinator_kills;
      absl::SleepFor(absl::Milliseconds(500 + random() % 1500));
      ASSERT_NO_FATAL_FAILURE(cluster.StartCoordinator(address));
    } else {
      int victim = static_cast<int>(random() % kWorkers);
      ASSERT_NO_FATAL_FAILURE(cluster.Kill(cluster.workers_[victim]));
      ++worker_kills;
      ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(victim));
    }
  }
  absl::StatusOr<int> cancelled_end = (*cancelled)->Stop(SIGINT, absl::Seconds(30));
  ASSERT_TRUE(cancelled_end.ok()) << (*cancelled)->Log();
  absl::StatusOr<int> end = absl::DeadlineExceededError("");
  for (int i = 0; i < 600 && !end.ok(); ++i) end = (*build)->Stop(0, absl::Seconds(1));
  ASSERT_TRUE(end.ok()) << "the build did not end within 10 minutes\n" << (*build)->Log();
  const absl::Duration took = absl::Now() - start;
  const std::string log = (*build)->Log();

  // The build that was not cancelled completed, each unit linked once.
  ASSERT_TRUE(WIFEXITED(*end) && WEXITSTATUS(*end) == 0) << log;
  EXPECT_THAT(log, HasSubstr(absl::StrCat("units     ", kAxisA * kAxisB, " (")));
  absl::StatusOr<std::string> library = ReadFile(root + "/out-zzchaos/libzzchaos.so");
  ASSERT_TRUE(library.ok());
  int wrong = 0;
  for (int a = 0; a < kAxisA; ++a) {
    for (int b = 0; b < kAxisB; ++b) {
      const std::string marker = absl::StrCat("marker zzchaos ", a, " ", b, " ");
      size_t first = library->find(marker);
      if (first == std::string::npos || library->find(marker, first + 1) != std::string::npos) {
        ++wrong;
      }
    }
  }
  EXPECT_EQ(wrong, 0) << "units not linked exactly once";
  // After each coordinator restart the units that had come back came back
  // from the result cache, none compiled again.
  if (coordinator_kills > 0 && absl::StrContains(log, "submitting the build again")) {
    EXPECT_THAT(log, HasSubstr(", 0 were compiled again"));
  }
  // The cancelled build ended by its signal, saying so.
  EXPECT_TRUE(WIFSIGNALED(*cancelled_end) && WTERMSIG(*cancelled_end) == SIGINT)
      << (*cancelled)->Log();
  EXPECT_THAT((*cancelled)->Log(), HasSubstr("build cancelled (Ctrl-C)"));

  // Stopped in order, nothing of either build runs any more.
  for (auto& worker : cluster.workers_) {
    if (worker != nullptr) {
      EXPECT_TRUE(worker->Stop(SIGTERM, absl::Seconds(10)).ok());
    }
  }
  EXPECT_TRUE(cluster.coordinator_->Stop(SIGTERM, absl::Seconds(10)).ok());
  int left = 0;
  for (int i = 0; i < 100; ++i) {
    left = testing::ProcessesMentioning("zzchaos_") + testing::ProcessesMentioning("zzcancel_");
    if (left == 0) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(left, 0) << "compiler processes outlived the test's cluster";
  // The stores stayed under their limits.
  EXPECT_LE(testing::StoreBytes(root + "/coordinator/cas"), kCoordinatorStoreLimit);
  for (int i = 0; i < kWorkers; ++i) {
    EXPECT_LE(testing::StoreBytes(absl::StrCat(root, "/chaos-w", i, "/cas")), kWorkerStoreLimit)
        << i;
  }
  std::cout << "chaos: " << kAxisA * kAxisB << " units through " << kWorkers << " workers in "
            << absl::FormatDuration(took) << ", " << worker_kills << " worker kills, "
            << coordinator_kills << " coordinator kills and restarts, one build cancelled"
            << std::endl;
  std::cout << log.substr(log.rfind("distcc-cuda: built") == std::string::npos
                              ? 0
                              : log.rfind("distcc-cuda: built"))
            << std::endl;
}

}  // namespace
}  // namespace distcc_cuda
