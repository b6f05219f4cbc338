// SPDX-License-Identifier: Apache-2.0
// A coordinator and two workers in-process on 127.0.0.1:0, building with the
// fake compiler through the same code paths the binaries use.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cluster/embedded_cluster.h"
#include "client/commands.h"
#include "client/stages/build_command.h"
#include "common/base/cancellation.h"
#include "common/base/files.h"
#include "common/nvcc/fatbin.h"
#include "common/nvcc/toolchain.h"
#include "common/process/memory_cap.h"
#include "common/process/subprocess.h"
#include "common/store/cas_client.h"
#include "common/store/cas_store.h"
#include "common/store/digest.h"
#include "coordinator/coordinator.h"
#include "distcc_cuda/v1/build.grpc.pb.h"
#include "tests/support/background_process.h"
#include "tests/support/process_tree.h"
#include "tests/support/test_paths.h"
#include "worker/worker.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kManifest[] = R"(
[build]
output = "libfake.so"
flags = ["-O3"]
sources = ["api.cu"]

[[instantiations]]
name = "kern"
unit = "kern_{dtype}_{size}"
headers = ["kern.cuh"]
text = "template void Kern<{dtype}, {size}>(); // FAKE_SLEEP_MS=150"

[instantiations.axes]
dtype = ["half", "float"]
size = [1, 2, 3, 4]
)";

// How many processes have `argument` among their command-line arguments.
int ProcessesWithArgument(const std::string& argument) {
  int count = 0;
  std::error_code error;
  for (std::filesystem::directory_iterator it("/proc", error), end; !error && it != end;
       it.increment(error)) {
    absl::StatusOr<std::string> cmdline = ReadFile(it->path().string() + "/cmdline");
    if (!cmdline.ok()) continue;
    for (absl::string_view part : absl::StrSplit(*cmdline, '\0')) {
      if (part == argument) ++count;
    }
  }
  return count;
}

// Polls `done` every 20 ms for at most `timeout`; how long it took, or
// nullopt if it never held.
std::optional<absl::Duration> TimeUntil(const std::function<bool()>& done, absl::Duration timeout) {
  absl::Time start = absl::Now();
  while (absl::Now() - start < timeout) {
    if (done()) return absl::Now() - start;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return std::nullopt;
}

// What the sleeping units' names start with: "zzcancelme" and this test
// process's pid, so that their processes can be found and told from those
// of another test that ctest runs beside this one.
std::string SleepingMarker() { return absl::StrCat("zzcancelme", getpid(), "_"); }

// A manifest of `count` units that each sleep a minute in the fake nvcc,
// named SleepingMarker() + N.
std::string SleepingManifest(int count) {
  std::vector<std::string> values;
  for (int i = 0; i < count; ++i) values.push_back(std::to_string(i));
  return absl::StrCat(R"([build]
output = "libslow.so"
flags = ["-O3"]
sources = []

[[instantiations]]
name = "slow"
unit = ")",
                      SleepingMarker(), R"({n}"
headers = ["kern.cuh"]
text = "template void Kern<float, {n}>(); // FAKE_SLEEP_MS=60000"

[instantiations.axes]
n = [)",
                      absl::StrJoin(values, ", "), "]\n");
}

v1::ClusterStatus StatusOf(const std::string& address) {
  auto stub =
      v1::BuildService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ClusterStatus status;
  stub->GetClusterStatus(&context, v1::GetClusterStatusRequest(), &status).ok();
  return status;
}

// Nothing runs or is reserved on any worker.
bool ClusterIsIdle(const std::string& address) {
  v1::ClusterStatus status = StatusOf(address);
  if (status.workers_size() == 0 || status.running_units() != 0) return false;
  for (const v1::WorkerStatus& worker : status.workers()) {
    if (worker.running_tasks() != 0 || worker.reserved_bytes() != 0) return false;
  }
  return true;
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::NewTempDir("cluster-");
    coordinator::CoordinatorOptions options;
    options.state_dir = root_ + "/coordinator";
    options.scheduler.heartbeat_timeout = absl::Seconds(2);
    auto started = coordinator::Coordinator::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(*started);
    for (const char* name : {"worker-a", "worker-b"}) AddWorker(name);
    Write("src/kern.cuh", "#include \"common.h\"\ntemplate <typename T, int N> void Kern() {}\n");
    Write("src/common.h", "// shared\n");
    Write("src/api.cu", "#include \"common.h\"\nint api() { return 1; }\n");
    Write("src/kernels.toml", kManifest);
  }

  worker::WorkerOptions WorkerOptionsFor(const std::string& name) {
    worker::WorkerOptions options;
    options.coordinator_address = coordinator_->address();
    options.name = name;
    options.slots = 1;
    options.memory_cap_bytes = int64_t{4} << 30;
    options.nvcc_path = testing::FakeNvccPath();
    options.work_dir = root_ + "/" + name;
    return options;
  }

  void AddWorker(const std::string& name, const std::string& nvcc = "") {
    worker::WorkerOptions options = WorkerOptionsFor(name);
    if (!nvcc.empty()) options.nvcc_path = nvcc;
    auto started = worker::Worker::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    workers_.push_back(std::move(*started));
  }

  void Write(const std::string& relative, const std::string& content) {
    ASSERT_TRUE(WriteFileAtomically(root_ + "/" + relative, content).ok());
  }

  absl::Status Build(std::string* output, const std::string& address = "",
                     const std::string& nvcc = "", const std::string& required_release = "",
                     const CancelToken* cancel = nullptr,
                     const std::string& plan = "src/kernels.toml") {
    client::BuildOptions options;
    options.plan_path = root_ + "/" + plan;
    options.cancel = cancel;
    options.reconnect_timeout = reconnect_timeout_;
    options.coordinator_address = address.empty() ? coordinator_->address() : address;
    options.output_dir = root_ + "/out";
    options.nvcc_path = nvcc.empty() ? testing::FakeNvccPath() : nvcc;
    options.required_nvcc_release = required_release;
    options.state_dir = root_ + "/embedded";
    std::ostringstream out;
    absl::Status status = client::RunBuild(options, out);
    *output = out.str();
    return status;
  }

  // Builds the compile_commands.json at `plan` (relative to root_) into
  // `output_dir` as libproj.so, with the fake compiler, on this cluster.
  absl::Status BuildCompileCommands(const std::string& plan, const std::string& output_dir,
                                    std::string* output, const std::string& objects_dir = "",
                                    const std::string& link_command = "",
                                    const std::string& state_dir = "") {
    client::BuildOptions options;
    options.plan_path = root_ + "/" + plan;
    options.coordinator_address = coordinator_->address();
    options.output_dir = root_ + "/" + output_dir;
    options.library_name = "libproj.so";
    options.nvcc_path = testing::FakeNvccPath();
    options.objects_dir = objects_dir;
    options.link_command = link_command;
    options.state_dir = state_dir;
    std::ostringstream out;
    absl::Status status = client::RunBuild(options, out);
    *output = out.str();
    return status;
  }

  std::string root_;
  absl::Duration reconnect_timeout_ = absl::Minutes(5);
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::vector<std::unique_ptr<worker::Worker>> workers_;
};

TEST_F(ClusterTest, TwoWorkersBuildTheSetAndTheLibraryIsLinked) {
  std::string out;
  absl::Status status = Build(&out);
  ASSERT_TRUE(status.ok()) << status << "\n" << out;
  EXPECT_THAT(out, HasSubstr("units     9 (9 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(out, HasSubstr("workers   2 (worker-a: "));
  absl::StatusOr<std::string> library = ReadFile(root_ + "/out/libfake.so");
  ASSERT_TRUE(library.ok());
  // Linked as PyTorch's cpp_extension links: the host compiler, the shared
  // CUDA runtime.
  EXPECT_EQ(library->substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_THAT(out, HasSubstr("  link      g++ -shared [9 objects] -L"));
  EXPECT_THAT(out, HasSubstr(" -lcudart -o " + root_ + "/out/libfake.so\n"));
  // Each object was compiled from its generated unit with the header closure.
  absl::StatusOr<std::string> object = ReadFile(root_ + "/out/obj/kern_float_3.o");
  ASSERT_TRUE(object.ok());
  EXPECT_THAT(*object, HasSubstr("template void Kern<float, 3>();"));
  EXPECT_THAT(*object, HasSubstr("// shared"));
  EXPECT_THAT(*object, HasSubstr("-Xcompiler=-fPIC"));
  EXPECT_THAT(*library, HasSubstr("int api()"));
}

TEST_F(ClusterTest, UnchangedRebuildCompilesNothing) {
  std::string out;
  ASSERT_TRUE(Build(&out).ok()) << out;
  ASSERT_TRUE(Build(&out).ok()) << out;
  EXPECT_THAT(out, HasSubstr("units     9 (0 compiled, 9 cached, 0 failed)"));
  // Changing the shared header invalidates every unit that reads it. The
  // set's 8 one-instantiation units were sized from the cold default
  // (2 GiB each on 4 GiB workers); with every one of them missing the
  // cache anyway, the set is grouped again from what the history shows
  // (12 MiB each): 2 per unit (4 units for 2 slots), the 1.5x rule met.
  Write("src/common.h", "// shared, edited\n");
  ASSERT_TRUE(Build(&out).ok()) << out;
  EXPECT_THAT(out, HasSubstr("units     5 (5 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(out, HasSubstr("] kern_4of4 "));
  // The client says so, with the acceptance.
  EXPECT_THAT(out, HasSubstr("\n  set kern: regrouped from 1 to 2 instantiations per unit (4 units "
                             "instead of 8; "));
  // The new grouping is kept: the next unchanged build is all cached.
  ASSERT_TRUE(Build(&out).ok()) << out;
  EXPECT_THAT(out, HasSubstr("units     5 (0 compiled, 5 cached, 0 failed)"));
}

// A project never built before learns from the coordinator's history of
// other projects whose units read about as much: its units are predicted
// from theirs ("similar size"), not from the 2 GiB default; a project of
// much smaller inputs is not.
TEST_F(ClusterTest, AProjectNeverBuiltIsPredictedFromUnitsOfAboutItsInputsSize) {
  // Each project's own names and folders: no unit, folder or headers in
  // common, so nothing but the size can tell.
  auto project = [&](const std::string& name, int header_bytes, const std::string& touch) {
    Write(name + "/include/" + name + ".h", std::string(header_bytes, ' ') + "\n");
    Write(name + "/" + name + ".cu",
          absl::StrCat("#include \"", name, ".h\"\nint f(); // ", touch, "\n"));
    Write(name + "/build-" + name + "/compile_commands.json",
          absl::StrCat(R"([{"directory": ")", root_, "/", name, "/build-", name,
                       R"(", "file": "../)", name, R"(.cu", "command": ")", testing::FakeNvccPath(),
                       " -I../include -c ../", name, ".cu -o ", name, R"(.o"}])"));
    std::string out;
    EXPECT_TRUE(BuildCompileCommands(name + "/build-" + name + "/compile_commands.json",
                                     name + "/build-" + name, &out)
                    .ok())
        << out;
    return out;
  };
  EXPECT_THAT(project("first", 200'000, "FAKE_TOUCH_MIB=300"),
              HasSubstr("(predicted 2.0 GiB, default)"));
  const std::string second = project("second", 220'000, "FAKE_TOUCH_MIB=280");
  EXPECT_THAT(second, HasSubstr(", similar size)")) << "from the first project's unit";
  EXPECT_THAT(second, Not(HasSubstr("(predicted 2.0 GiB, default)")));
  EXPECT_THAT(project("small", 2'000, "FAKE_TOUCH_MIB=20"),
              HasSubstr("(predicted 2.0 GiB, default)"))
      << "a hundred times smaller";
}

TEST_F(ClusterTest, CompileErrorReachesTheUserUnchangedAndOnlyTheFailedUnitIsRebuilt) {
  Write("src/api.cu",
        "#include \"common.h\"\nint api() { FAKE_FAIL(identifier \"x\" is undefined) }\n");
  std::string out;
  absl::Status status = Build(&out);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << out;
  EXPECT_THAT(out, HasSubstr("error: unit api failed on worker"));
  EXPECT_THAT(out, HasSubstr("nvcc exit code 2"));
  EXPECT_THAT(out, HasSubstr("api.cu(2): error: identifier \"x\" is undefined\n"
                             "1 error detected in the compilation of \"api.cu\".\n"));
  EXPECT_THAT(out, HasSubstr("1 of 9 units failed: api"));
  EXPECT_FALSE(IsRegularFile(root_ + "/out/libfake.so"));
  Write("src/api.cu", "#include \"common.h\"\nint api() { return 2; }\n");
  status = Build(&out);
  ASSERT_TRUE(status.ok()) << out;
  EXPECT_THAT(out, HasSubstr("units     9 (1 compiled, 8 cached, 0 failed)"));
}

TEST_F(ClusterTest, MissingHeaderIsNamedAndStopsTheBuild) {
  Write("src/api.cu", "#include \"nowhere.h\"\nint api();\n");
  std::string out;
  absl::Status status = Build(&out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("nowhere.h: No such file or directory"));
  EXPECT_THAT(status.message(), HasSubstr("api.cu"));
}

TEST_F(ClusterTest, UnreachableCoordinatorFailsWithinSecondsNamingTheAddress) {
  std::string out;
  absl::Time start = absl::Now();
  absl::Status status = Build(&out, "127.0.0.1:1");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("127.0.0.1:1"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
}

TEST_F(ClusterTest, CoordinatorStopsPromptlyWithABuildInFlight) {
  Write("src/common.h", "// FAKE_SLEEP_MS=3000\n");
  std::string out;
  // A client that does not wait for the coordinator to come back.
  reconnect_timeout_ = absl::ZeroDuration();
  std::future<absl::Status> build = std::async(std::launch::async, [&] { return Build(&out); });
  // Wait until units run, then stop the coordinator as SIGTERM would.
  std::string address = coordinator_->address();
  bool running = false;
  for (int i = 0; i < 1200 && !running; ++i) {
    std::ostringstream status;
    client::RunStatus(address, absl::Seconds(5), status).IgnoreError();
    running = absl::StrContains(status.str(), "  running ");
    if (!running) absl::SleepFor(absl::Milliseconds(25));
  }
  ASSERT_TRUE(running) << "no unit started";
  std::future<void> stopped = std::async(std::launch::async, [&] { coordinator_.reset(); });
  EXPECT_EQ(stopped.wait_for(std::chrono::seconds(15)), std::future_status::ready)
      << "the coordinator did not stop";
  ASSERT_EQ(build.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  absl::Status status = build.get();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("lost the coordinator at " + address));
  EXPECT_THAT(status.message(), HasSubstr("run the same command again once it is back"));
  stopped.wait();
}

TEST_F(ClusterTest, EmbeddedDefaultBuildsWithoutACluster) {
  client::BuildOptions options;
  options.plan_path = root_ + "/src/kernels.toml";
  options.output_dir = root_ + "/embedded-out";
  options.nvcc_path = testing::FakeNvccPath();
  options.state_dir = root_ + "/embedded";
  options.embedded_slots = 2;
  std::ostringstream out;
  absl::Status status = client::RunBuild(options, out);
  ASSERT_TRUE(status.ok()) << status << out.str();
  EXPECT_THAT(out.str(), HasSubstr("building on this machine (2 slots"));
  EXPECT_TRUE(IsRegularFile(root_ + "/embedded-out/libfake.so"));
  // The coordinator may have grouped the instantiations into fewer units;
  // whatever it chose, it keeps, so nothing compiles again.
  std::ostringstream again;
  status = client::RunBuild(options, again);
  ASSERT_TRUE(status.ok()) << status << again.str();
  EXPECT_THAT(again.str(), HasSubstr(" (0 compiled, "));
}

TEST_F(ClusterTest, CompileCommandsPlanBuildsEachEntryIntoItsOwnObject) {
  Write("proj/include/util.h", "// util\n");
  Write("proj/a.cu", "#include \"util.h\"\nint a();\n");
  Write("proj/sub/b.cu", "#include \"util.h\"\nint b();\n");
  std::string nvcc = testing::FakeNvccPath();
  std::string db =
      absl::StrCat(R"([
    {"directory": ")",
                   root_, R"(/proj/build",
     "file": "../a.cu",
     "arguments": [")",
                   nvcc, R"(", "-I", ")", root_, R"(/proj/include", "-O2", "-MD", "-MT", "a.o",
                   "-MF", "a.o.d", "-c", "../a.cu", "-o", "objs/a.o"]},
    {"directory": ")",
                   root_, R"(/proj/build",
     "file": ")",
                   root_, R"(/proj/sub/b.cu",
     "command": ")",
                   nvcc, " -I../include -O2 -c ", root_, R"(/proj/sub/b.cu -o objs/b.o"}
  ])");
  Write("proj/build/compile_commands.json", db);
  std::string out;
  absl::Status status =
      BuildCompileCommands("proj/build/compile_commands.json", "proj/build", &out);
  ASSERT_TRUE(status.ok()) << status << "\n" << out;
  // Objects go where the build system expects them, compiled with the
  // include folder made relative to the sandbox.
  absl::StatusOr<std::string> a = ReadFile(root_ + "/proj/build/objs/a.o");
  absl::StatusOr<std::string> b = ReadFile(root_ + "/proj/build/objs/b.o");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_THAT(*a, HasSubstr("// util"));
  EXPECT_THAT(*b, HasSubstr("int b();"));
  EXPECT_THAT(*a, Not(HasSubstr(root_))) << "absolute paths were rewritten";
  EXPECT_TRUE(IsRegularFile(root_ + "/proj/build/libproj.so"));
  // Said before anything is written, and again when they exist.
  EXPECT_THAT(out, HasSubstr("distcc-cuda: objects go to each command's own -o, as the build that "
                             "wrote this file would put them (" +
                             root_ + "/proj/build/objs); --objects-dir DIR puts them elsewhere\n"));
  EXPECT_THAT(out, HasSubstr("  link      g++ -shared -Wl,-soname,libproj.so [2 objects]"));

  // --objects-dir leaves the build tree's objects alone; --link-command is
  // the link.
  const std::string before = *a;
  ASSERT_TRUE(WriteFileAtomically(root_ + "/proj/build/objs/a.o", "the build tree's own").ok());
  status = BuildCompileCommands("proj/build/compile_commands.json", "proj/build", &out,
                                root_ + "/elsewhere", "cc -shared -o {output} {objects}");
  ASSERT_TRUE(status.ok()) << status << "\n" << out;
  EXPECT_THAT(out,
              HasSubstr("distcc-cuda: objects go to " + root_ + "/elsewhere (--objects-dir)\n"));
  EXPECT_EQ(*ReadFile(root_ + "/proj/build/objs/a.o"), "the build tree's own");
  EXPECT_EQ(*ReadFile(root_ + "/elsewhere/a.cu.o"), before);
  EXPECT_TRUE(IsRegularFile(root_ + "/elsewhere/b.cu.o"));
  EXPECT_THAT(out, HasSubstr("  link      cc -shared -o " + root_ +
                             "/proj/build/libproj.so [2 objects]\n"));
  status = BuildCompileCommands("proj/build/compile_commands.json", "proj/build", &out);
  ASSERT_TRUE(status.ok()) << status << "\n" << out;
  EXPECT_THAT(out, HasSubstr("(" + root_ +
                             "/proj/build/objs); the 2 there already are replaced as their "
                             "units finish; --objects-dir DIR"));
  status = BuildCompileCommands("proj/build/compile_commands.json", "proj/build", &out, "",
                                "cc -shared -o {output}");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("{objects}"));
}

// A compile_commands.json build of proj/a.cu and proj/z.cu, whose texts
// are `a` and `z`: z's scan (FAKE_SCAN_WAIT_FOR(<root>/a-runs) in its text)
// waits until the test has seen a unit run on a worker, then the file is
// written either way and the build's end awaited.
struct BuildDuringAScan {
  absl::Status status;
  std::string out;
  bool unit_ran_during_scan = false;
};

class ScanOverlapTest : public ClusterTest {
 protected:
  std::string Signal() const { return root_ + "/a-runs"; }

  BuildDuringAScan Run(const std::string& a, const std::string& z) {
    Write("proj/a.cu", a);
    Write("proj/z.cu", z);
    const std::string nvcc = testing::FakeNvccPath();
    Write("proj/build/compile_commands.json",
          absl::StrCat(R"([{"directory": ")", root_,
                       R"(/proj/build", "file": "../a.cu", "command": ")", nvcc,
                       R"( -c ../a.cu -o a.o"},
                          {"directory": ")",
                       root_, R"(/proj/build", "file": "../z.cu", "command": ")", nvcc,
                       R"( -c ../z.cu -o z.o"}])"));
    BuildDuringAScan result;
    std::future<absl::Status> build = std::async(std::launch::async, [&] {
      return BuildCompileCommands("proj/build/compile_commands.json", "proj/build", &result.out, "",
                                  "", root_ + "/client-state");
    });
    // z's scan waits for a-runs: a unit seen running or done before the
    // test writes it ran during that scan (done too, in case a loaded
    // machine kept the test from looking while a ran).
    for (int i = 0; i < 1200 && !result.unit_ran_during_scan; ++i) {
      v1::ClusterStatus status = StatusOf(coordinator_->address());
      result.unit_ran_during_scan = status.running_units() > 0;
      for (const auto& worker : status.workers()) {
        result.unit_ran_during_scan |= worker.tasks_completed() > 0;
      }
      if (!result.unit_ran_during_scan) absl::SleepFor(absl::Milliseconds(25));
    }
    Write("a-runs", "");
    EXPECT_EQ(build.wait_for(std::chrono::seconds(120)), std::future_status::ready);
    result.status = build.get();
    return result;
  }
};

// The plan form sends its units as they are scanned: a unit compiles on a
// worker while a later unit is still being scanned. A client that scanned
// everything before it submitted anything would never start a unit, and
// z's scan would fail after 60 s.
TEST_F(ScanOverlapTest, UnitsCompileWhileLaterUnitsAreStillBeingScanned) {
  BuildDuringAScan build = Run("int a(); // FAKE_SLEEP_MS=1000\n",
                               absl::StrCat("int z(); // FAKE_SCAN_WAIT_FOR(", Signal(), ")\n"));
  ASSERT_TRUE(build.status.ok()) << build.status << "\n" << build.out;
  EXPECT_TRUE(build.unit_ran_during_scan) << "no unit ran while z.cu was being scanned\n"
                                          << build.out;
  EXPECT_THAT(build.out, HasSubstr("; sent in 2 parts as scanned, the first after "));
  EXPECT_THAT(build.out, HasSubstr("units     2 (2 compiled, 0 cached, 0 failed)"));
  EXPECT_TRUE(IsRegularFile(root_ + "/proj/build/a.o"));
  EXPECT_TRUE(IsRegularFile(root_ + "/proj/build/z.o"));
}

// A later unit's check that fails after earlier units went (its closure
// reads a secret of this machine) stops the build with its error.
TEST_F(ScanOverlapTest, AClosureRefusedAfterUnitsWentStopsTheBuildNamingIt) {
  Write("proj/.ssh/key.h", "// never for the cluster\n");
  BuildDuringAScan build = Run(
      "int a(); // FAKE_SLEEP_MS=1000\n",
      absl::StrCat("#include \".ssh/key.h\"\nint z(); // FAKE_SCAN_WAIT_FOR(", Signal(), ")\n"));
  EXPECT_TRUE(build.unit_ran_during_scan) << build.out;
  EXPECT_EQ(build.status.code(), absl::StatusCode::kInvalidArgument) << build.status << "\n"
                                                                     << build.out;
  EXPECT_THAT(build.status.message(), HasSubstr("unit z.cu reads "));
  EXPECT_THAT(build.status.message(), HasSubstr(".ssh/key.h, a file in a private folder"));
  EXPECT_THAT(build.out, HasSubstr("distcc-cuda: the build stopped: unit z.cu reads "));
  EXPECT_FALSE(IsRegularFile(root_ + "/proj/build/libproj.so"));
  // The coordinator dropped the build when its client went.
  for (int i = 0; i < 1200 && StatusOf(coordinator_->address()).active_builds() > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(25));
  }
  EXPECT_EQ(StatusOf(coordinator_->address()).active_builds(), 0);
}

// A part is checked as a whole build is, and refused whole: a unit that
// writes outside its folder, one that makes nvcc read a private file of the
// worker, and a part that takes the build past --max-units-per-build add
// nothing; the build goes on with the parts that passed, and ends after
// its last.
TEST(BuildInPartsTest, AHostileOrOversizedPartIsRefusedWholeAndTheBuildGoesOn) {
  const std::string root = testing::NewTempDir("parts-");
  coordinator::CoordinatorOptions options;
  options.state_dir = root + "/coordinator";
  options.limits.max_units = 3;
  auto coordinator = coordinator::Coordinator::Start(options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  worker::WorkerOptions worker_options;
  worker_options.coordinator_address = (*coordinator)->address();
  worker_options.name = "parts-worker";
  worker_options.slots = 2;
  worker_options.memory_cap_bytes = int64_t{4} << 30;
  worker_options.nvcc_path = testing::FakeNvccPath();
  worker_options.work_dir = root + "/worker";
  worker_options.sandbox = false;
  auto worker = worker::Worker::Start(worker_options);
  ASSERT_TRUE(worker.ok()) << worker.status();
  absl::StatusOr<v1::ToolchainFingerprint> toolchain =
      ComputeToolchainFingerprint(testing::FakeNvccPath());
  ASSERT_TRUE(toolchain.ok()) << toolchain.status();

  auto channel = grpc::CreateChannel((*coordinator)->address(), grpc::InsecureChannelCredentials());
  CasClient cas(v1::ContentStore::NewStub(channel));
  const std::string source = "int f();\n";
  const Digest digest = DigestOf(source);
  ASSERT_TRUE(cas.UploadMissing({BlobSource{digest, "", source}}).ok());
  auto unit = [&](const std::string& name, std::vector<std::string> extra = {},
                  const std::string& output = "") {
    v1::CompileUnit made;
    made.set_name(name);
    for (const std::string& argument : extra) made.add_arguments(argument);
    const std::string object = output.empty() ? name + ".o" : output;
    for (const std::string& argument :
         {std::string("-c"), name + ".cu", std::string("-o"), object}) {
      made.add_arguments(argument);
    }
    made.add_output_paths(object);
    v1::InputFile* input = made.add_inputs();
    input->set_path(name + ".cu");
    *input->mutable_digest() = ToProto(digest);
    return made;
  };
  auto stub = v1::BuildService::NewStub(channel);
  grpc::ClientContext stream_context;
  v1::SubmitBuildRequest open;
  open.set_build_name("in parts");
  *open.mutable_toolchain() = *toolchain;
  open.set_more_units_follow(true);
  // How many entries are to come is checked like any other count.
  for (int bad : {-1, 4}) {
    grpc::ClientContext bad_context;
    v1::SubmitBuildRequest hostile = open;
    hostile.set_entries_expected(bad);
    auto refused = stub->SubmitBuild(&bad_context, hostile);
    v1::BuildEvent none;
    EXPECT_FALSE(refused->Read(&none)) << none.DebugString();
    grpc::Status why = refused->Finish();
    EXPECT_EQ(why.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << why.error_message();
    EXPECT_THAT(why.error_message(), HasSubstr("entries_expected"));
  }
  open.set_entries_expected(3);
  auto reader = stub->SubmitBuild(&stream_context, open);
  v1::BuildEvent event;
  ASSERT_TRUE(reader->Read(&event));
  ASSERT_TRUE(event.has_accepted()) << event.DebugString();
  const std::string build_id = event.accepted().build_id();
  auto add = [&](std::vector<v1::CompileUnit> units, bool last) {
    v1::AddUnitsRequest part;
    part.set_build_id(build_id);
    part.set_workspace_root(root + "/src");
    for (v1::CompileUnit& made : units) *part.add_units() = std::move(made);
    part.set_last(last);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::AddUnitsResponse response;
    return stub->AddUnits(&context, part, &response);
  };
  grpc::Status status = add({unit("u1"), unit("u2")}, false);
  ASSERT_TRUE(status.ok()) << status.error_message();
  status = add({unit("u3"), unit("evil", {}, "/etc/evil.o")}, false);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  status = add({unit("u3", {"--options-file=/etc/shadow"})}, false);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  status = add({unit("u3"), unit("u4")}, false);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("--max-units-per-build"));
  status = add({}, true);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::set<std::string> finished;
  std::vector<std::string> added;
  bool ended = false;
  while (reader->Read(&event)) {
    if (event.has_units_added()) {
      for (const std::string& name : event.units_added().unit_names()) added.push_back(name);
    } else if (event.has_unit_finished()) {
      finished.insert(event.unit_finished().unit_name());
      EXPECT_EQ(event.unit_finished().result().exit_code(), 0)
          << event.unit_finished().result().stderr_text();
    } else if (event.has_finished()) {
      ended = true;
      EXPECT_TRUE(event.finished().success());
      EXPECT_EQ(event.finished().units_total(), 2);
    }
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_TRUE(ended);
  EXPECT_THAT(added, ::testing::ElementsAre("u1", "u2")) << "nothing of a refused part";
  EXPECT_EQ(finished, (std::set<std::string>{"u1", "u2"}));
}

// A coordinator of a release before builds in parts ends an opened build
// at once (it has no units) and knows no AddUnits: the client says so
// instead of linking nothing.
class OlderBuildService final : public v1::BuildService::Service {
 public:
  grpc::Status SubmitBuild(grpc::ServerContext*, const v1::SubmitBuildRequest*,
                           grpc::ServerWriter<v1::BuildEvent>* writer) override {
    v1::BuildEvent accepted;
    accepted.mutable_accepted()->set_build_id("b-older");
    accepted.mutable_accepted()->set_eligible_workers(1);
    writer->Write(accepted);
    v1::BuildEvent finished;
    finished.mutable_finished()->set_success(true);
    finished.mutable_finished()->set_message("nothing to build");
    writer->Write(finished);
    return grpc::Status::OK;
  }
};

// A coordinator slow to accept a build: a scan that fails while the build
// is being opened ends it at once (the stream that opens it is cancelled),
// with the scan's error, instead of waiting for the coordinator.
class SlowToAcceptBuildService final : public v1::BuildService::Service {
 public:
  grpc::Status SubmitBuild(grpc::ServerContext* context, const v1::SubmitBuildRequest*,
                           grpc::ServerWriter<v1::BuildEvent>* writer) override {
    absl::SleepFor(absl::Milliseconds(500));
    v1::BuildEvent accepted;
    accepted.mutable_accepted()->set_build_id("b-slow");
    accepted.mutable_accepted()->set_eligible_workers(1);
    writer->Write(accepted);
    for (int i = 0; i < 3000 && !context->IsCancelled(); ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
  }
};

TEST_F(ClusterTest, AScanThatFailsBeforeTheBuildIsOpenEndsItAtOnce) {
  Write("src/api.cu", "#include \"nowhere.h\"\nint api();\n");
  SlowToAcceptBuildService slow;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&slow);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  std::string out;
  const absl::Time start = absl::Now();
  absl::Status status = Build(&out, absl::StrCat("127.0.0.1:", port));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status << "\n" << out;
  EXPECT_THAT(status.message(), HasSubstr("nowhere.h"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "the build waited for its stream to end";
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

TEST_F(ClusterTest, APlanBuildOnACoordinatorThatTakesNoPartsSaysToUpdateIt) {
  OlderBuildService older;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&older);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  std::string out;
  absl::Status status = Build(&out, address);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status << "\n" << out;
  EXPECT_THAT(status.message(),
              HasSubstr("the coordinator at " + address + " does not take a build in parts"));
  EXPECT_FALSE(IsRegularFile(root_ + "/out/libfake.so"));
  server->Shutdown();
}

// ccache's direct mode for include scans: a rebuild with nothing changed
// runs no nvcc -M; an edited header is scanned again.
TEST_F(ClusterTest, ANoOpRebuildAnswersEveryScanFromTheScanCache) {
  const std::string log = root_ + "/fake_nvcc.log";
  setenv("FAKE_NVCC_LOG", log.c_str(), 1);
  Write("proj/include/util.h", "// util\n");
  Write("proj/a.cu", "#include \"util.h\"\nint a();\n");
  Write("proj/b.cu", "#include \"util.h\"\nint b();\n");
  const std::string nvcc = testing::FakeNvccPath();
  Write(
      "proj/build/compile_commands.json",
      absl::StrCat(R"([{"directory": ")", root_, R"(/proj/build", "file": "../a.cu", "command": ")",
                   nvcc, R"( -I../include -c ../a.cu -o a.o"},
                      {"directory": ")",
                   root_, R"(/proj/build", "file": "../b.cu", "command": ")", nvcc,
                   R"( -I../include -c ../b.cu -o b.o"}])"));
  auto scans = [&] {
    int count = 0;
    for (absl::string_view line : absl::StrSplit(ReadFile(log).value_or(""), '\n')) {
      if (absl::StrContains(line, " -M ")) ++count;
    }
    return count;
  };
  // Files written less than 100 ms before a scan are too new to remember.
  absl::SleepFor(absl::Milliseconds(250));
  const std::string state = root_ + "/client-state";
  std::string out;
  ASSERT_TRUE(
      BuildCompileCommands("proj/build/compile_commands.json", "proj/build", &out, "", "", state)
          .ok())
      << out;
  EXPECT_EQ(scans(), 2);
  EXPECT_THAT(out, Not(HasSubstr("from the scan cache")));

  ASSERT_TRUE(
      BuildCompileCommands("proj/build/compile_commands.json", "proj/build", &out, "", "", state)
          .ok())
      << out;
  EXPECT_EQ(scans(), 2) << "nvcc -M ran although nothing changed";
  EXPECT_THAT(out, HasSubstr("(2 of 2 scans unchanged since the last build, from the scan cache)"));
  EXPECT_THAT(out, HasSubstr(" (0 compiled, 2 cached"));

  Write("proj/include/util.h", "// util, edited\n");
  ASSERT_TRUE(
      BuildCompileCommands("proj/build/compile_commands.json", "proj/build", &out, "", "", state)
          .ok())
      << out;
  EXPECT_EQ(scans(), 4) << "an edited header must be scanned again";
  EXPECT_THAT(*ReadFile(root_ + "/proj/build/a.o"), HasSubstr("// util, edited"));
  unsetenv("FAKE_NVCC_LOG");
}

// A CUTLASS-like build: every unit includes the same large header closure.
// Listed per unit, 32 units of 900 headers with CUTLASS-length names are
// about 9 MB of file names
// and digests, over the 8 MiB a coordinator takes in one message; as input
// trees the shared folders are described once, in the CAS, and each unit
// sends only its root digest.
TEST_F(ClusterTest, UnitsSharingThousandsOfHeadersFitOneSubmission) {
  constexpr int kHeaders = 900;
  constexpr int kUnits = 32;
  std::string all;
  int64_t listed_bytes = 0;  // what the closure costs each unit as a list
  for (int i = 0; i < kHeaders; ++i) {
    std::string name = absl::StrFormat(
        "cute/arch/detail/folder_%02d/"
        "cutlass3x_sm100_tensorop_gemm_f16_f16_f32_void_f16_128x256x64_2x1x1_0_tnn_align8_2sm_"
        "warpspecialized_cooperative_epilogue_tma_with_a_header_named_as_long_as_the_"
        "generator_writes_them_%04d.hpp",
        i % 40, i);
    std::string text = absl::StrFormat("// h%d\n", i);
    Write("proj/include/" + name, text);
    absl::StrAppend(&all, "#include \"", name, "\"\n");
    v1::InputFile input;
    input.set_path("include/" + name);
    *input.mutable_digest() = ToProto(DigestOf(text));
    listed_bytes += input.ByteSizeLong() + 3;
  }
  ASSERT_GT(listed_bytes * kUnits, kMaxMessageBytes);
  Write("proj/include/all.h", all);
  const std::string nvcc = testing::FakeNvccPath();
  std::string db = "[";
  for (int k = 0; k < kUnits; ++k) {
    Write(absl::StrFormat("proj/gemm_%02d.cu", k),
          absl::StrFormat("#include \"all.h\"\nint gemm_%d();\n", k));
    absl::StrAppend(&db, k == 0 ? "" : ",", R"({"directory": ")", root_,
                    absl::StrFormat(R"(/proj/build", "file": "../gemm_%02d.cu", "command": ")", k),
                    nvcc,
                    absl::StrFormat(R"( -I../include -c ../gemm_%02d.cu -o gemm_%02d.o"})", k, k));
  }
  Write("proj/build/compile_commands.json", db + "]");
  std::string out;
  absl::Status status =
      BuildCompileCommands("proj/build/compile_commands.json", "proj/build", &out);
  ASSERT_TRUE(status.ok()) << status << "\n" << out;
  EXPECT_THAT(out, HasSubstr(absl::StrCat("units     ", kUnits, " (", kUnits, " compiled")));
  // Each object holds its unit's source and every header, as the fake
  // compiler writes them: the workers had the whole closure.
  absl::StatusOr<std::string> object = ReadFile(root_ + "/proj/build/gemm_27.o");
  ASSERT_TRUE(object.ok());
  EXPECT_THAT(*object, HasSubstr("int gemm_27();"));
  EXPECT_THAT(*object, HasSubstr("// h0\n"));
  EXPECT_THAT(*object, HasSubstr(absl::StrFormat("// h%d\n", kHeaders - 1)));
}

// No count of units meets the 8 MiB limit on one message: 48 units of
// 180 KB of nvcc arguments each (8.6 MB) go as a BuildPlan blob.
TEST_F(ClusterTest, ABuildLargerThanOneMessageTravelsAsAPlanBlob) {
  constexpr int kUnits = 48;
  const std::string nvcc = testing::FakeNvccPath();
  std::string defines;
  for (int i = 0; i < 3; ++i) {
    absl::StrAppend(&defines, " -DCUTLASS_LONG_OPTION_", i, "=", std::string(60000, 'x'));
  }
  std::string db = "[";
  for (int k = 0; k < kUnits; ++k) {
    Write(absl::StrFormat("proj/u_%02d.cu", k), absl::StrFormat("int u_%d();\n", k));
    absl::StrAppend(&db, k == 0 ? "" : ",", R"({"directory": ")", root_,
                    absl::StrFormat(R"(/proj/build", "file": "../u_%02d.cu", "command": ")", k),
                    nvcc, defines, absl::StrFormat(R"( -c ../u_%02d.cu -o u_%02d.o"})", k, k));
  }
  Write("proj/build/compile_commands.json", db + "]");
  ASSERT_GT(static_cast<int64_t>(kUnits) * 180000, kMaxMessageBytes);
  std::string out;
  absl::Status status =
      BuildCompileCommands("proj/build/compile_commands.json", "proj/build", &out);
  ASSERT_TRUE(status.ok()) << status << "\n" << out.substr(0, 4000);
  EXPECT_THAT(out, HasSubstr(absl::StrCat("units     ", kUnits, " (", kUnits, " compiled")));
  absl::StatusOr<std::string> object = ReadFile(root_ + "/proj/build/u_47.o");
  ASSERT_TRUE(object.ok());
  EXPECT_THAT(*object, HasSubstr("int u_47();"));
}

// Units of three targets with --threads 3 compile one target per unit on
// the workers; the client merges each unit's parts into the object the
// build system expects, and links that, not the parts.
TEST_F(ClusterTest, ThreadedMultiTargetUnitsCompilePerTargetAndMergeIntoTheirObjects) {
  Write("proj/a.cu", "int a(); // FAKE_TARGET_MS=50\n");
  Write("proj/b.cu", "int b();\n");
  std::string nvcc = testing::FakeNvccPath();
  std::string db = "[";
  for (const char* name : {"a", "b"}) {
    absl::StrAppend(&db, name[0] == 'a' ? "" : ",", R"({"directory": ")", root_, R"(/proj",
     "file": ")",
                    name, R"(.cu", "arguments": [")", nvcc, R"(", "-O2", "--threads", "3",
     "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
     "-gencode", "arch=compute_100,code=[sm_100,compute_100]", "-c", ")",
                    name, R"(.cu",
     "-o", "objs/)",
                    name, R"(.o"]})");
  }
  Write("proj/compile_commands.json", db + "]");
  std::string out;
  absl::Status status = BuildCompileCommands("proj/compile_commands.json", "proj", &out);
  ASSERT_TRUE(status.ok()) << status << "\n" << out;
  EXPECT_THAT(out, HasSubstr("a.cu@sm_100+compute_100"));
  EXPECT_THAT(out, HasSubstr("units     6 (6 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(out, HasSubstr("targets   2 units compiled one target per unit"));
  for (const char* name : {"a", "b"}) {
    const std::string object = absl::StrCat(root_, "/proj/objs/", name, ".o");
    absl::StatusOr<std::vector<DeviceImage>> images = ReadDeviceImages(object);
    ASSERT_TRUE(images.ok()) << images.status();
    std::vector<std::string> described;
    for (const DeviceImage& image : *images) described.push_back(DescribeDeviceImage(image));
    EXPECT_THAT(described, ::testing::ElementsAre("sm_80 cubin", "sm_90 cubin", "sm_100 cubin",
                                                  "compute_100 ptx"))
        << name;
    absl::StatusOr<std::string> text = ReadFile(object);
    ASSERT_TRUE(text.ok());
    EXPECT_THAT(*text, HasSubstr(absl::StrCat("int ", name, "();")));
  }
  // The library holds each merged object once and no part object.
  absl::StatusOr<std::string> library = ReadFile(root_ + "/proj/libproj.so");
  ASSERT_TRUE(library.ok());
  int copies = 0;
  for (size_t at = library->find("FAKEOBJ a.cu"); at != std::string::npos;
       at = library->find("FAKEOBJ a.cu", at + 1)) {
    ++copies;
  }
  EXPECT_EQ(copies, 1) << "a.o linked exactly once";

  // An unchanged rebuild takes every part from the cache and merges again.
  std::string again;
  status = BuildCompileCommands("proj/compile_commands.json", "proj", &again);
  ASSERT_TRUE(status.ok()) << status << "\n" << again;
  EXPECT_THAT(again, HasSubstr("units     6 (0 compiled, 6 cached, 0 failed)"));
  absl::StatusOr<std::vector<DeviceImage>> rebuilt = ReadDeviceImages(root_ + "/proj/objs/a.o");
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_EQ(rebuilt->size(), 4u);
}

// One worker per work dir; a restarted worker removes the task folders a
// killed run left behind.
TEST_F(ClusterTest, SecondWorkerOnTheSameWorkDirIsRefusedAndLeftoverTasksAreRemoved) {
  worker::WorkerOptions options = WorkerOptionsFor("restarted");
  options.sandbox = false;  // task folders in WORK_DIR/tasks
  Write("restarted/tasks/task-killed/tree/a.cu", "// a killed run's input\n");
  Write("restarted/tasks/unrelated", "not a task folder\n");
  auto first = worker::Worker::Start(options);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(std::filesystem::exists(root_ + "/restarted/tasks/task-killed"));
  EXPECT_TRUE(IsRegularFile(root_ + "/restarted/tasks/unrelated"));
  auto second = worker::Worker::Start(options);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(),
              HasSubstr(root_ + "/restarted is in use by another distcc-cuda-worker (pid "));
}

TEST_F(ClusterTest, WorkerWithAnotherReleaseThanRequiredRefusesToStart) {
  worker::WorkerOptions options = WorkerOptionsFor("pinned");
  options.nvcc_path = testing::FakeNvccWithRelease(root_, "13.1");
  options.required_nvcc_release = "12.8";
  auto started = worker::Worker::Start(options);
  EXPECT_EQ(started.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(started.status().message(), HasSubstr("nvcc 12.8 is required"));
  EXPECT_THAT(started.status().message(), HasSubstr(root_ + "/cuda-13.1/bin/nvcc is release 13.1"));
  options.nvcc_path = testing::FakeNvccWithRelease(root_, "12.8");
  started = worker::Worker::Start(options);
  EXPECT_TRUE(started.ok()) << started.status();
}

TEST_F(ClusterTest, ClientWithAnotherReleaseThanRequiredSendsNothing) {
  std::string out;
  absl::Status status = Build(&out, "", testing::FakeNvccPath(), "12.8");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("is release 13.0"));
  EXPECT_THAT(out, Not(HasSubstr("units on"))) << "nothing was submitted";
}

TEST_F(ClusterTest, UnitsGoOnlyToWorkersWithTheClientsToolchain) {
  std::string nvcc128 = testing::FakeNvccWithRelease(root_, "12.8");
  AddWorker("worker-128", nvcc128);
  std::string out;
  ASSERT_TRUE(Build(&out, "", testing::FakeNvccPath(), "13.0").ok()) << out;
  EXPECT_THAT(out, HasSubstr("(2 workers with this toolchain)"));
  EXPECT_THAT(out, Not(HasSubstr("worker-128")));
  // The same plan pinned to 12.8 compiles again (the cache is keyed by the
  // toolchain), on the 12.8 worker alone.
  ASSERT_TRUE(Build(&out, "", nvcc128, "12.8").ok()) << out;
  EXPECT_THAT(out, HasSubstr("units     9 (9 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(out, HasSubstr("workers   1 (worker-128: 9)"));
  // With the 12.8 worker gone (dropped once its heartbeats stop), a 12.8
  // build fails at once naming both sides.
  workers_.pop_back();
  bool dropped = false;
  for (int i = 0; i < 300 && !dropped; ++i) {
    std::ostringstream status;
    ASSERT_TRUE(client::RunStatus(coordinator_->address(), absl::Seconds(5), status).ok());
    dropped = !absl::StrContains(status.str(), "worker-128");
    if (!dropped) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(dropped);
  Write("src/common.h", "// changed\n");
  absl::Time start = absl::Now();
  absl::Status status = Build(&out, "", nvcc128, "12.8");
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "not after a timeout";
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("no connected worker has the build's toolchain nvcc 12.8"));
  EXPECT_THAT(status.message(), HasSubstr("worker-a: nvcc 13.0"));
}

// A worker whose toolkit lies in a folder only its owner can enter (pip's in
// a 0700 home, a clone in `mktemp -d`) compiles sandboxed all the same: the
// sandbox user cannot search the way there, so each compile's process binds
// the toolkit where it can before becoming that user.
TEST_F(ClusterTest, WorkerWithItsToolkitInAPrivateFolderCompilesSandboxed) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (the worker's sandbox user is nobody)";
  workers_.clear();
  const std::string home = root_ + "/home";
  const std::string nvcc = testing::FakeNvccWithRelease(home + "/venv", "13.0");
  ASSERT_EQ(chmod(home.c_str(), 0700), 0);
  AddWorker("private", nvcc);
  std::string out;
  absl::Status status = Build(&out, "", nvcc);
  ASSERT_TRUE(status.ok()) << status << "\n" << out;
  EXPECT_THAT(out, HasSubstr("units     9 (9 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(out, HasSubstr("workers   1 (private: 9)"));
}

TEST_F(ClusterTest, WorkerWhoseNvccIsReplacedRegistersAgainAndItsUnitsRunElsewhere) {
  workers_.clear();
  // Copies of one toolkit have one fingerprint: the client's matches both.
  std::string upgraded_nvcc = testing::FakeNvccWithRelease(root_ + "/upgraded", "13.0");
  std::string client_nvcc = testing::FakeNvccWithRelease(root_ + "/client", "13.0");
  AddWorker("upgraded", upgraded_nvcc);
  // Each unit takes half a second more, so that most are left when the
  // first is done, however late the test sees it.
  Write("src/common.h", "// FAKE_TARGET_MS=500\n");
  std::string out;
  std::future<absl::Status> build =
      std::async(std::launch::async, [&] { return Build(&out, "", client_nvcc); });
  auto status_text = [&] {
    std::ostringstream status;
    client::RunStatus(coordinator_->address(), absl::Seconds(5), status).IgnoreError();
    return status.str();
  };
  bool started = false;
  for (int i = 0; i < 600 && !started; ++i) {
    std::smatch done;
    const std::string text = status_text();
    started = std::regex_search(text, done, std::regex("done ([0-9]+)")) && done[1] != "0";
    if (!started) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(started) << status_text();
  // CUDA is upgraded under the running worker; another worker keeps the old.
  ASSERT_TRUE(testing::InstallExecutable(testing::FakeNvccWithRelease(root_ + "/new", "13.1"),
                                         upgraded_nvcc)
                  .ok());
  AddWorker("steady", testing::FakeNvccWithRelease(root_ + "/steady", "13.0"));
  ASSERT_EQ(build.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  absl::Status status = build.get();
  ASSERT_TRUE(status.ok()) << status << "\n" << out;
  // The unit it ran when the change came is re-queued: by its report, which
  // names the new toolkit, or, when a heartbeat saw the change first, by the
  // worker's leaving to register again.
  EXPECT_THAT(out, HasSubstr("re-queued"));
  EXPECT_TRUE(absl::StrContains(out, "], not the build's [") ||
              absl::StrContains(out, "left to register again with its changed toolchain"))
      << out;
  // It registered again, with the toolkit it has now.
  bool again = false;
  for (int i = 0; i < 600 && !again; ++i) {
    std::string text = status_text();
    again = absl::StrContains(text, "upgraded") && absl::StrContains(text, "nvcc 13.1");
    if (!again) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(again) << status_text();
}

// A toolkit upgraded while a unit compiles, between two heartbeats: the
// result names the toolkit the worker has when it reports, so the unit is
// compiled again by a worker that still has the build's, and nothing the new
// toolkit finished reaches the library.
TEST_F(ClusterTest, AUnitWhoseToolkitIsUpgradedWhileItCompilesIsCompiledAgainElsewhere) {
  workers_.clear();
  const std::string next = testing::FakeNvccWithRelease(root_ + "/next", "13.1");
  // One toolkit (the same script, so the same fingerprint) for the client and
  // two workers. In the folder that holds the marker, the first compile (-c)
  // puts 13.1 in the script's place by a rename, as a package upgrade does,
  // and finishes with it, leaving a flag in its object.
  const std::string script = absl::StrCat(R"sh(#!/bin/sh
here="$(dirname "$0")"
case " $* " in *" -c "*)
  if rm "$here/upgrade-during-compile" 2>/dev/null; then
    cp ")sh",
                                          next, R"sh(" "$0.new" && mv -f "$0.new" "$0"
    FAKE_NVCC_RELEASE=13.1 exec "$here/fake_nvcc" -DFINISHED_BY_THE_UPGRADE "$@"
  fi;;
esac
FAKE_NVCC_RELEASE=13.0 exec "$here/fake_nvcc" "$@"
)sh");
  std::map<std::string, std::string> nvcc;
  for (const char* name : {"client", "upgraded", "steady"}) {
    nvcc[name] = testing::FakeNvccWithRelease(root_ + "/" + name, "13.0");
    ASSERT_TRUE(WriteFileAtomically(nvcc[name], script).ok());
    ASSERT_EQ(chmod(nvcc[name].c_str(), 0755), 0);
  }
  const std::filesystem::path marker =
      std::filesystem::path(nvcc["upgraded"]).parent_path() / "upgrade-during-compile";
  ASSERT_TRUE(WriteFileAtomically(marker, "").ok());
  for (const char* name : {"upgraded", "steady"}) {
    worker::WorkerOptions options = WorkerOptionsFor(name);
    options.nvcc_path = nvcc[name];
    options.sandbox = false;  // the toolkit is read-only in the sandbox
    auto started = worker::Worker::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    workers_.push_back(std::move(*started));
  }
  std::string out;
  absl::Status status = Build(&out, "", nvcc["client"]);
  ASSERT_TRUE(status.ok()) << status << "\n" << out;
  ASSERT_FALSE(std::filesystem::exists(marker)) << "no unit ran on the worker that upgrades";
  EXPECT_THAT(out, HasSubstr("units     9 (9 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(out, HasSubstr("re-queued"));
  EXPECT_THAT(out, HasSubstr("], not the build's ["));
  absl::StatusOr<std::string> library = ReadFile(root_ + "/out/libfake.so");
  ASSERT_TRUE(library.ok()) << library.status();
  EXPECT_FALSE(absl::StrContains(*library, "FINISHED_BY_THE_UPGRADE"))
      << "an object that the new toolkit finished was linked:\n"
      << out;
  std::ostringstream listed;
  ASSERT_TRUE(client::RunStatus(coordinator_->address(), absl::Seconds(5), listed).ok());
  EXPECT_THAT(listed.str(), HasSubstr("nvcc 13.1")) << "it registered again with its new toolkit";
}

// An idle worker whose toolkit breaks (caught halfway through an upgrade)
// and is then upgraded registers again each time, by what it has now, not
// only when its next unit reports it: with nothing matching its broken
// toolchain no unit would ever come to tell it.
TEST_F(ClusterTest, AnIdleWorkerRegistersAgainWhenItsToolkitBreaksAndIsMended) {
  workers_.clear();
  const std::string nvcc = testing::FakeNvccWithRelease(root_ + "/upgraded", "13.0");
  AddWorker("upgraded", nvcc);
  auto status_shows = [&](const std::string& text) {
    for (int i = 0; i < 300; ++i) {
      std::ostringstream status;
      client::RunStatus(coordinator_->address(), absl::Seconds(5), status).IgnoreError();
      if (absl::StrContains(status.str(), text)) return true;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return false;
  };
  ASSERT_TRUE(status_shows("nvcc 13.0"));
  // Half-written: not an nvcc at all.
  ASSERT_TRUE(WriteFileAtomically(nvcc + ".partial", "#!/bin/sh\nexit 1\n").ok());
  std::filesystem::permissions(nvcc + ".partial", std::filesystem::perms::owner_all);
  std::filesystem::rename(nvcc + ".partial", nvcc);
  EXPECT_TRUE(status_shows("[unusable too]"));
  ASSERT_TRUE(
      testing::InstallExecutable(testing::FakeNvccWithRelease(root_ + "/new", "13.1"), nvcc).ok());
  EXPECT_TRUE(status_shows("nvcc 13.1"));
  std::ostringstream status;
  ASSERT_TRUE(client::RunStatus(coordinator_->address(), absl::Seconds(5), status).ok());
  EXPECT_THAT(status.str(), HasSubstr("1 workers")) << "the old registration was dropped";
}

TEST_F(ClusterTest, UnitsOfAWorkerThatStopsHeartbeatingRunElsewhere) {
  // Only a worker process that will hang is connected when the build starts.
  // Every unit takes most of a second (the kernels' own 150 ms and this), so
  // the test freezes the worker before it can report one, however loaded
  // the machine.
  workers_.clear();
  Write("src/common.h", "// FAKE_TARGET_MS=700\n");
  auto doomed = testing::BackgroundProcess::Start(
      {testing::BinaryPath("distcc-cuda-worker"), "--coordinator", coordinator_->address(),
       "--name", "doomed", "--slots", "2", "--memory-cap", "2GiB", "--nvcc",
       testing::FakeNvccPath(), "--work-dir", root_ + "/doomed"},
      root_ + "/doomed.log");
  ASSERT_TRUE(doomed.ok());
  ASSERT_TRUE((*doomed)->WaitForLog("registered", absl::Seconds(20)).ok()) << (*doomed)->Log();
  std::string out;
  std::future<absl::Status> build = std::async(std::launch::async, [&] { return Build(&out); });
  ASSERT_TRUE((*doomed)->WaitForLog("runs unit", absl::Seconds(20)).ok()) << (*doomed)->Log();
  // Freeze it: no heartbeat, no report, like a node that lost its network.
  kill((*doomed)->pid(), SIGSTOP);
  AddWorker("rescuer");
  ASSERT_EQ(build.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  absl::Status status = build.get();
  ASSERT_TRUE(status.ok()) << status << "\n" << out;
  EXPECT_THAT(out, HasSubstr("re-queued"));
  EXPECT_THAT(out, HasSubstr("doomed sent no heartbeat"));
  EXPECT_THAT(out, HasSubstr("workers   1 (rescuer: 9)"));
  // Killing the frozen worker leaves nothing of it behind: a child it had
  // forked but not yet started must not wait for it forever.
  std::string marker = root_ + "/doomed";
  doomed->reset();
  bool gone = false;
  for (int i = 0; i < 600 && !gone; ++i) {
    gone = ProcessesWithArgument(marker) == 0;
    if (!gone) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(gone) << ProcessesWithArgument(marker) << " processes still name " << marker;
}

// Overwrites a stored blob in place (a failing disk, a stray write).
void Damage(const std::string& path, const std::string& bytes) {
  std::filesystem::permissions(path, std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Blobs damaged on disk in the coordinator's store and in the workers'
// caches: after a coordinator restart the same command succeeds without a
// manual step, and nothing compiles against a damaged input.
TEST_F(ClusterTest, DamagedBlobsInEveryStoreAreHealedByTheNextRun) {
  std::string out;
  ASSERT_TRUE(Build(&out).ok()) << out;
  absl::StatusOr<std::string> first_object = ReadFile(root_ + "/out/obj/kern_float_3.o");
  ASSERT_TRUE(first_object.ok());
  auto coordinator_blob = [&](const std::string& content) {
    Digest digest = DigestOf(content);
    return root_ + "/coordinator/cas/" + digest.hash.substr(0, 2) + "/" + digest.hash + "_" +
           std::to_string(digest.size_bytes);
  };
  // An input overwritten at its size, an output overwritten at its size,
  // another output cut short.
  const std::string header = "// shared\n";
  Damage(coordinator_blob(header), "// SHARED\n");
  Damage(coordinator_blob(*first_object), std::string(first_object->size(), 'x'));
  absl::StatusOr<std::string> other = ReadFile(root_ + "/out/obj/kern_half_2.o");
  ASSERT_TRUE(other.ok());
  Damage(coordinator_blob(*other), other->substr(0, other->size() / 2));
  // And the workers' cached copies of the header.
  for (const char* name : {"worker-a", "worker-b"}) {
    Digest digest = DigestOf(header);
    std::string cached = root_ + "/" + name + "/cas/" + digest.hash.substr(0, 2) + "/" +
                         digest.hash + "_" + std::to_string(digest.size_bytes);
    if (IsRegularFile(cached)) Damage(cached, "// SHARED\n");
  }
  // The coordinator restarts (a reboot): its first reads hash what it has.
  const int port = coordinator_->port();
  coordinator_.reset();
  coordinator::CoordinatorOptions options;
  options.listen_address = absl::StrCat("127.0.0.1:", port);
  options.state_dir = root_ + "/coordinator";
  options.scheduler.heartbeat_timeout = absl::Seconds(2);
  options.scheduler.startup_grace = absl::Seconds(4);
  auto restarted = coordinator::Coordinator::Start(options);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  coordinator_ = std::move(*restarted);
  absl::Status status = Build(&out);
  ASSERT_TRUE(status.ok()) << status << "\n" << out;
  // The two units whose objects were damaged compiled again; the rest are
  // cached.
  EXPECT_THAT(out, HasSubstr("units     9 (2 compiled, 7 cached, 0 failed)"));
  absl::StatusOr<std::string> again = ReadFile(root_ + "/out/obj/kern_float_3.o");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first_object);
  // A unit compiled now reads the header as it is, not a damaged copy.
  Write("src/api.cu", "#include \"common.h\"\nint api() { return 3; }\n");
  ASSERT_TRUE(Build(&out).ok()) << out;
  EXPECT_THAT(out, HasSubstr("units     9 (1 compiled, 8 cached, 0 failed)"));
  absl::StatusOr<std::string> library = ReadFile(root_ + "/out/libfake.so");
  ASSERT_TRUE(library.ok());
  EXPECT_THAT(*library, HasSubstr("// shared\n"));
  EXPECT_THAT(*library, Not(HasSubstr("// SHARED")));
}

// A coordinator with a small --cas-max-size: builds that each bring new
// blobs succeed, and between builds the store is back under its limit.
TEST_F(ClusterTest, TheCoordinatorsStoreStaysUnderItsLimitAcrossBuilds) {
  const int port = coordinator_->port();
  coordinator_.reset();
  coordinator::CoordinatorOptions options;
  options.listen_address = absl::StrCat("127.0.0.1:", port);
  options.state_dir = root_ + "/coordinator";
  options.scheduler.heartbeat_timeout = absl::Seconds(2);
  options.scheduler.startup_grace = absl::Seconds(4);
  // About two builds' worth of blobs, each 8 KiB on disk (BlobDiskCost).
  const int64_t limit = 24 * BlobDiskCost(0);
  options.cas_max_bytes = limit;
  auto restarted = coordinator::Coordinator::Start(options);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  coordinator_ = std::move(*restarted);
  for (int round = 0; round < 4; ++round) {
    Write("src/common.h", absl::StrCat("// round ", round, "\n"));
    std::string out;
    absl::Status status = Build(&out);
    ASSERT_TRUE(status.ok()) << round << ": " << status << "\n" << out;
    // (The planner may group the instantiations differently each round.)
    EXPECT_THAT(out, HasSubstr(" compiled, 0 cached, 0 failed)"));
    EXPECT_TRUE(TimeUntil([&] { return testing::StoreBytes(root_ + "/coordinator/cas") <= limit; },
                          absl::Seconds(5)))
        << "round " << round << ": " << testing::StoreBytes(root_ + "/coordinator/cas") << " bytes";
  }
}

// Ctrl-C of the client: the coordinator tells the workers (with their next
// heartbeat, a second apart), which kill the units' processes; slots and
// reservations are free within seconds (about 1 s here; the bound leaves
// room for a loaded machine).
TEST_F(ClusterTest, CancelStopsTheUnitsOnTheWorkersAndFreesTheirSlotsWithinSeconds) {
  Write("src/slow.toml", SleepingManifest(2));
  CancelToken cancel;
  std::string out;
  std::future<absl::Status> build = std::async(
      std::launch::async, [&] { return Build(&out, "", "", "", &cancel, "src/slow.toml"); });
  // Both workers compile one unit each (bwrap and the fake nvcc in it).
  const std::string address = coordinator_->address();
  ASSERT_TRUE(TimeUntil(
      [&] {
        return StatusOf(address).running_units() == 2 &&
               testing::ProcessesMentioning(SleepingMarker()) >= 4;
      },
      absl::Seconds(30)))
      << testing::ProcessesMentioning(SleepingMarker());
  absl::Time cancelled_at = absl::Now();
  cancel.Cancel("test");
  ASSERT_EQ(build.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  absl::Status status = build.get();
  EXPECT_TRUE(absl::IsCancelled(status)) << status << "\n" << out;
  EXPECT_THAT(out, HasSubstr("build cancelled (test)"));
  EXPECT_THAT(out, HasSubstr("0 of 2 units had finished"));
  EXPECT_THAT(out, HasSubstr("2 units were compiling; the coordinator stops them on its workers"));
  std::optional<absl::Duration> freed = TimeUntil(
      [&] { return testing::ProcessesMentioning(SleepingMarker()) == 0 && ClusterIsIdle(address); },
      absl::Seconds(10));
  ASSERT_TRUE(freed) << "processes left:\n"
                     << testing::DescribeProcessesMentioning(SleepingMarker())
                     << StatusOf(address).DebugString();
  const absl::Duration all_free = absl::Now() - cancelled_at;
  EXPECT_LT(all_free, absl::Seconds(5));
  std::cout << "cancel to the last compiler gone and every slot free: "
            << absl::FormatDuration(all_free) << std::endl;
  // The slots take the next build at once.
  ASSERT_TRUE(Build(&out).ok()) << out;
  EXPECT_THAT(out, HasSubstr("units     9 (9 compiled, 0 cached, 0 failed)"));
}

// A worker killed outright takes its compiles with it, sandboxed or not.
TEST_F(ClusterTest, AWorkerKilledWithSigkillLeavesNoCompilerRunning) {
  workers_.clear();
  Write("src/slow.toml", SleepingManifest(2));
  std::vector<std::unique_ptr<testing::BackgroundProcess>> killed;
  for (const char* name : {"sandboxed", "unsandboxed"}) {
    std::vector<std::string> argv = {testing::BinaryPath("distcc-cuda-worker"),
                                     "--coordinator",
                                     coordinator_->address(),
                                     "--name",
                                     name,
                                     "--slots",
                                     "1",
                                     "--memory-cap",
                                     "2GiB",
                                     "--nvcc",
                                     testing::FakeNvccPath(),
                                     "--work-dir",
                                     root_ + "/" + name};
    if (std::string(name) == "unsandboxed") argv.push_back("--insecure-no-sandbox");
    auto started = testing::BackgroundProcess::Start(argv, root_ + "/" + name + ".log");
    ASSERT_TRUE(started.ok()) << started.status();
    ASSERT_TRUE((*started)->WaitForLog("registered", absl::Seconds(20)).ok()) << (*started)->Log();
    killed.push_back(std::move(*started));
  }
  CancelToken cancel;
  std::string out;
  std::future<absl::Status> build = std::async(
      std::launch::async, [&] { return Build(&out, "", "", "", &cancel, "src/slow.toml"); });
  for (auto& worker : killed) {
    ASSERT_TRUE(worker->WaitForLog("runs unit", absl::Seconds(30)).ok()) << worker->Log();
  }
  ASSERT_TRUE(TimeUntil([] { return testing::ProcessesMentioning(SleepingMarker()) >= 2; },
                        absl::Seconds(30)))
      << killed[0]->Log() << killed[1]->Log();
  for (auto& worker : killed) ASSERT_TRUE(worker->Stop(SIGKILL, absl::Seconds(5)).ok());
  std::optional<absl::Duration> gone = TimeUntil(
      [] { return testing::ProcessesMentioning(SleepingMarker()) == 0; }, absl::Seconds(10));
  ASSERT_TRUE(gone) << "compiler processes outlived their worker:\n"
                    << testing::DescribeProcessesMentioning(SleepingMarker());
  EXPECT_LT(*gone, absl::Seconds(5));
  cancel.Cancel("test over");
  ASSERT_EQ(build.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  // What a restarted worker of the same name does first: remove the memory
  // groups its killed predecessor left (so the suite leaves none).
  for (const char* name : {"sandboxed", "unsandboxed"}) {
    MemoryCapOptions cap;
    cap.cap_bytes = int64_t{256} << 20;
    cap.name = name;
    NodeMemoryCap::Create(cap).IgnoreError();
  }
}

// Workers are often started before their coordinator (a Compose file, a
// reboot): they keep trying, say so, join when it appears, and stop at once
// on SIGTERM, deregistering so that nothing waits for their heartbeat.
TEST(WorkerLifecycleTest, StartedBeforeItsCoordinatorItJoinsWhenItAppearsAndLeavesOnSigterm) {
  const std::string root = testing::NewTempDir("lifecycle-");
  const int port = testing::FreeLoopbackPort();
  ASSERT_NE(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  auto worker_argv = [&](const std::string& name) {
    return std::vector<std::string>{testing::BinaryPath("distcc-cuda-worker"),
                                    "--coordinator",
                                    address,
                                    "--name",
                                    name,
                                    "--slots",
                                    "1",
                                    "--memory-cap",
                                    "1GiB",
                                    "--nvcc",
                                    testing::FakeNvccPath(),
                                    "--work-dir",
                                    root + "/" + name};
  };
  auto early = testing::BackgroundProcess::Start(worker_argv("early"), root + "/early.log");
  ASSERT_TRUE(early.ok()) << early.status();
  ASSERT_TRUE((*early)->WaitForLog("attempt 2 to register failed", absl::Seconds(20)).ok())
      << (*early)->Log();
  // Waiting for a coordinator is no reason to ignore SIGTERM.
  auto waiting = testing::BackgroundProcess::Start(worker_argv("waiting"), root + "/waiting.log");
  ASSERT_TRUE(waiting.ok());
  ASSERT_TRUE((*waiting)->WaitForLog("attempt 1 to register failed", absl::Seconds(20)).ok())
      << (*waiting)->Log();
  absl::Time term = absl::Now();
  absl::StatusOr<int> stopped = (*waiting)->Stop(SIGTERM, absl::Seconds(5));
  ASSERT_TRUE(stopped.ok()) << (*waiting)->Log();
  EXPECT_TRUE(WIFEXITED(*stopped) && WEXITSTATUS(*stopped) == 0) << *stopped;
  EXPECT_LT(absl::Now() - term, absl::Seconds(5));

  coordinator::CoordinatorOptions options;
  options.listen_address = address;
  options.state_dir = root + "/coordinator";
  // Long enough that only deregistration can explain a quick goodbye.
  options.scheduler.heartbeat_timeout = absl::Seconds(60);
  auto coordinator = coordinator::Coordinator::Start(options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  ASSERT_TRUE((*early)->WaitForLog("registered with", absl::Seconds(30)).ok()) << (*early)->Log();
  EXPECT_EQ(StatusOf(address).workers_size(), 1);
  term = absl::Now();
  stopped = (*early)->Stop(SIGTERM, absl::Seconds(5));
  ASSERT_TRUE(stopped.ok()) << (*early)->Log();
  EXPECT_LT(absl::Now() - term, absl::Seconds(5));
  EXPECT_EQ(StatusOf(address).workers_size(), 0) << StatusOf(address).DebugString();
}

// A coordinator killed mid-build (SIGKILL) and started again: the client
// waits for it, submits again and finishes; what had finished comes back
// from the result cache, not from another compile.
TEST(CoordinatorRestartTest, ABuildRidesOutACoordinatorKilledAndRestarted) {
  const std::string root = testing::NewTempDir("restart-");
  const int port = testing::FreeLoopbackPort();
  ASSERT_NE(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const std::vector<std::string> coordinator_argv = {testing::BinaryPath("distcc-cuda-coordinator"),
                                                     "--listen", address, "--state-dir",
                                                     root + "/coordinator"};
  auto coordinator = testing::BackgroundProcess::Start(coordinator_argv, root + "/first.log");
  ASSERT_TRUE(coordinator.ok());
  ASSERT_TRUE((*coordinator)->WaitForLog("listening on", absl::Seconds(20)).ok())
      << (*coordinator)->Log();
  std::vector<std::unique_ptr<worker::Worker>> workers;
  for (const char* name : {"r1", "r2"}) {
    worker::WorkerOptions options;
    options.coordinator_address = address;
    options.name = name;
    options.memory_cap_bytes = int64_t{2} << 30;
    options.nvcc_path = testing::FakeNvccPath();
    options.work_dir = root + "/" + name;
    auto started = worker::Worker::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    workers.push_back(std::move(*started));
  }
  ASSERT_TRUE(
      WriteFileAtomically(root + "/src/kern.cuh",
                          "#include \"common.h\"\ntemplate <typename T, int N> void Kern() {}\n")
          .ok());
  // Every unit takes over a second and a half (the kernels' own 150 ms and
  // this), so that units are left to run when the coordinator is killed,
  // however late a loaded machine lets the test see the first three done.
  ASSERT_TRUE(WriteFileAtomically(root + "/src/common.h", "// FAKE_TARGET_MS=1500\n").ok());
  ASSERT_TRUE(
      WriteFileAtomically(root + "/src/api.cu", "#include \"common.h\"\nint api();\n").ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/src/kernels.toml", kManifest).ok());
  std::ostringstream out;
  std::future<absl::Status> build = std::async(std::launch::async, [&] {
    client::BuildOptions options;
    options.plan_path = root + "/src/kernels.toml";
    options.coordinator_address = address;
    options.output_dir = root + "/out";
    options.nvcc_path = testing::FakeNvccPath();
    options.reconnect_timeout = absl::Seconds(60);
    return client::RunBuild(options, out);
  });
  // Some units finished, some run.
  ASSERT_TRUE(TimeUntil(
      [&] {
        int completed = 0;
        v1::ClusterStatus status = StatusOf(address);
        for (const auto& worker : status.workers()) completed += worker.tasks_completed();
        return completed >= 3;
      },
      absl::Seconds(30)));
  ASSERT_TRUE((*coordinator)->Stop(SIGKILL, absl::Seconds(5)).ok());
  absl::SleepFor(absl::Seconds(1));
  coordinator = testing::BackgroundProcess::Start(coordinator_argv, root + "/second.log");
  ASSERT_TRUE(coordinator.ok());
  ASSERT_EQ(build.wait_for(std::chrono::seconds(90)), std::future_status::ready);
  absl::Status status = build.get();
  ASSERT_TRUE(status.ok()) << status << "\n" << out.str() << (*coordinator)->Log();
  EXPECT_THAT(out.str(), HasSubstr("distcc-cuda: lost the coordinator at " + address));
  EXPECT_THAT(out.str(), HasSubstr("distcc-cuda: the coordinator is back after "));
  // Every unit the client had before the restart came back cached.
  const std::string text = out.str();
  const std::string before = text.substr(0, text.find("distcc-cuda: lost the coordinator"));
  EXPECT_GE(std::count(before.begin(), before.end(), '['), 3) << text;
  // The units whose objects were here when the coordinator went (one whose
  // download the kill cut short is not among them).
  std::smatch kept;
  ASSERT_TRUE(std::regex_search(text, kept, std::regex("\\(([0-9]+) finished units are kept\\)")))
      << text;
  EXPECT_GE(std::stoi(kept[1]), 2) << text;
  EXPECT_THAT(text, HasSubstr(absl::StrCat(kept[1].str(),
                                           " units that had finished came back from the "
                                           "result cache, 0 were compiled again")));
  std::cout << text;
  EXPECT_THAT(out.str(), HasSubstr("units     9 ("));
  EXPECT_TRUE(IsRegularFile(root + "/out/libfake.so"));
}

// Two embedded builds on one state dir would share a store and each take
// the machine's whole memory: the second is refused, saying what to do.
// The embedded coordinator listens on no address: its worker and its build
// reach it through in-process channels, so no other process of this machine
// can submit to it or work for it. This process's own listening sockets
// before and after it started are the same.
std::set<std::string> ListeningInodes() {
  std::set<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (fields.size() > 9 && fields[3] == "0A") inodes.insert(fields[9]);  // LISTEN
    }
  }
  std::set<std::string> own;
  std::error_code error;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    std::string target = std::filesystem::read_symlink(fd.path(), error).string();
    if (absl::StartsWith(target, "socket:[")) {
      std::string inode = target.substr(8, target.size() - 9);
      if (inodes.count(inode)) own.insert(inode);
    }
  }
  return own;
}

TEST(EmbeddedClusterTest, ListensOnNoAddressAndBuildsThroughInProcessChannels) {
  const std::string state = testing::NewTempDir("embedded-inproc-");
  const std::set<std::string> before = ListeningInodes();
  auto cluster = client::EmbeddedCluster::Start(state, testing::FakeNvccPath(), 1, false);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(ListeningInodes(), before) << "the embedded default opened a listening socket";
  EXPECT_EQ((*cluster)->address(), "this process (embedded)");
  // Its worker registered through its channel, and the build's channel
  // reads the status.
  v1::ClusterStatus status;
  for (int i = 0; i < 200 && status.workers_size() == 0; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    status.Clear();
    ASSERT_TRUE(v1::BuildService::NewStub((*cluster)->channel())
                    ->GetClusterStatus(&context, v1::GetClusterStatusRequest(), &status)
                    .ok());
    if (status.workers_size() == 0) absl::SleepFor(absl::Milliseconds(25));
  }
  ASSERT_EQ(status.workers_size(), 1);
  EXPECT_EQ(status.workers(0).name(), "local");
}

TEST(EmbeddedClusterTest, SecondEmbeddedBuildOnTheSameStateDirIsRefused) {
  const std::string state = testing::NewTempDir("embedded-twice-");
  auto first = client::EmbeddedCluster::Start(state, testing::FakeNvccPath(), 1, false);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = client::EmbeddedCluster::Start(state, testing::FakeNvccPath(), 1, false);
  EXPECT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
  EXPECT_THAT(second.status().message(),
              HasSubstr("another distcc-cuda build is running on this machine with the same "
                        "state dir"));
  EXPECT_THAT(second.status().message(), HasSubstr("--state-dir"));
}

// `distcc-cuda build -- COMMAND` with no cluster: the command starts while
// this machine's worker does; the unit compiles on it, and the rebuild is
// answered from the result cache.
class EmbeddedSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::NewTempDir("embedded-session-");
    ASSERT_TRUE(WriteFileAtomically(root_ + "/src/k.cu", "__global__ void k() {}\n").ok());
  }

  ProcessResult Build(const std::string& nvcc, const std::vector<std::string>& command) {
    ProcessSpec spec;
    spec.argv = {testing::BinaryPath("distcc-cuda"),
                 "build",
                 "--state-dir",
                 root_ + "/state",
                 "--nvcc",
                 nvcc,
                 "--insecure-no-sandbox",
                 "--"};
    spec.argv.insert(spec.argv.end(), command.begin(), command.end());
    spec.working_directory = root_;
    spec.timeout = absl::Seconds(120);
    absl::StatusOr<ProcessResult> ran = RunProcess(spec);
    EXPECT_TRUE(ran.ok()) << ran.status();
    return ran.ok() ? *ran : ProcessResult{};
  }

  // Builds `command` with `nvcc`, expecting success and k.o made (then
  // removed); returns what the build printed.
  std::string BuildsTheObject(const std::string& nvcc, const std::vector<std::string>& command) {
    ProcessResult ran = Build(nvcc, command);
    const std::string out = ran.stdout_text + ran.stderr_text;
    EXPECT_EQ(ran.exit_code, 0) << out;
    EXPECT_TRUE(IsRegularFile(root_ + "/k.o")) << out;
    std::filesystem::remove(root_ + "/k.o");
    return out;
  }

  std::string root_;
};

TEST_F(EmbeddedSessionTest, ACommandCompilesOnThisMachinesWorkerAndItsRebuildIsCached) {
  const std::string nvcc =
      testing::WriteNvccWrapper(root_ + "/cuda/bin/nvcc", testing::FakeNvccPath());
  const std::vector<std::string> command = {"sh", "-c", "$PYTORCH_NVCC -c src/k.cu -o k.o"};
  const std::string cold = BuildsTheObject(nvcc, command);
  EXPECT_THAT(cold, HasSubstr("1 on the cluster (1 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(cold, HasSubstr("workers   1 (local: 1)"));
  EXPECT_THAT(BuildsTheObject(nvcc, command),
              HasSubstr("1 on the cluster (0 compiled, 1 cached, 0 failed)"));
}

// A rebuild sends an unchanged unit by the tree root its last build made
// (the scan cache's memo). A coordinator that lacks that tree (its state was
// lost) says so, and the unit's tree is made, uploaded and compiled.
TEST_F(EmbeddedSessionTest, AUnitSentByItsRememberedTreeIsUploadedWhenTheCoordinatorLacksIt) {
  const std::string nvcc =
      testing::WriteNvccWrapper(root_ + "/cuda/bin/nvcc", testing::FakeNvccPath());
  ASSERT_TRUE(WriteFileAtomically(root_ + "/src/k.h", "// a header\n").ok());
  ASSERT_TRUE(
      WriteFileAtomically(root_ + "/src/k.cu", "#include \"k.h\"\n__global__ void k() {}\n").ok());
  const std::vector<std::string> command = {"sh", "-c", "$PYTORCH_NVCC -c src/k.cu -o k.o"};
  absl::SleepFor(absl::Milliseconds(250));  // old enough for the scan cache
  BuildsTheObject(nvcc, command);
  ASSERT_TRUE(std::filesystem::exists(root_ + "/state/scan/trees")) << "no tree remembered";
  std::filesystem::remove_all(root_ + "/state/coordinator");
  std::filesystem::remove_all(root_ + "/state/worker");
  const std::string again = BuildsTheObject(nvcc, command);
  EXPECT_THAT(again, HasSubstr("1 on the cluster (1 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(again, HasSubstr("from the scan cache"));
  EXPECT_THAT(BuildsTheObject(nvcc, command),
              HasSubstr("1 on the cluster (0 compiled, 1 cached, 0 failed)"));
}

// The worker registers while the command starts. A unit that reaches the
// coordinator first waits for it; it used to be refused ("no worker is
// connected"), which a fast scan made happen now and then.
TEST_F(EmbeddedSessionTest, AUnitSentBeforeTheWorkerRegisteredWaitsForIt) {
  // The worker is given the toolkit's nvcc through a link whose name makes
  // `nvcc --version` answer 2 s late, so it registers 2 s after it starts;
  // the command's compiles name the nvcc itself (the same toolchain) and
  // reach the coordinator long before that.
  const std::string nvcc = testing::FakeNvccWithRelease(root_, "13.0");
  ASSERT_TRUE(WriteFileAtomically(
                  nvcc,
                  "#!/bin/sh\n"
                  "case \"$0\" in */late/*) [ \"$1\" = --version ] && sleep 2;; esac\n"
                  "FAKE_NVCC_RELEASE=13.0 exec \"$(dirname \"$(readlink -f \"$0\")\")/fake_nvcc\" "
                  "\"$@\"\n")
                  .ok());
  ASSERT_EQ(chmod(nvcc.c_str(), 0755), 0);
  std::filesystem::create_directories(root_ + "/late/bin");
  std::filesystem::create_symlink(nvcc, root_ + "/late/bin/nvcc");
  const absl::Time began = absl::Now();
  EXPECT_THAT(BuildsTheObject(
                  root_ + "/late/bin/nvcc",
                  {"sh", "-c", "$CMAKE_CUDA_COMPILER_LAUNCHER " + nvcc + " -c src/k.cu -o k.o"}),
              HasSubstr("1 on the cluster (1 compiled, 0 cached, 0 failed)"));
  EXPECT_GE(absl::Now() - began, absl::Seconds(2)) << "the worker was not late";
}

// The worker starts beside the command: when it cannot, the command is
// stopped and the build fails with the worker's reason, as it did when the
// worker started first.
TEST_F(EmbeddedSessionTest, AWorkerThatCannotStartStopsTheCommandAndFailsTheBuild) {
  const std::string nvcc = root_ + "/broken/bin/nvcc";
  ASSERT_TRUE(
      WriteFileAtomically(nvcc, "#!/bin/sh\necho 'nvcc: broken toolkit' >&2\nexit 3\n").ok());
  ASSERT_EQ(chmod(nvcc.c_str(), 0755), 0);
  const absl::Time began = absl::Now();
  ProcessResult failed = Build(nvcc, {"sleep", "60"});
  EXPECT_LT(absl::Now() - began, absl::Seconds(50)) << "the command was not stopped";
  EXPECT_NE(failed.exit_code, 0);
  EXPECT_THAT(failed.stderr_text, HasSubstr(nvcc)) << failed.stdout_text << failed.stderr_text;
  EXPECT_THAT(failed.stdout_text + failed.stderr_text,
              HasSubstr("this machine's worker could not start"));
}

}  // namespace
}  // namespace distcc_cuda
