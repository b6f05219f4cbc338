// SPDX-License-Identifier: Apache-2.0
#include "common/process/memory_cap.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::AllOf;
using ::testing::Ge;
using ::testing::HasSubstr;
using ::testing::Le;
using ::testing::Lt;
using ::testing::StartsWith;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr char kPython[] = "/usr/bin/python3";

std::string MakeTempDir() { return ::distcc_cuda::testing::NewTempDir("memory_cap_"); }

void WriteFile(const std::string& path, const std::string& text) {
  std::string dir = path.substr(0, path.find_last_of('/'));
  std::string command = absl::StrCat("mkdir -p '", dir, "'");
  ASSERT_EQ(system(command.c_str()), 0) << command;
  std::ofstream(path) << text;
}

bool Exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

// Waits up to 10 s for `path` to exist.
bool AwaitFile(const std::string& path) {
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!Exists(path)) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// Whether the node counts at least `bytes` in use within 10 s.
bool AwaitCurrentBytes(const NodeMemoryCap& node, int64_t bytes) {
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (node.CurrentBytes() < bytes) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// A program that touches `mib` MiB, then creates `ready` (if given) and holds
// the memory until `release` exists (if given, at most 10 s) or for `hold`.
std::vector<std::string> Allocate(int64_t mib, const std::string& ready = "",
                                  const std::string& release = "",
                                  absl::Duration hold = absl::ZeroDuration()) {
  std::string script = absl::StrCat(
      "import os, time\n"
      "b = bytearray(",
      mib, " << 20)\n",  // zero-filled, so every page is touched
      "ready, release = '", ready, "', '", release, "'\n",
      "if ready: open(ready, 'w').close()\n"
      "end = time.time() + (10 if release else ",
      absl::ToDoubleSeconds(hold),
      ")\n"
      "while time.time() < end and not (release and os.path.exists(release)):\n"
      "    time.sleep(0.005)\n");
  return {kPython, "-c", script};
}

struct TaskRun {
  absl::Status attached;
  absl::StatusOr<ProcessResult> result;
  absl::StatusOr<TaskMemoryUsage> usage;
};

// Runs `argv` as one task of `node`, as the worker does.
TaskRun RunTask(NodeMemoryCap& node, const std::vector<std::string>& argv,
                int64_t reserved_bytes = 0, std::string* cgroup_path = nullptr) {
  TaskRun run;
  absl::StatusOr<std::unique_ptr<TaskMemoryScope>> scope =
      node.StartTask("unit/a b", reserved_bytes);
  if (!scope.ok()) {
    run.attached = scope.status();
    run.result = scope.status();
    run.usage = scope.status();
    return run;
  }
  if (cgroup_path != nullptr) *cgroup_path = (*scope)->cgroup_path();
  ProcessSpec spec;
  spec.argv = argv;
  spec.timeout = absl::Seconds(30);
  (*scope)->PrepareProcess(spec);
  run.result = RunProcess(spec);
  // Under cgroups the child joins its group itself; failing that, it never runs.
  run.attached = run.result.ok() ? absl::OkStatus() : run.result.status();
  run.usage = (*scope)->Finish();
  return run;
}

// ---------------------------------------------------------------------------
// Fake cgroup trees: file formats and discovery.

class FakeTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir();
    paths_.proc_self_cgroup = root_ + "/proc/self/cgroup";
    paths_.meminfo = root_ + "/proc/meminfo";
    paths_.cgroup_v2_root = root_ + "/v2";
    paths_.cgroup_v1_root = root_ + "/v1";
    WriteFile(paths_.meminfo,
              "MemTotal:       16777216 kB\n"  // 16 GiB
              "MemFree:         1000000 kB\n"
              "MemAvailable:   10485760 kB\n");  // 10 GiB
  }
  void MakeV2(const std::string& own) {
    WriteFile(paths_.proc_self_cgroup, absl::StrCat("0::", own, "\n"));
    WriteFile(paths_.cgroup_v2_root + "/cgroup.controllers", "cpu io memory pids\n");
    WriteFile(paths_.cgroup_v2_root + own + "/cgroup.procs", "1\n");
  }
  void MakeV1(const std::string& own) {
    WriteFile(paths_.proc_self_cgroup,
              absl::StrCat("5:cpu,cpuacct:/x\n4:memory:", own, "\n1:name=systemd:/y\n0::/\n"));
    WriteFile(paths_.cgroup_v1_root + "/cgroup.procs", "");
    WriteFile(paths_.cgroup_v1_root + "/memory.limit_in_bytes", "9223372036854771712\n");
    WriteFile(paths_.cgroup_v1_root + own + "/cgroup.procs", "1\n");
  }

  std::string root_;
  CgroupPaths paths_;
};

TEST_F(FakeTreeTest, FindsOwnGroupDirectory) {
  MakeV2("/system.slice/worker.service");
  EXPECT_EQ(*memory_cap_internal::OwnCgroupDirectory(MemoryCapMechanism::kCgroupV2, paths_),
            paths_.cgroup_v2_root + "/system.slice/worker.service");
  MakeV1("/process_api/abc");
  EXPECT_EQ(*memory_cap_internal::OwnCgroupDirectory(MemoryCapMechanism::kCgroupV1, paths_),
            paths_.cgroup_v1_root + "/process_api/abc");
}

TEST_F(FakeTreeTest, ContainerSeesItsGroupMountedAsTheRoot) {
  // Docker without a cgroup namespace: /proc/self/cgroup names the host's
  // path, the mount holds only the container's group.
  WriteFile(paths_.proc_self_cgroup, "4:memory:/docker/0123abcd\n");
  WriteFile(paths_.cgroup_v1_root + "/cgroup.procs", "1\n");
  EXPECT_EQ(*memory_cap_internal::OwnCgroupDirectory(MemoryCapMechanism::kCgroupV1, paths_),
            paths_.cgroup_v1_root);
}

TEST_F(FakeTreeTest, MissingHierarchyIsNotFound) {
  MakeV1("/a");
  absl::StatusOr<std::string> dir =
      memory_cap_internal::OwnCgroupDirectory(MemoryCapMechanism::kCgroupV2, paths_);
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(dir.status().message(), HasSubstr("no memory hierarchy mounted at"));
}

TEST_F(FakeTreeTest, V2LimitIsTheLowestOfOwnGroupAndAncestors) {
  MakeV2("/kubepods/pod1/c1");
  WriteFile(paths_.cgroup_v2_root + "/kubepods/memory.max", "max\n");
  WriteFile(paths_.cgroup_v2_root + "/kubepods/pod1/memory.max", "8589934592\n");
  WriteFile(paths_.cgroup_v2_root + "/kubepods/pod1/c1/memory.max", "max\n");
  std::optional<CgroupLimit> limit = OwnCgroupMemoryLimit(paths_);
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, int64_t{8} << 30);
  EXPECT_EQ(limit->file, paths_.cgroup_v2_root + "/kubepods/pod1/memory.max");
}

TEST_F(FakeTreeTest, V1UnlimitedAndLimitsAboveMemTotalAreNoLimit) {
  MakeV1("/a/b");
  WriteFile(paths_.cgroup_v1_root + "/a/memory.limit_in_bytes", "9223372036854771712\n");
  WriteFile(paths_.cgroup_v1_root + "/a/b/memory.limit_in_bytes", "34359738368\n");  // 32 GiB
  EXPECT_FALSE(OwnCgroupMemoryLimit(paths_).has_value());
  WriteFile(paths_.cgroup_v1_root + "/a/memory.limit_in_bytes", "4294967296\n");
  std::optional<CgroupLimit> limit = OwnCgroupMemoryLimit(paths_);
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, int64_t{4} << 30);
}

TEST_F(FakeTreeTest, DefaultCapIsContainerLimitLessHeadroom) {
  MakeV2("/");
  WriteFile(paths_.cgroup_v2_root + "/memory.max", "8589934592\n");
  DefaultCap cap = DefaultMemoryCap(paths_);
  EXPECT_EQ(cap.bytes, (int64_t{8} << 30) - (int64_t{8} << 30) / 20);
  EXPECT_THAT(cap.source, StartsWith("container cgroup limit 8.0 GiB"));
  EXPECT_THAT(cap.source, HasSubstr("memory.max"));
}

TEST_F(FakeTreeTest, SmallContainerLimitKeepsAtLeastHalf) {
  MakeV2("/");
  WriteFile(paths_.cgroup_v2_root + "/memory.max", absl::StrCat(300 * kMiB, "\n"));
  EXPECT_EQ(DefaultMemoryCap(paths_).bytes, 256 * kMiB);  // 300 - 150, raised to the floor
  WriteFile(paths_.cgroup_v2_root + "/memory.max", absl::StrCat(1024 * kMiB, "\n"));
  EXPECT_EQ(DefaultMemoryCap(paths_).bytes, 768 * kMiB);  // headroom 256 MiB
}

TEST_F(FakeTreeTest, DefaultCapWithoutLimitIsAvailableLessHeadroom) {
  MakeV1("/a");
  DefaultCap cap = DefaultMemoryCap(paths_);
  EXPECT_EQ(cap.bytes, (int64_t{10} << 30) - (int64_t{1} << 30));
  EXPECT_THAT(cap.source, StartsWith("available memory 10.0 GiB less 1.0 GiB headroom"));
  // Little available memory: the headroom is at least 512 MiB.
  WriteFile(paths_.meminfo, "MemTotal: 16777216 kB\nMemAvailable: 2097152 kB\n");
  EXPECT_EQ(DefaultMemoryCap(paths_).bytes, (int64_t{2} << 30) - 512 * kMiB);
}

TEST_F(FakeTreeTest, DefaultCapTakesAvailableMemoryWhenTheContainerLimitIsHigher) {
  MakeV2("/");
  WriteFile(paths_.cgroup_v2_root + "/memory.max", "12884901888\n");  // 12 GiB, 10 available
  DefaultCap cap = DefaultMemoryCap(paths_);
  EXPECT_EQ(cap.bytes, (int64_t{9} << 30));
  EXPECT_THAT(cap.source, StartsWith("available memory"));
}

TEST_F(FakeTreeTest, ReadsV2TaskUsage) {
  std::string dir = root_ + "/task";
  WriteFile(dir + "/memory.peak", "268435456\n");
  WriteFile(dir + "/memory.events", "low 0\nhigh 0\nmax 17\noom 1\noom_kill 1\noom_group_kill 0\n");
  absl::StatusOr<TaskMemoryUsage> usage =
      memory_cap_internal::ReadTaskUsage(MemoryCapMechanism::kCgroupV2, dir);
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->peak_bytes, 268435456);
  EXPECT_TRUE(usage->killed_for_memory);

  // Hitting the limit and reclaiming ("max", "oom") is not a kill.
  WriteFile(dir + "/memory.events", "low 0\nhigh 0\nmax 17\noom 1\noom_kill 0\n");
  EXPECT_FALSE(
      memory_cap_internal::ReadTaskUsage(MemoryCapMechanism::kCgroupV2, dir)->killed_for_memory);
  WriteFile(dir + "/memory.events", "oom_kill 0\noom_group_kill 1\n");
  EXPECT_TRUE(
      memory_cap_internal::ReadTaskUsage(MemoryCapMechanism::kCgroupV2, dir)->killed_for_memory);

  // Linux < 5.19 has no memory.peak.
  ASSERT_EQ(unlink((dir + "/memory.peak").c_str()), 0);
  EXPECT_EQ(memory_cap_internal::ReadTaskUsage(MemoryCapMechanism::kCgroupV2, dir)->peak_bytes, 0);
}

TEST_F(FakeTreeTest, ReadsV1TaskUsage) {
  std::string dir = root_ + "/task";
  WriteFile(dir + "/memory.max_usage_in_bytes", "268423168\n");
  WriteFile(dir + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
  absl::StatusOr<TaskMemoryUsage> usage =
      memory_cap_internal::ReadTaskUsage(MemoryCapMechanism::kCgroupV1, dir);
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->peak_bytes, 268423168);
  EXPECT_TRUE(usage->killed_for_memory);
  WriteFile(dir + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
  EXPECT_FALSE(
      memory_cap_internal::ReadTaskUsage(MemoryCapMechanism::kCgroupV1, dir)->killed_for_memory);
  WriteFile(dir + "/memory.max_usage_in_bytes", "garbage\n");
  EXPECT_EQ(memory_cap_internal::ReadTaskUsage(MemoryCapMechanism::kCgroupV1, dir).status().code(),
            absl::StatusCode::kInternal);
}

TEST_F(FakeTreeTest, RefusesCapsTheHostWouldEnforceFirst) {
  MakeV2("/");
  WriteFile(paths_.cgroup_v2_root + "/memory.max", "4294967296\n");
  MemoryCapOptions options;
  options.paths = paths_;
  options.force_watchdog = true;
  for (int64_t cap : {int64_t{0}, int64_t{-1}}) {
    options.cap_bytes = cap;
    EXPECT_EQ(NodeMemoryCap::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  }
  options.cap_bytes = int64_t{5} << 30;
  absl::Status over_limit = NodeMemoryCap::Create(options).status();
  EXPECT_EQ(over_limit.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(over_limit.message(),
              HasSubstr("exceeds the limit of this process's cgroup (4.0 GiB"));
  options.cap_bytes = int64_t{17} << 30;
  absl::Status over_total = NodeMemoryCap::Create(options).status();
  EXPECT_EQ(over_total.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(over_total.message(), HasSubstr("exceeds this machine's memory (16.0 GiB)"));
  options.cap_bytes = int64_t{3} << 30;
  EXPECT_TRUE(NodeMemoryCap::Create(options).ok());
}

TEST_F(FakeTreeTest, FallsBackToTheWatchdogAndSaysWhy) {
  WriteFile(paths_.proc_self_cgroup, "0::/\n");
  MemoryCapOptions options;
  options.paths = paths_;
  options.cap_bytes = 256 * kMiB;
  absl::StatusOr<std::unique_ptr<NodeMemoryCap>> node = NodeMemoryCap::Create(options);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)->mechanism(), MemoryCapMechanism::kRssWatchdog);
  EXPECT_EQ((*node)->cgroup_path(), "");
  EXPECT_THAT((*node)->Describe(), StartsWith("RSS watchdog every 10ms, cap 256 MiB (cgroup v2: "));
  EXPECT_THAT((*node)->Describe(), HasSubstr("; cgroup v1: "));
  EXPECT_THAT((*node)->Describe(), HasSubstr("no memory hierarchy mounted at"));
}

TEST(MechanismNameTest, NamesEachMechanism) {
  EXPECT_EQ(MechanismName(MemoryCapMechanism::kCgroupV2), "cgroup v2");
  EXPECT_EQ(MechanismName(MemoryCapMechanism::kCgroupV1), "cgroup v1");
  EXPECT_EQ(MechanismName(MemoryCapMechanism::kRssWatchdog), "RSS watchdog");
}

// ---------------------------------------------------------------------------
// The real mechanisms: a cgroup where this machine lets us create one, and
// the watchdog everywhere. Each case runs on both.

enum class Real { kCgroup, kWatchdog };

class RealCapTest : public ::testing::TestWithParam<Real> {
 protected:
  void SetUp() override {
    if (!Exists(kPython)) GTEST_SKIP() << kPython << " is needed to allocate memory";
    temp_ = MakeTempDir();
  }

  // A node with `cap`, or skips the test if the mechanism is unavailable.
  std::unique_ptr<NodeMemoryCap> MakeNode(int64_t cap, bool scan_all = false) {
    MemoryCapOptions options;
    options.cap_bytes = cap;
    options.name = "memory-cap-test";
    options.force_watchdog = GetParam() == Real::kWatchdog;
    options.watchdog_scan_all_processes = scan_all;
    absl::StatusOr<std::unique_ptr<NodeMemoryCap>> node = NodeMemoryCap::Create(options);
    EXPECT_TRUE(node.ok()) << node.status();
    if (!node.ok()) return nullptr;
    if (GetParam() == Real::kCgroup && (*node)->mechanism() == MemoryCapMechanism::kRssWatchdog) {
      skip_reason_ = absl::StrCat("no writable memory cgroup here (run as root where ",
                                  "/sys/fs/cgroup is writable): ", (*node)->Describe());
      return nullptr;
    }
    return std::move(*node);
  }

  std::string Path(const std::string& name) const { return absl::StrCat(temp_, "/", name); }

  std::string temp_;
  std::string skip_reason_;
};

#define MAKE_NODE_OR_SKIP(node, ...)                           \
  std::unique_ptr<NodeMemoryCap> node = MakeNode(__VA_ARGS__); \
  if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;     \
  ASSERT_NE(node, nullptr)

TEST_P(RealCapTest, TaskOverTheCapIsKilledAndSaysSo) {
  MAKE_NODE_OR_SKIP(node, 256 * kMiB);
  // A small task of the same node, running throughout, is not the one killed.
  TaskRun bystander;
  std::thread bystander_thread(
      [&] { bystander = RunTask(*node, Allocate(16, Path("bystander"), Path("release"))); });
  if (!AwaitFile(Path("bystander"))) {
    WriteFile(Path("release"), "");
    bystander_thread.join();
    FAIL() << "the bystander did not start: " << bystander.attached;
  }

  // Held 30 s unless killed: killed, it ends long before (20 s leaves a
  // loaded machine room).
  absl::Time start = absl::Now();
  TaskRun hog = RunTask(*node, Allocate(512, "", "", absl::Seconds(30)));
  absl::Duration took = absl::Now() - start;
  WriteFile(Path("release"), "");
  bystander_thread.join();

  ASSERT_TRUE(hog.attached.ok()) << hog.attached;
  ASSERT_TRUE(hog.result.ok()) << hog.result.status();
  EXPECT_EQ(hog.result->term_signal, SIGKILL) << DescribeTermination(*hog.result);
  EXPECT_LT(took, absl::Seconds(20));
  ASSERT_TRUE(hog.usage.ok()) << hog.usage.status();
  EXPECT_TRUE(hog.usage->killed_for_memory);
  // Near the cap: cgroups stop it at the cap, the watchdog within a sample.
  EXPECT_THAT(hog.usage->peak_bytes, AllOf(Ge(200 * kMiB), Le(400 * kMiB))) << node->Describe();

  ASSERT_TRUE(bystander.result.ok()) << bystander.result.status();
  EXPECT_EQ(bystander.result->exit_code, 0) << DescribeTermination(*bystander.result);
  ASSERT_TRUE(bystander.usage.ok()) << bystander.usage.status();
  EXPECT_FALSE(bystander.usage->killed_for_memory);
}

TEST_P(RealCapTest, TaskUnderTheCapRunsAndReportsItsPeak) {
  MAKE_NODE_OR_SKIP(node, 256 * kMiB);
  // Held until the node has counted it, however long a loaded machine keeps
  // the watchdog from sampling.
  TaskRun run;
  std::thread task([&] { run = RunTask(*node, Allocate(64, Path("ready"), Path("release"))); });
  const bool counted = AwaitFile(Path("ready")) && AwaitCurrentBytes(*node, 64 * kMiB);
  WriteFile(Path("release"), "");
  task.join();
  EXPECT_TRUE(counted) << node->Describe();
  ASSERT_TRUE(run.attached.ok()) << run.attached;
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_EQ(run.result->exit_code, 0)
      << DescribeTermination(*run.result) << run.result->stderr_text;
  ASSERT_TRUE(run.usage.ok()) << run.usage.status();
  EXPECT_FALSE(run.usage->killed_for_memory);
  EXPECT_THAT(run.usage->peak_bytes, AllOf(Ge(64 * kMiB), Lt(128 * kMiB)));
}

TEST_P(RealCapTest, ConcurrentTasksHaveTheirOwnPeaks) {
  MAKE_NODE_OR_SKIP(node, 512 * kMiB);
  TaskRun small;
  TaskRun large;
  std::thread small_thread(
      [&] { small = RunTask(*node, Allocate(32, Path("small"), Path("release"))); });
  std::thread large_thread(
      [&] { large = RunTask(*node, Allocate(160, Path("large"), Path("release"))); });
  // Both held until the node has counted both.
  bool ready =
      AwaitFile(Path("small")) && AwaitFile(Path("large")) && AwaitCurrentBytes(*node, 192 * kMiB);
  WriteFile(Path("release"), "");
  small_thread.join();
  large_thread.join();
  ASSERT_TRUE(ready);
  ASSERT_TRUE(small.usage.ok()) << small.usage.status();
  ASSERT_TRUE(large.usage.ok()) << large.usage.status();
  EXPECT_EQ(small.result->exit_code, 0);
  EXPECT_EQ(large.result->exit_code, 0);
  EXPECT_THAT(small.usage->peak_bytes, AllOf(Ge(32 * kMiB), Lt(96 * kMiB)));
  EXPECT_THAT(large.usage->peak_bytes, AllOf(Ge(160 * kMiB), Lt(224 * kMiB)));
}

TEST_P(RealCapTest, TheTaskFurthestAboveItsReservationIsKilled) {
  MAKE_NODE_OR_SKIP(node, 256 * kMiB);
  // `steady` reserved 200 MiB and holds 140; `grower` reserved 16 and grows
  // to 160. Without reservations the kernel would pick the larger, steady
  // task at the moment the node runs out.
  TaskRun steady;
  std::thread steady_thread(
      [&] { steady = RunTask(*node, Allocate(140, Path("steady"), Path("release")), 200 * kMiB); });
  if (!AwaitFile(Path("steady"))) {
    WriteFile(Path("release"), "");
    steady_thread.join();
    FAIL() << "the steady task did not start: " << steady.attached;
  }
  TaskRun grower = RunTask(*node, Allocate(160, "", "", absl::Seconds(5)), 16 * kMiB);
  WriteFile(Path("release"), "");
  steady_thread.join();
  ASSERT_TRUE(grower.usage.ok()) << grower.usage.status();
  EXPECT_TRUE(grower.usage->killed_for_memory);
  EXPECT_EQ(grower.result->term_signal, SIGKILL);
  ASSERT_TRUE(steady.usage.ok()) << steady.usage.status();
  EXPECT_FALSE(steady.usage->killed_for_memory);
  EXPECT_EQ(steady.result->exit_code, 0) << DescribeTermination(*steady.result);
}

TEST_P(RealCapTest, KillsTheWholeProcessTree) {
  for (bool scan_all : {false, true}) {
    SCOPED_TRACE(scan_all ? "scanning all of /proc" : "following children");
    MAKE_NODE_OR_SKIP(node, 256 * kMiB, scan_all);
    // The memory is in a grandchild; the shell waits for it.
    std::vector<std::string> python = Allocate(512, "", "", absl::Seconds(5));
    std::string script = absl::StrCat(python[0], " -c \"$1\" & wait; echo survived; exit 3");
    TaskRun run = RunTask(*node, {"sh", "-c", script, "sh", python[2]});
    ASSERT_TRUE(run.result.ok()) << run.result.status();
    ASSERT_TRUE(run.usage.ok()) << run.usage.status();
    EXPECT_TRUE(run.usage->killed_for_memory);
    if (node->mechanism() == MemoryCapMechanism::kCgroupV1) {
      // v1 has no memory.oom.group: the kernel kills the largest process,
      // and the shell goes on (as nvcc reports a killed cicc).
      EXPECT_EQ(run.result->stdout_text, "survived\n");
      EXPECT_EQ(run.result->exit_code, 3);
    } else {
      // The watchdog and v2's memory.oom.group kill the whole task.
      EXPECT_EQ(run.result->stdout_text, "");
      EXPECT_EQ(run.result->term_signal, SIGKILL);
    }
  }
}

TEST_P(RealCapTest, FailedAttachKillsTheProcessAndFinishSaysWhy) {
  MAKE_NODE_OR_SKIP(node, 256 * kMiB);
  absl::StatusOr<std::unique_ptr<TaskMemoryScope>> scope = node->StartTask("t", 0);
  ASSERT_TRUE(scope.ok()) << scope.status();
  // A pid that does not exist (above pid_max's largest possible value).
  absl::Status attached = (*scope)->Attach(1 << 23);
  EXPECT_FALSE(attached.ok());
  EXPECT_EQ((*scope)->Finish().status(), attached);
}

TEST_P(RealCapTest, GroupsAreRemovedAfterUse) {
  if (GetParam() == Real::kWatchdog) GTEST_SKIP() << "the watchdog creates no groups";
  std::string node_dir;
  std::string task_dir;
  {
    MAKE_NODE_OR_SKIP(node, 256 * kMiB);
    node_dir = node->cgroup_path();
    EXPECT_THAT(node->Describe(),
                AllOf(StartsWith(absl::StrCat(MechanismName(node->mechanism()), " at ", node_dir)),
                      HasSubstr(", cap 256 MiB")));
    EXPECT_THAT(node_dir, HasSubstr(absl::StrCat("/distcc-cuda-", getpid(), "-memory-cap-test")));
    TaskRun run = RunTask(*node, {"true"}, 0, &task_dir);
    ASSERT_TRUE(run.usage.ok()) << run.usage.status();
    EXPECT_THAT(task_dir, StartsWith(node_dir + "/task-"));
    EXPECT_THAT(task_dir, HasSubstr("unit_a_b"));  // sanitised task id
    EXPECT_FALSE(Exists(task_dir));
    EXPECT_TRUE(Exists(node_dir));
  }
  EXPECT_FALSE(Exists(node_dir));
}

TEST_P(RealCapTest, RemovesStaleGroupsOfDeadWorkersOnly) {
  if (GetParam() == Real::kWatchdog) GTEST_SKIP() << "the watchdog creates no groups";
  std::string parent;
  {
    MAKE_NODE_OR_SKIP(node, 256 * kMiB);
    parent = node->cgroup_path().substr(0, node->cgroup_path().find_last_of('/'));
  }
  // A pid that has just exited: a dead worker's.
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  std::string stale = absl::StrCat(parent, "/distcc-cuda-", dead, "-memory-cap-test");
  std::string other_name = absl::StrCat(parent, "/distcc-cuda-", dead, "-someone-else");
  std::string live = absl::StrCat(parent, "/distcc-cuda-1-memory-cap-test");  // pid 1 lives
  for (const std::string& dir : {stale, stale + "/task-1-x", other_name, live}) {
    ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;
  }
  // A compile the dead worker left running in its task's group.
  pid_t orphan = fork();
  if (orphan == 0) {
    execl("/bin/sleep", "sleep", "30", nullptr);
    _exit(127);
  }
  ASSERT_GT(orphan, 0);
  {
    std::ofstream procs(stale + "/task-1-x/cgroup.procs");
    procs << orphan << std::flush;
    ASSERT_TRUE(procs.good()) << "cannot move the orphan into " << stale << "/task-1-x";
  }
  { MAKE_NODE_OR_SKIP(node, 256 * kMiB); }
  int status = 0;
  EXPECT_EQ(waitpid(orphan, &status, WNOHANG), orphan) << "the orphaned compile still runs";
  if (WIFSIGNALED(status)) EXPECT_EQ(WTERMSIG(status), SIGKILL);
  kill(orphan, SIGKILL);
  waitpid(orphan, nullptr, 0);
  EXPECT_FALSE(Exists(stale));
  EXPECT_TRUE(Exists(other_name));
  EXPECT_TRUE(Exists(live));
  rmdir(other_name.c_str());
  rmdir(live.c_str());
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, RealCapTest, ::testing::Values(Real::kCgroup, Real::kWatchdog),
                         [](const ::testing::TestParamInfo<Real>& info) {
                           return info.param == Real::kCgroup ? "Cgroup" : "Watchdog";
                         });

}  // namespace
}  // namespace distcc_cuda
