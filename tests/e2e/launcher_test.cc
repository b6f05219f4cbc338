// SPDX-License-Identifier: Apache-2.0
// The launcher and `distcc-cuda build -- COMMAND` with the real binaries,
// the real nvcc and real build tools (ninja, CMake, make, PyTorch's
// cpp_extension) against a coordinator and two workers on loopback: to the
// build tool the launcher is nvcc, and every compile ran on a worker.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/files.h"
#include "common/base/host_resources.h"
#include "common/nvcc/fatbin.h"
#include "common/process/subprocess.h"
#include "tests/support/background_process.h"
#include "tests/support/chrome_trace.h"
#include "tests/support/cuda_sources.h"
#include "tests/support/loopback_cluster.h"
#include "tests/support/process_tree.h"
#include "tests/support/test_paths.h"
#include "tests/support/torch_projects.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kHeader = testing::kTwiceHeader;
constexpr char kKernel[] = R"(#include "twice.h"
namespace { __device__ float bias = 1.0f; }
__global__ void Scale(float* x) { x[threadIdx.x] = Twice(x[threadIdx.x]) + bias; }
void Launch(float* x) { Scale<<<1, 32>>>(x); }
)";

// Whether `program` is on PATH.
bool Have(const std::string& program) {
  ProcessSpec which;
  which.argv = {"sh", "-c", "command -v " + program};
  absl::StatusOr<ProcessResult> ran = RunProcess(which);
  return ran.ok() && ran->exit_code == 0;
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nvcc_ = testing::RealNvccPath();
    if (nvcc_.empty()) GTEST_SKIP() << "needs the real nvcc at /usr/local/cuda/bin/nvcc";
    root_ = testing::NewTempDir("launcher-");
    auto cluster = testing::LoopbackCluster::Start(root_, nvcc_, {{"l-a"}, {"l-b"}});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    launcher_ = testing::BinaryPath("distcc-cuda");
    proj_ = root_ + "/proj";
    ASSERT_TRUE(WriteFileAtomically(proj_ + "/include/twice.h", kHeader).ok());
    ASSERT_TRUE(WriteFileAtomically(proj_ + "/src/k.cu", kKernel).ok());
    fs::create_directories(proj_ + "/obj");
  }

  // Runs `argv` in `directory` with `environment` added.
  ProcessResult Run(const std::vector<std::string>& argv, const std::string& directory,
                    std::map<std::string, std::string> environment = {}) {
    ProcessSpec spec;
    spec.argv = argv;
    spec.working_directory = directory;
    spec.environment = std::move(environment);
    spec.timeout = absl::Minutes(10);
    return testing::RunToEnd(spec);
  }

  // `distcc-cuda build --coordinator ADDRESS -- COMMAND...` in `directory`.
  ProcessResult Session(const std::vector<std::string>& command, const std::string& directory,
                        std::map<std::string, std::string> environment = {},
                        const std::vector<std::string>& flags = {}) {
    std::vector<std::string> argv = {launcher_,           "build",  "--coordinator",
                                     cluster_->address(), "--nvcc", nvcc_};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("--");
    argv.insert(argv.end(), command.begin(), command.end());
    environment.try_emplace("DISTCC_CUDA_SCAN_CACHE", root_ + "/scan");
    return Run(argv, directory, std::move(environment));
  }

  // The launcher's environment for a cluster it uses directly.
  std::map<std::string, std::string> Direct() {
    return {{"DISTCC_CUDA_COORDINATOR", cluster_->address()},
            {"DISTCC_CUDA_SCAN_CACHE", root_ + "/scan"}};
  }

  std::string nvcc_;
  std::string root_;
  std::string proj_;
  std::string launcher_;
  std::unique_ptr<testing::LoopbackCluster> cluster_;
};

TEST_F(LauncherTest, ACompileRunsOnAWorkerAndWritesNvccsObjectAndDependencyFile) {
  const std::vector<std::string> compile = {"-MD",
                                            "-MF",
                                            "obj/k.d",
                                            "-Iinclude",
                                            "-O3",
                                            "-gencode",
                                            "arch=compute_100,code=[sm_100,compute_100]",
                                            "-Xcompiler=-fPIC",
                                            "-c",
                                            "src/k.cu",
                                            "-o",
                                            "obj/k.o"};
  std::vector<std::string> command = {launcher_, nvcc_};
  command.insert(command.end(), compile.begin(), compile.end());
  // Files written less than 100 ms before a scan are too new for the scan
  // cache to remember.
  absl::SleepFor(absl::Milliseconds(250));
  // At its own path on the worker: the object is byte for byte nvcc's here
  // (relocatable_cache_test covers the canonical root).
  const std::vector<std::string> state = {"--state-dir", root_ + "/client-state",
                                          "--absolute-paths"};
  ProcessResult session = Session(command, proj_, {}, state);
  ASSERT_EQ(session.exit_code, 0) << session.stderr_text;
  EXPECT_THAT(session.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached, 0 failed)"));
  // The session hashed the toolkit (150 MB) once and kept the hashes for
  // the next build, as the plan form does.
  int kept = 0;
  for (const auto& entry : fs::directory_iterator(root_ + "/client-state")) {
    kept += absl::StartsWith(entry.path().filename().string(), "toolchain-") &&
            absl::EndsWith(entry.path().string(), ".hashes");
  }
  EXPECT_EQ(kept, 1);
  EXPECT_THAT(session.stderr_text, HasSubstr("workers   1 (l-"));
  EXPECT_THAT(session.stderr_text, Not(HasSubstr("here ")));
  absl::StatusOr<std::string> remote_object = ReadFile(proj_ + "/obj/k.o");
  absl::StatusOr<std::string> remote_deps = ReadFile(proj_ + "/obj/k.d");
  ASSERT_TRUE(remote_object.ok() && remote_deps.ok());

  // The same command with the real nvcc, in the same place.
  std::vector<std::string> local = {nvcc_};
  local.insert(local.end(), compile.begin(), compile.end());
  ProcessResult here = Run(local, proj_);
  ASSERT_EQ(here.exit_code, 0) << here.stderr_text;
  absl::StatusOr<std::string> local_object = ReadFile(proj_ + "/obj/k.o");
  absl::StatusOr<std::string> local_deps = ReadFile(proj_ + "/obj/k.d");
  ASSERT_TRUE(local_object.ok() && local_deps.ok());
  EXPECT_EQ(*remote_deps, *local_deps) << "the dependency file differs from nvcc's own";
  EXPECT_THAT(*remote_deps, HasSubstr("twice.h"));
  absl::StatusOr<std::string> remote_fatbin = DeviceCodeSections(*remote_object, "remote");
  absl::StatusOr<std::string> local_fatbin = DeviceCodeSections(*local_object, "local");
  ASSERT_TRUE(remote_fatbin.ok() && local_fatbin.ok());
  EXPECT_TRUE(*remote_fatbin == *local_fatbin) << ".nv_fatbin differs from a local nvcc's";

  // Again: the result cache answers, and the object is the same; the scan
  // cache answers the include scan and writes nvcc's dependency file.
  fs::remove(proj_ + "/obj/k.d");
  ProcessResult again = Session(command, proj_, {}, state);
  ASSERT_EQ(again.exit_code, 0) << again.stderr_text;
  EXPECT_THAT(again.stderr_text, HasSubstr("1 on the cluster (0 compiled, 1 cached, 0 failed)"));
  EXPECT_THAT(again.stderr_text,
              HasSubstr("scans     1 include scans unchanged since the last build"));
  EXPECT_EQ(ReadFile(proj_ + "/obj/k.d").value_or("missing"), *local_deps);
  absl::StatusOr<std::string> cached_object = ReadFile(proj_ + "/obj/k.o");
  ASSERT_TRUE(cached_object.ok());
  EXPECT_TRUE(*cached_object == *remote_object);
}

TEST_F(LauncherTest, ACompileErrorIsNvccsOwnOutputAndExitCode) {
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/src/bad.cu",
                                  "__global__ void k(int* x) { *x = undefined_name; }\n")
                  .ok());
  // What the launcher prints, apart from the session's own lines.
  auto captured = [&](const std::string& program, const std::string& name) {
    return absl::StrCat(program, " -O3 -gencode arch=compute_100,code=sm_100 -c src/bad.cu -o ",
                        "obj/bad.o > ", name, ".out 2> ", name, ".err; echo $? > ", name, ".code");
  };
  ProcessResult session = Session({"sh", "-c", captured(launcher_ + " " + nvcc_, "remote")}, proj_);
  ASSERT_EQ(session.exit_code, 0) << session.stderr_text;
  EXPECT_THAT(session.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached, 1 failed)"));
  ProcessResult here = Run({"sh", "-c", captured(nvcc_, "local")}, proj_);
  ASSERT_EQ(here.exit_code, 0);
  for (const char* what : {".out", ".err", ".code"}) {
    absl::StatusOr<std::string> remote = ReadFile(proj_ + "/remote" + what);
    absl::StatusOr<std::string> local = ReadFile(proj_ + "/local" + what);
    ASSERT_TRUE(remote.ok() && local.ok());
    EXPECT_EQ(*remote, *local) << what;
  }
  EXPECT_THAT(*ReadFile(proj_ + "/remote.err"),
              HasSubstr("src/bad.cu(1): error: identifier \"undefined_name\" is undefined"));
  EXPECT_NE(*ReadFile(proj_ + "/remote.code"), "0\n");
  EXPECT_FALSE(fs::exists(proj_ + "/obj/bad.o"));
}

TEST_F(LauncherTest, WhatCannotGoToTheClusterRunsNvccHereAndSaysWhy) {
  std::map<std::string, std::string> verbose = Direct();
  verbose["DISTCC_CUDA_VERBOSE"] = "1";
  // A query: nvcc's own answer.
  ProcessResult version = Run({launcher_, "nvcc", "--version"}, proj_, verbose);
  ProcessResult real_version = Run({nvcc_, "--version"}, proj_);
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.stdout_text, real_version.stdout_text);
  // Bare `nvcc` is the first on PATH: /usr/local/cuda/bin/nvcc, or a
  // wrapper of it that some images put in /usr/local/bin.
  EXPECT_THAT(version.stderr_text, HasSubstr("distcc-cuda: compiling here with /"));
  EXPECT_THAT(version.stderr_text, HasSubstr("/nvcc: nvcc option --version is not allowed"));
  // Preprocessing: byte for byte what nvcc prints.
  ProcessResult preprocessed =
      Run({launcher_, nvcc_, "-E", "-Iinclude", "src/k.cu"}, proj_, verbose);
  ProcessResult real_preprocessed = Run({nvcc_, "-E", "-Iinclude", "src/k.cu"}, proj_);
  EXPECT_EQ(preprocessed.exit_code, 0) << preprocessed.stderr_text;
  EXPECT_EQ(preprocessed.stdout_text, real_preprocessed.stdout_text);
  EXPECT_THAT(preprocessed.stderr_text, HasSubstr("-E is not allowed: it preprocesses"));
  // A compile of host code, then a link: both here.
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/src/main.cpp", "int main() { return 0; }\n").ok());
  ProcessResult host =
      Run({launcher_, nvcc_, "-c", "src/main.cpp", "-o", "obj/main.o"}, proj_, verbose);
  EXPECT_EQ(host.exit_code, 0) << host.stderr_text;
  EXPECT_THAT(host.stderr_text, HasSubstr("src/main.cpp is not a CUDA source (.cu)"));
  ProcessResult link = Run({launcher_, nvcc_, "obj/main.o", "-o", "app"}, proj_, verbose);
  EXPECT_EQ(link.exit_code, 0) << link.stderr_text;
  EXPECT_THAT(link.stderr_text, HasSubstr("not a compile (no -c or -dc)"));
  EXPECT_TRUE(fs::exists(proj_ + "/app"));
  // Without DISTCC_CUDA_VERBOSE: nothing of distcc-cuda's own.
  ProcessResult quiet = Run({launcher_, "nvcc", "--version"}, proj_, Direct());
  EXPECT_EQ(quiet.stderr_text, real_version.stderr_text);
}

TEST_F(LauncherTest, AClusterThatCannotBeReachedIsAnErrorUnlessFallbackIsLocal) {
  const std::string nowhere = absl::StrCat("127.0.0.1:", testing::FreeLoopbackPort());
  const std::vector<std::string> compile = {
      launcher_, nvcc_,      "-Iinclude", "-gencode", "arch=compute_100,code=sm_100",
      "-c",      "src/k.cu", "-o",        "obj/k.o"};
  ProcessResult refused = Run(compile, proj_, {{"DISTCC_CUDA_COORDINATOR", nowhere}});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.stderr_text, HasSubstr("cannot reach the coordinator at " + nowhere));
  EXPECT_THAT(refused.stderr_text, HasSubstr("DISTCC_CUDA_FALLBACK=local"));
  EXPECT_FALSE(fs::exists(proj_ + "/obj/k.o"));
  ProcessResult fell_back = Run(compile, proj_,
                                {{"DISTCC_CUDA_COORDINATOR", nowhere},
                                 {"DISTCC_CUDA_FALLBACK", "local"},
                                 {"DISTCC_CUDA_VERBOSE", "1"}});
  EXPECT_EQ(fell_back.exit_code, 0) << fell_back.stderr_text;
  EXPECT_THAT(fell_back.stderr_text, HasSubstr("the cluster failed"));
  EXPECT_TRUE(fs::exists(proj_ + "/obj/k.o"));
}

// Samples this machine's processes while a build runs: how many nvcc front
// ends ran here at once, and whether any cicc ran outside the workers.
class LocalCompilerWatch {
 public:
  explicit LocalCompilerWatch(std::vector<pid_t> workers)
      : workers_(std::move(workers)), thread_([this] { Watch(); }) {}
  ~LocalCompilerWatch() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int most_local_nvcc() const { return most_local_nvcc_; }
  int remote_cicc_seen() const { return remote_cicc_; }
  const std::set<std::string>& local_cicc() const { return local_cicc_; }

 private:
  // Whether `pid` runs under one of the workers, judged by its own chain of
  // parents at the moment (a snapshot of the workers' trees races new
  // processes).
  // Unknown (nullopt) when it ended after the listing: /proc no longer says
  // whose it was.
  std::optional<bool> OnWorker(pid_t pid) const {
    std::vector<testing::ProcessId> chain = testing::AncestorsOf(pid);
    if (chain.empty() && !fs::exists(absl::StrCat("/proc/", pid))) return std::nullopt;
    for (const testing::ProcessId& parent : chain) {
      if (std::find(workers_.begin(), workers_.end(), parent.pid) != workers_.end()) return true;
    }
    return false;
  }

  // Whether `pid` descends from this test's process.
  static bool OfThisTest(pid_t pid) {
    for (const testing::ProcessId& parent : testing::AncestorsOf(pid)) {
      if (parent.pid == getpid()) return true;
    }
    return false;
  }

  void Watch() {
    while (!stop_) {
      int local_nvcc = 0;
      for (const testing::ProcessId& p : testing::DescendantsOf(1)) {
        if (p.command != "nvcc" && p.command != "cicc") continue;
        const std::optional<bool> known = OnWorker(p.pid);
        if (!known.has_value()) continue;
        const bool on_worker = *known;
        // Only this test's: ctest runs other tests' nvcc beside it.
        if (p.command == "nvcc" && !on_worker && OfThisTest(p.pid)) ++local_nvcc;
        if (p.command == "cicc" && on_worker) ++remote_cicc_;
        if (p.command == "cicc" && !on_worker && OfThisTest(p.pid)) {
          absl::StatusOr<std::string> line = ReadFile(absl::StrCat("/proc/", p.pid, "/cmdline"));
          std::string parents;
          for (const testing::ProcessId& q : testing::AncestorsOf(p.pid)) {
            absl::StrAppend(&parents, " <- ", q.command, " (", q.pid, ")");
          }
          local_cicc_.insert(
              absl::StrCat(p.pid, parents, ": ", line.ok() ? line->substr(0, 200) : "?"));
        }
      }
      most_local_nvcc_ = std::max(most_local_nvcc_.load(), local_nvcc);
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }

  std::vector<pid_t> workers_;
  std::atomic<bool> stop_{false};
  std::atomic<int> most_local_nvcc_{0};
  std::atomic<int> remote_cicc_{0};
  std::set<std::string> local_cicc_;
  std::thread thread_;
};

TEST_F(LauncherTest, ACMakeProjectBuildsThroughTheLauncherWithNoCiccHere) {
  if (!Have("cmake") || !Have("ninja")) GTEST_SKIP() << "needs cmake and ninja on PATH";
  const int units = 6;
  std::string sources;
  for (int i = 0; i < units; ++i) {
    ASSERT_TRUE(
        WriteFileAtomically(absl::StrCat(proj_, "/cm/k", i, ".cu"),
                            absl::StrCat("#include \"twice.h\"\n__global__ void K", i,
                                         "(float* x) { x[0] = Twice(x[0]) + ", i, "; }\nvoid Run",
                                         i, "(float* x) { K", i, "<<<1, 1>>>(x); }\n"))
            .ok());
    absl::StrAppend(&sources, " k", i, ".cu");
  }
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/cm/main.cpp", "int main() { return 0; }\n").ok());
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/cm/CMakeLists.txt",
                                  absl::StrCat("cmake_minimum_required(VERSION 3.18)\n"
                                               "project(x LANGUAGES CXX CUDA)\n"
                                               "add_library(kernels SHARED",
                                               sources,
                                               ")\n"
                                               "target_include_directories(kernels PRIVATE "
                                               "${CMAKE_SOURCE_DIR}/../include)\n"
                                               "add_executable(app main.cpp)\n"
                                               "target_link_libraries(app kernels)\n"))
                  .ok());
  // Configured as a user would, once, with the launcher named.
  ProcessResult configure =
      Run({"cmake", "-S", "cm", "-B", "cm/build", "-G", "Ninja", "-DCMAKE_CUDA_COMPILER=" + nvcc_,
           "-DCMAKE_CUDA_ARCHITECTURES=100", "-DCMAKE_CUDA_COMPILER_LAUNCHER=" + launcher_},
          proj_);
  ASSERT_EQ(configure.exit_code, 0) << configure.stdout_text << configure.stderr_text;
  std::vector<pid_t> workers;
  for (auto& worker : cluster_->workers()) workers.push_back(worker->pid());
  LocalCompilerWatch watch(workers);
  ProcessResult build =
      Session({"ninja", "-C", "cm/build", "-j", "64"}, proj_, std::map<std::string, std::string>(),
              {"--trace", root_ + "/trace.json"});
  watch.Stop();
  ASSERT_EQ(build.exit_code, 0) << build.stdout_text << build.stderr_text;
  // The timeline: each unit scanned here, compiled on a worker's one slot.
  absl::StatusOr<std::vector<testing::TraceSpan>> trace =
      testing::ReadChromeTrace(root_ + "/trace.json");
  ASSERT_TRUE(trace.ok()) << trace.status();
  std::vector<testing::TraceSpan> compiles = testing::SpansOf(*trace, "compile");
  EXPECT_EQ(compiles.size(), static_cast<size_t>(units));
  for (const testing::TraceSpan& span : compiles) {
    EXPECT_THAT(span.place, ::testing::StartsWith("worker l-"));
    EXPECT_EQ(span.track, 0) << span.name << " on a second track of one-slot " << span.place;
    EXPECT_TRUE(span.args.count("peak memory")) << span.name;
  }
  EXPECT_EQ(testing::SpansOf(*trace, "scan").size(), static_cast<size_t>(units));
  EXPECT_EQ(testing::SpansOf(*trace, "download").size(), static_cast<size_t>(units));
  EXPECT_THAT(build.stderr_text,
              HasSubstr(absl::StrCat(units, " on the cluster (", units, " compiled")));
  EXPECT_TRUE(fs::exists(proj_ + "/cm/build/app"));
  EXPECT_TRUE(fs::exists(proj_ + "/cm/build/libkernels.so"));
  EXPECT_TRUE(watch.local_cicc().empty())
      << "cicc ran on this machine: " << absl::StrJoin(watch.local_cicc(), ", ");
  EXPECT_GT(watch.remote_cicc_seen(), 0) << "the watch never saw the workers compile";
  // Local nvcc front ends: the include scans, at most one per core. One
  // pass over /proc is not an instant: a scan that ends while the pass runs
  // and the one that starts after it can both be counted.
  EXPECT_LE(watch.most_local_nvcc(), UsableCores() + 1);
  std::cout << "ninja -j 64 on 2 one-slot workers: at most " << watch.most_local_nvcc()
            << " nvcc front ends here at once, no cicc here" << std::endl;
}

TEST_F(LauncherTest, AMakefileBuildUsesTheLauncherThroughNvccVariable) {
  if (!Have("make")) GTEST_SKIP() << "needs make on PATH";
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/Makefile",
                                  "NVCC ?= nvcc\n"
                                  "obj/k.o: src/k.cu\n"
                                  "\t$(NVCC) -Iinclude -gencode arch=compute_100,code=sm_100 "
                                  "-c src/k.cu -o obj/k.o\n")
                  .ok());
  // Bare `nvcc` found on PATH is a wrapper script, as some images have in
  // /usr/local/bin: its units must still match the workers' toolkit.
  testing::WriteNvccWrapper(root_ + "/wrapper-bin/nvcc", nvcc_);
  const char* path = getenv("PATH");
  ProcessResult build =
      Session({"sh", "-c", "make -j64 NVCC=\"$CMAKE_CUDA_COMPILER_LAUNCHER nvcc\""}, proj_,
              {{"PATH", absl::StrCat(root_, "/wrapper-bin:", path ? path : "/usr/bin:/bin")}});
  ASSERT_EQ(build.exit_code, 0) << build.stdout_text << build.stderr_text;
  EXPECT_THAT(build.stderr_text, HasSubstr("1 on the cluster (1 compiled"));
  EXPECT_TRUE(fs::exists(proj_ + "/obj/k.o"));
}

TEST_F(LauncherTest, CtrlCOfTheCommandLeavesNothingRunningHereOrOnTheWorkers) {
  if (!Have("ninja")) GTEST_SKIP() << "needs ninja on PATH";
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(
        WriteFileAtomically(absl::StrCat(proj_, "/slow/s", i, ".cu"), testing::SlowUnit(60 + i))
            .ok());
  }
  ASSERT_TRUE(WriteFileAtomically(
                  proj_ + "/slow/build.ninja",
                  absl::StrCat("rule nvcc\n  command = $$CMAKE_CUDA_COMPILER_LAUNCHER ", nvcc_,
                               " -MD -MF $out.d -gencode arch=compute_100,code=sm_100 -c $in -o "
                               "$out\n  depfile = $out.d\n  deps = gcc\n",
                               "build s0.o: nvcc s0.cu\nbuild s1.o: nvcc s1.cu\n",
                               "build s2.o: nvcc s2.cu\nbuild s3.o: nvcc s3.cu\n"))
                  .ok());
  // A process group of its own, as a shell's foreground job: Ctrl-C reaches
  // the session, ninja and every launcher.
  auto session = testing::BackgroundProcess::Start(
      {"setsid", launcher_, "build", "--coordinator", cluster_->address(), "--nvcc", nvcc_, "--",
       "ninja", "-C", proj_ + "/slow", "-j", "64"},
      root_ + "/session.log");
  ASSERT_TRUE(session.ok());
  std::vector<pid_t> workers;
  for (auto& worker : cluster_->workers()) workers.push_back(worker->pid());
  auto compilers = [&] {
    std::vector<testing::ProcessId> found;
    for (pid_t worker : workers) {
      for (const testing::ProcessId& p : testing::DescendantsOf(worker)) {
        if (p.command == "cicc" || p.command == "ptxas" || p.command == "nvcc") found.push_back(p);
      }
    }
    return found;
  };
  std::vector<testing::ProcessId> running;
  for (int i = 0; i < 1200 && running.size() < 2; ++i) {
    running = compilers();
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_GE(running.size(), 2u) << "the workers never compiled\n" << (*session)->Log();
  std::vector<testing::ProcessId> here = testing::DescendantsOf((*session)->pid());
  absl::Time interrupted = absl::Now();
  ASSERT_EQ(kill(-(*session)->pid(), SIGINT), 0);
  // The group already has its Ctrl-C: wait for the end without a second
  // one (a second Ctrl-C quits at once, by design).
  absl::StatusOr<int> ended = (*session)->Stop(0, absl::Seconds(20));
  ASSERT_TRUE(ended.ok()) << (*session)->Log();
  std::vector<testing::ProcessId> left = compilers();
  std::vector<testing::ProcessId> left_here = testing::StillRunning(here);
  while ((!left.empty() || !left_here.empty()) && absl::Now() - interrupted < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(20));
    left = compilers();
    left_here = testing::StillRunning(here);
  }
  absl::Duration all_gone = absl::Now() - interrupted;
  EXPECT_TRUE(left.empty()) << testing::Describe(left) << " still compile on the workers";
  EXPECT_TRUE(left_here.empty()) << testing::Describe(left_here) << " outlived the session";
  EXPECT_LT(all_gone, absl::Seconds(5));
  std::cout << "Ctrl-C of `distcc-cuda build -- ninja` to the last compiler gone: "
            << absl::FormatDuration(all_gone) << std::endl;
  EXPECT_TRUE(WIFSIGNALED(*ended) && WTERMSIG(*ended) == SIGINT) << *ended;
  EXPECT_THAT((*session)->Log(), HasSubstr("Ctrl-C: cancelling the build"));
}

// On a terminal (here a pseudo-terminal from script(1)): one status line
// redrawn in place at the bottom, the build tool's own lines and each
// finished unit printed above it.
TEST_F(LauncherTest, OnATerminalOneStatusLineIsRedrawnBelowTheBuildsLines) {
  if (!Have("script") || !Have("make")) GTEST_SKIP() << "needs script (util-linux) and make";
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(
        WriteFileAtomically(absl::StrCat(proj_, "/live/s", i, ".cu"), testing::SlowUnit(3 + i))
            .ok());
  }
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/live/Makefile",
                                  "all: s0.o s1.o\n%.o: %.cu\n\t$(NVCC) -gencode "
                                  "arch=compute_100,code=sm_100 -c $< -o $@\n")
                  .ok());
  const std::string session =
      absl::StrCat(launcher_, " build --coordinator ", cluster_->address(), " --nvcc ", nvcc_,
                   " -- make -j8 NVCC='", launcher_, " nvcc'");
  ProcessResult ran = Run({"script", "-qfec", session, root_ + "/typescript"}, proj_ + "/live",
                          {{"TERM", "xterm"}});
  ASSERT_EQ(ran.exit_code, 0) << ran.stdout_text << ran.stderr_text;
  absl::StatusOr<std::string> screen = ReadFile(root_ + "/typescript");
  ASSERT_TRUE(screen.ok());
  EXPECT_THAT(*screen, HasSubstr("\r\033[Kdistcc-cuda: ")) << "no line redrawn in place";
  EXPECT_THAT(*screen, ::testing::ContainsRegex("distcc-cuda: [0-9]+ done, [0-9]+ compiling, "
                                                "[0-9]+ queued \\| .* of .* reserved \\| [0-9]+s"));
  EXPECT_THAT(*screen, HasSubstr("nvcc -gencode arch=compute_100,code=sm_100 -c s0.cu -o s0.o"))
      << "make's own lines come through";
  EXPECT_THAT(*screen, HasSubstr("[2 done, 0 on the cluster]"));
  EXPECT_THAT(*screen, HasSubstr("2 on the cluster (2 compiled, 0 cached, 0 failed)"));
  // Not a terminal: plain lines, nothing redrawn.
  ProcessResult plain = Session({"make", "-B", "-j8", "NVCC=" + launcher_ + " nvcc"},
                                proj_ + "/live", {{"TERM", "xterm"}});
  ASSERT_EQ(plain.exit_code, 0) << plain.stderr_text;
  EXPECT_THAT(plain.stderr_text, Not(HasSubstr("\033[K")));
  EXPECT_THAT(plain.stderr_text, HasSubstr("2 on the cluster (0 compiled, 2 cached"));
}

// The seeds' trap: a build for sm_100 alone (TORCH_CUDA_ARCH_LIST=10.0) on a
// machine whose GPUs are RTX PRO 6000 Blackwell (sm_120). A fake nvidia-smi
// stands in for the GPUs.
TEST_F(LauncherTest, TargetsNoLocalGpuCanLoadAreWarnedAboutOrRefused) {
  ASSERT_TRUE(WriteFileAtomically(root_ + "/gpus/nvidia-smi",
                                  "#!/bin/sh\necho 'NVIDIA RTX PRO 6000 Blackwell Server Edition, "
                                  "12.0'\n")
                  .ok());
  fs::permissions(root_ + "/gpus/nvidia-smi", fs::perms::owner_all);
  std::map<std::string, std::string> with_gpus = {
      {"PATH", root_ + "/gpus:" + std::string(std::getenv("PATH"))}};
  auto compile = [&](const std::string& code) {
    return std::vector<std::string>{
        launcher_, nvcc_,      "-Iinclude", "-gencode", "arch=compute_100,code=" + code,
        "-c",      "src/k.cu", "-o",        "obj/k.o"};
  };
  ProcessResult warned = Session(compile("sm_100"), proj_, with_gpus);
  ASSERT_EQ(warned.exit_code, 0) << warned.stderr_text;
  EXPECT_THAT(warned.stderr_text,
              HasSubstr("warning: NVIDIA RTX PRO 6000 Blackwell Server Edition (sm_120) cannot "
                        "load what this build makes (sm_100 cubin): add sm_120"));
  EXPECT_THAT(warned.stderr_text, HasSubstr("TORCH_CUDA_ARCH_LIST with 12.0"));
  // PTX of 10.0 is compiled by the driver of a 12.0 GPU: no warning.
  ProcessResult with_ptx = Session(compile("[sm_100,compute_100]"), proj_, with_gpus);
  ASSERT_EQ(with_ptx.exit_code, 0) << with_ptx.stderr_text;
  EXPECT_THAT(with_ptx.stderr_text, Not(HasSubstr("cannot load")));
  // --strict-arch with the GPUs named: the compile is refused, nothing runs.
  fs::remove(proj_ + "/obj/k.o");
  ProcessResult refused = Session(compile("sm_100"), proj_, std::map<std::string, std::string>(),
                                  {"--target-gpus", "sm_120", "--strict-arch"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.stderr_text, HasSubstr("sm_120 cannot load what this build makes"));
  EXPECT_THAT(refused.stderr_text, HasSubstr("--strict-arch: nothing is compiled"));
  EXPECT_THAT(refused.stderr_text, HasSubstr("0 on the cluster"));
  EXPECT_FALSE(fs::exists(proj_ + "/obj/k.o"));
  // A manifest build is refused before anything is scanned or sent.
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/kernels.toml",
                                  "[build]\noutput = \"libk.so\"\narchs = [\"sm_100\"]\n"
                                  "flags = [\"-Iinclude\"]\nsources = [\"src/k.cu\"]\n")
                  .ok());
  ProcessResult manifest =
      Run({launcher_, "build", "kernels.toml", "--coordinator", cluster_->address(), "-o",
           root_ + "/mout", "--nvcc", nvcc_, "--target-gpus", "sm_120", "--strict-arch"},
          proj_);
  EXPECT_EQ(manifest.exit_code, 2);
  EXPECT_THAT(manifest.stderr_text, HasSubstr("unit k: sm_120 cannot load"));
  EXPECT_THAT(manifest.stdout_text, Not(HasSubstr("units on")));
}

// A real PyTorch C++/CUDA extension built by its own setup.py (PyTorch's
// cpp_extension writes build.ninja and runs ninja with MAX_JOBS): every .cu
// and .cpp compiles on a worker, and the module imports.
TEST_F(LauncherTest, APyTorchExtensionBuildsWithItsOwnSetupPyOnTheWorkers) {
  const char* named = std::getenv("DISTCC_TORCH_PYTHON");
  if (named == nullptr || *named == '\0') {
    GTEST_SKIP() << "needs DISTCC_TORCH_PYTHON, a python with torch (scripts/test installs one "
                    "under build/torch-venv; see the reason it printed if it could not)";
  }
  const std::string python = fs::absolute(named).string();
  const std::string ext = proj_ + "/ext";
  ASSERT_TRUE(WriteFileAtomically(ext + "/setup.py", R"(import os
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
here = os.path.dirname(os.path.abspath(__file__))
setup(name="tiny_ext",
      ext_modules=[CUDAExtension("tiny_ext", ["binding.cpp", "scale.cu", "shift.cu"],
                                 include_dirs=[os.path.join(here, "..", "include")],
                                 extra_compile_args={"cxx": ["-O2"],
                                                     "nvcc": ["-O3", "--threads", "2"]})],
      cmdclass={"build_ext": BuildExtension})
)")
                  .ok());
  // The binding uses Python's C API only, so that the test does not spend
  // a minute compiling torch's headers on the host.
  ASSERT_TRUE(WriteFileAtomically(ext + "/binding.cpp",
                                  absl::StrCat("#include <Python.h>\nvoid Scale(float* x, int n);\n"
                                               "void Shift(float* x, int n);\n",
                                               testing::kTinyModule))
                  .ok());
  for (const char* name : {"Scale", "Shift"}) {
    ASSERT_TRUE(
        WriteFileAtomically(
            absl::StrCat(ext, "/", absl::AsciiStrToLower(name), ".cu"),
            absl::StrCat("#include \"twice.h\"\n__global__ void ", name,
                         "Kernel(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] = "
                         "Twice(x[i]); }\nvoid ",
                         name, "(float* x, int n) { ", name, "Kernel<<<1, 256>>>(x, n); }\n"))
            .ok());
  }
  std::map<std::string, std::string> environment = {
      {"TORCH_CUDA_ARCH_LIST", "10.0"},
      {"CUDA_HOME", fs::path(nvcc_).parent_path().parent_path().string()}};
  absl::Time start = absl::Now();
  ProcessResult build = Session({python, "setup.py", "build_ext", "--inplace"}, ext, environment);
  ASSERT_EQ(build.exit_code, 0) << build.stdout_text << build.stderr_text;
  std::cout << "setup.py build_ext through the workers: "
            << absl::FormatDuration(absl::Now() - start) << std::endl;
  // The two .cu files and binding.cpp (CXX is the launcher, named c++).
  EXPECT_THAT(build.stderr_text, HasSubstr("3 on the cluster (3 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(build.stderr_text, ::testing::ContainsRegex("binding.cpp +l-[ab] "));
  // Here: the link, and torch's own questions to $CXX (-v, -dumpversion).
  EXPECT_THAT(build.stderr_text,
              ::testing::ContainsRegex("calls ran their compiler here: [0-9]+ × not a compile"));
  EXPECT_THAT(build.stderr_text, Not(HasSubstr("is not allowed")));
  ProcessResult imported =
      Run({python, "-c", "import torch, tiny_ext; print(tiny_ext.kernels())"}, ext);
  EXPECT_EQ(imported.exit_code, 0) << imported.stderr_text;
  EXPECT_EQ(imported.stdout_text, "2\n");
}

}  // namespace
}  // namespace distcc_cuda
