// SPDX-License-Identifier: Apache-2.0
#include "common/process/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/base/cancellation.h"
#include "common/base/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

ProcessSpec Shell(const std::string& script) {
  ProcessSpec spec;
  spec.argv = {"sh", "-c", script};
  return spec;
}

// A fresh directory under the test's temporary directory.
std::string MakeTempDir() { return ::distcc_cuda::testing::NewTempDir("subprocess_"); }

void WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  ASSERT_EQ(chmod(path.c_str(), mode), 0) << path;
}

// One case per way a program can end.
struct EndCase {
  std::string name;
  std::vector<std::string> argv;
  int exit_code;
  int term_signal;
  std::string stdout_text;
  std::string stderr_text;
  std::string description;
};

class RunProcessEndTest : public ::testing::TestWithParam<EndCase> {};

TEST_P(RunProcessEndTest, ReportsHowItEnded) {
  const EndCase& c = GetParam();
  ProcessSpec spec;
  spec.argv = c.argv;
  spec.timeout = absl::Seconds(30);  // a hang fails the test, not the run
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, c.exit_code);
  EXPECT_EQ(result->term_signal, c.term_signal);
  EXPECT_FALSE(result->timed_out);
  EXPECT_EQ(result->stdout_text, c.stdout_text);
  EXPECT_EQ(result->stderr_text, c.stderr_text);
  EXPECT_FALSE(result->output_truncated);
  EXPECT_EQ(DescribeTermination(*result), c.description);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RunProcessEndTest,
    ::testing::Values(
        EndCase{"Stdout", {"sh", "-c", "echo hello"}, 0, 0, "hello\n", "", "exit code 0"},
        EndCase{"Stderr", {"sh", "-c", "echo oops >&2"}, 0, 0, "", "oops\n", "exit code 0"},
        EndCase{"StreamsKeptApart",
                {"sh", "-c", "echo out; echo err >&2; echo out2"},
                0,
                0,
                "out\nout2\n",
                "err\n",
                "exit code 0"},
        EndCase{
            "ExitCode", {"sh", "-c", "echo partial; exit 3"}, 3, 0, "partial\n", "", "exit code 3"},
        EndCase{"AbsolutePath", {"/bin/sh", "-c", "exit 2"}, 2, 0, "", "", "exit code 2"},
        EndCase{"KilledBySigkill",
                {"sh", "-c", "kill -KILL $$"},
                -1,
                9,
                "",
                "",
                "killed by signal 9 (Killed)"},
        EndCase{"KilledBySigterm",
                {"sh", "-c", "kill -TERM $$"},
                -1,
                15,
                "",
                "",
                "killed by signal 15 (Terminated)"},
        EndCase{"StdinIsDevNull", {"cat"}, 0, 0, "", "", "exit code 0"},
        EndCase{"ArgvUnchanged",
                {"sh", "-c", "printf '%s|' \"$0\" \"$@\"", "zero", "a b", "", "c'd"},
                0,
                0,
                "zero|a b||c'd|",
                "",
                "exit code 0"},
        // The caller's own non-close-on-exec descriptors (this test harness
        // may have some) do not reach the program; ls holds 3 itself.
        EndCase{"OnlyStandardDescriptors",
                {"ls", "/proc/self/fd"},
                0,
                0,
                "0\n1\n2\n3\n",
                "",
                "exit code 0"},
        // Dispositions and mask are reset even if the caller ignores or
        // blocks signals (see SignalStateIsReset).
        EndCase{"SignalStateIsDefault",
                {"sh", "-c", "grep -E '^Sig(Blk|Ign)' /proc/self/status"},
                0,
                0,
                "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n",
                "",
                "exit code 0"}),
    [](const ::testing::TestParamInfo<EndCase>& info) { return info.param.name; });

TEST(RunProcessTest, SignalStateIsReset) {
  // Leaks a descriptor and ignores/blocks signals the way a server might.
  int leaked = open("/dev/null", O_RDONLY);  // deliberately not O_CLOEXEC
  ASSERT_GE(leaked, 0);
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction saved_pipe;
  ASSERT_EQ(sigaction(SIGPIPE, &ignore, &saved_pipe), 0);
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigset_t saved_mask;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &usr1, &saved_mask), 0);

  absl::StatusOr<ProcessResult> status =
      RunProcess(Shell("grep -E '^Sig(Blk|Ign)' /proc/self/status"));
  ProcessSpec fds;
  fds.argv = {"ls", "/proc/self/fd"};
  absl::StatusOr<ProcessResult> listed = RunProcess(fds);

  pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
  sigaction(SIGPIPE, &saved_pipe, nullptr);
  close(leaked);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->stdout_text, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->stdout_text, "0\n1\n2\n3\n");
}

// One case per way a program can fail to start.
struct StartErrorCase {
  std::string name;
  // Builds the spec inside `dir`, a fresh temporary directory.
  std::function<ProcessSpec(const std::string& dir)> make_spec;
  absl::StatusCode code;
  std::string message_part;
};

class RunProcessStartErrorTest : public ::testing::TestWithParam<StartErrorCase> {};

TEST_P(RunProcessStartErrorTest, ReturnsError) {
  const StartErrorCase& c = GetParam();
  std::string dir = MakeTempDir();
  absl::StatusOr<ProcessResult> result = RunProcess(c.make_spec(dir));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), c.code) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr(c.message_part));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RunProcessStartErrorTest,
    ::testing::Values(StartErrorCase{"EmptyArgv", [](const std::string&) { return ProcessSpec(); },
                                     absl::StatusCode::kInvalidArgument, "empty argv"},
                      StartErrorCase{"MissingInPath",
                                     [](const std::string&) {
                                       ProcessSpec spec;
                                       spec.argv = {"distcc-cuda-no-such-program", "-v"};
                                       return spec;
                                     },
                                     absl::StatusCode::kNotFound, "distcc-cuda-no-such-program"},
                      StartErrorCase{"MissingAbsolute",
                                     [](const std::string& dir) {
                                       ProcessSpec spec;
                                       spec.argv = {dir + "/nvcc"};
                                       return spec;
                                     },
                                     absl::StatusCode::kNotFound, "/nvcc"},
                      StartErrorCase{"NotExecutable",
                                     [](const std::string& dir) {
                                       WriteFile(dir + "/tool", "#!/bin/sh\n", 0644);
                                       ProcessSpec spec;
                                       spec.argv = {dir + "/tool"};
                                       return spec;
                                     },
                                     absl::StatusCode::kPermissionDenied, "/tool"},
                      StartErrorCase{"NotExecutableInPath",
                                     [](const std::string& dir) {
                                       WriteFile(dir + "/tool", "#!/bin/sh\n", 0644);
                                       ProcessSpec spec;
                                       spec.argv = {"tool"};
                                       spec.environment["PATH"] = dir;
                                       return spec;
                                     },
                                     absl::StatusCode::kPermissionDenied, "not executable"},
                      StartErrorCase{"NotAnExecutableFormat",
                                     [](const std::string& dir) {
                                       WriteFile(dir + "/tool",
                                                 "\x7f"
                                                 "ELFgarbage",
                                                 0755);
                                       ProcessSpec spec;
                                       spec.argv = {dir + "/tool"};
                                       return spec;
                                     },
                                     absl::StatusCode::kFailedPrecondition, "/tool"},
                      StartErrorCase{"MissingWorkingDirectory",
                                     [](const std::string& dir) {
                                       ProcessSpec spec = Shell("true");
                                       spec.working_directory = dir + "/absent";
                                       return spec;
                                     },
                                     absl::StatusCode::kNotFound, "/absent"},
                      StartErrorCase{"BadEnvironmentName",
                                     [](const std::string&) {
                                       ProcessSpec spec = Shell("true");
                                       spec.environment["A=B"] = "1";
                                       return spec;
                                     },
                                     absl::StatusCode::kInvalidArgument, "A=B"},
                      StartErrorCase{"ZeroTimeout",
                                     [](const std::string&) {
                                       ProcessSpec spec = Shell("true");
                                       spec.timeout = absl::ZeroDuration();
                                       return spec;
                                     },
                                     absl::StatusCode::kInvalidArgument, "timeout"}),
    [](const ::testing::TestParamInfo<StartErrorCase>& info) { return info.param.name; });

TEST(RunProcessTest, TimeoutKillsProgram) {
  ProcessSpec spec;
  spec.argv = {"sleep", "30"};
  spec.timeout = absl::Milliseconds(200);
  const absl::Time start = absl::Now();
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  const absl::Duration taken = absl::Now() - start;
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->timed_out);
  EXPECT_EQ(result->term_signal, SIGKILL);
  EXPECT_EQ(result->exit_code, -1);
  EXPECT_GE(result->wall_time, absl::Milliseconds(200));
  EXPECT_LT(taken, absl::Seconds(2));
  EXPECT_THAT(DescribeTermination(*result), StartsWith("timed out after "));
}

// Whether `pid` is gone or a zombie (its reaper may be slow or absent).
bool IsDead(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  if (text.empty()) return true;
  size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() &&
         (text[paren + 2] == 'Z' || text[paren + 2] == 'X');
}

bool BecomesDead(pid_t pid) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!IsDead(pid)) {
    if (absl::Now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(RunProcessTest, TimeoutKillsWholeTree) {
  // The background sleep holds stdout open: unless it is killed too, the run
  // would wait for it.
  // A second: time for the shell to start and say its child's pid on a
  // loaded machine.
  ProcessSpec spec = Shell("sleep 30 & echo $!; sleep 30");
  spec.timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  const absl::Duration taken = absl::Now() - start;
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->timed_out);
  EXPECT_EQ(result->term_signal, SIGKILL);
  EXPECT_LT(taken, absl::Seconds(5));
  int background = 0;
  ASSERT_TRUE(
      absl::SimpleAtoi(absl::StripTrailingAsciiWhitespace(result->stdout_text), &background))
      << result->stdout_text;
  EXPECT_TRUE(BecomesDead(background));
}

TEST(RunProcessTest, CancelKillsTheWholeTreeAtOnce) {
  ProcessSpec spec = Shell("sleep 30 & echo $!; sleep 30");
  CancelToken cancel;
  spec.cancel = &cancel;
  std::thread canceller([&cancel] {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    cancel.Cancel("test");
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  const absl::Duration taken = absl::Now() - start;
  canceller.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->cancelled);
  EXPECT_FALSE(result->timed_out);
  EXPECT_EQ(result->term_signal, SIGKILL);
  EXPECT_EQ(DescribeTermination(*result), "cancelled");
  // Woken by the token's descriptor, not by a poll interval.
  EXPECT_LT(taken, absl::Seconds(5));
  int background = 0;
  ASSERT_TRUE(
      absl::SimpleAtoi(absl::StripTrailingAsciiWhitespace(result->stdout_text), &background))
      << result->stdout_text;
  EXPECT_TRUE(BecomesDead(background));
}

TEST(RunProcessTest, AlreadyCancelledTokenKillsTheProgramBeforeItRuns) {
  ProcessSpec spec = Shell("sleep 30");
  CancelToken cancel;
  cancel.Cancel("before");
  spec.cancel = &cancel;
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->cancelled);
  EXPECT_LT(result->wall_time, absl::Seconds(2));
}

// Whether the program runs in a PID and mount namespace of its own, as an
// unsandboxed worker's compiles do.
class ChildDeathTest : public ::testing::TestWithParam<bool> {};

TEST_P(ChildDeathTest, ChildDiesWithTheThreadThatStartedIt) {
  const bool own_namespaces = GetParam();
  std::string root = testing::NewTempDir("death-");
  if (own_namespaces && !MountNamespacesWork(root + "/probe").ok()) {
    GTEST_SKIP() << "no namespaces here (needs root)";
  }
  ASSERT_TRUE(MakeDirectories(root + "/source").ok());
  ASSERT_TRUE(MakeDirectories(root + "/target").ok());
  // A helper process stands for a worker killed with SIGKILL: it runs a
  // program through RunProcess, prints the program's pid and is killed.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pid_t helper = fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    close(pipe_fds[0]);
    ProcessSpec spec;
    spec.argv = {"/bin/sh", "-c", "exec sleep 30"};
    if (own_namespaces) {
      spec.new_pid_namespace = true;
      spec.binds = {{root + "/source", root + "/target"}};
      spec.working_directory = root + "/target";
    }
    spec.on_started = [&](pid_t pid) {
      [[maybe_unused]] ssize_t written = write(pipe_fds[1], &pid, sizeof(pid));
    };
    RunProcess(spec).IgnoreError();
    _exit(0);
  }
  close(pipe_fds[1]);
  pid_t child = 0;
  ASSERT_EQ(read(pipe_fds[0], &child, sizeof(child)), static_cast<ssize_t>(sizeof(child)));
  close(pipe_fds[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(kill(child, 0), 0) << "the program should run while its parent does";
  kill(helper, SIGKILL);
  int status = 0;
  waitpid(helper, &status, 0);
  EXPECT_TRUE(BecomesDead(child));
}

// The caller dies while its child is still setting up (here: blocked writing
// to a FIFO that nobody reads yet), before the child has armed its death
// signal. Once the child goes on, it must see that and not run the program,
// in a PID namespace too, where getppid() cannot tell.
TEST_P(ChildDeathTest, AChildWhoseCallerDiedBeforeItExecutedNeverRunsTheProgram) {
  const bool own_namespaces = GetParam();
  std::string root = testing::NewTempDir("orphan-");
  if (own_namespaces && !MountNamespacesWork(root + "/probe").ok()) {
    GTEST_SKIP() << "no namespaces here (needs root)";
  }
  ASSERT_TRUE(MakeDirectories(root + "/source").ok());
  ASSERT_TRUE(MakeDirectories(root + "/target").ok());
  const std::string fifo = root + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string marker = root + "/ran";
  pid_t helper = fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    ProcessSpec spec;
    spec.argv = {"/bin/sh", "-c", "echo ran > " + marker};
    spec.child_writes = {{fifo, "x"}};
    if (own_namespaces) {
      spec.new_pid_namespace = true;
      spec.binds = {{root + "/source", root + "/target"}};
    }
    RunProcess(spec).IgnoreError();
    _exit(0);
  }
  // The child is blocked opening the FIFO for writing; its caller waits in
  // clone. Kill the caller, then let the child go on.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(helper, SIGKILL);
  int status = 0;
  waitpid(helper, &status, 0);
  int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  close(reader);
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the orphaned child ran the program";
}

INSTANTIATE_TEST_SUITE_P(Namespaces, ChildDeathTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "OwnPidAndMountNamespace" : "Plain";
                         });

TEST(RunProcessTest, LeftoverDescendantsAreKilledAtExit) {
  // The shell exits at once; its background child would hold stdout open for
  // 30 s.
  ProcessSpec spec = Shell("sleep 30 & echo $!");
  const absl::Time start = absl::Now();
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  const absl::Duration taken = absl::Now() - start;
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_FALSE(result->timed_out);
  EXPECT_LT(taken, absl::Seconds(5));
  int background = 0;
  ASSERT_TRUE(
      absl::SimpleAtoi(absl::StripTrailingAsciiWhitespace(result->stdout_text), &background))
      << result->stdout_text;
  EXPECT_TRUE(BecomesDead(background));
}

TEST(RunProcessTest, WorkingDirectoryHonoured) {
  std::string dir = MakeTempDir();
  WriteFile(dir + "/input.txt", "contents\n", 0644);
  ProcessSpec spec;
  spec.argv = {"sh", "-c", "pwd -P; cat input.txt"};
  spec.working_directory = dir;
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  char* real = realpath(dir.c_str(), nullptr);
  ASSERT_NE(real, nullptr);
  EXPECT_EQ(result->stdout_text, absl::StrCat(real, "\ncontents\n"));
  free(real);
}

TEST(RunProcessTest, RelativeProgramIsRelativeToWorkingDirectory) {
  std::string dir = MakeTempDir();
  WriteFile(dir + "/tool", "#!/bin/sh\necho tool ran\n", 0755);
  ProcessSpec spec;
  spec.argv = {"./tool"};
  spec.working_directory = dir;
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->stdout_text, "tool ran\n");
}

TEST(RunProcessTest, EnvironmentOverlaysInherited) {
  const char* parent_path = getenv("PATH");
  ASSERT_NE(parent_path, nullptr);
  ProcessSpec spec = Shell("echo \"$DISTCC_CUDA_TEST_VAR|$PATH\"");
  spec.environment["DISTCC_CUDA_TEST_VAR"] = "overlaid value";
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->stdout_text, absl::StrCat("overlaid value|", parent_path, "\n"));
}

TEST(RunProcessTest, EnvironmentWithoutInheritance) {
  ProcessSpec spec;
  spec.argv = {"/usr/bin/env"};
  spec.inherit_environment = false;
  spec.environment = {{"B", "2"}, {"A", "1 2"}};
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->stdout_text, "A=1 2\nB=2\n");
}

TEST(RunProcessTest, ProgramIsLookedUpInChildsPath) {
  std::string dir = MakeTempDir();
  WriteFile(dir + "/fake-nvcc", "#!/bin/sh\necho \"fake nvcc $1\"\n", 0755);
  ProcessSpec spec;
  spec.argv = {"fake-nvcc", "--version"};
  spec.environment["PATH"] = absl::StrCat(dir, ":/usr/bin:/bin");
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->stdout_text, "fake nvcc --version\n");
}

TEST(RunProcessTest, LargeOutputOnBothStreamsDoesNotDeadlock) {
  // stderr first: a runner that drained stdout before stderr would block.
  ProcessSpec spec = Shell(
      "head -c 5000000 /dev/zero >&2; head -c 5000000 /dev/zero; "
      "head -c 1000 /dev/zero >&2");
  spec.timeout = absl::Seconds(30);
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_EQ(result->stdout_text.size(), 5000000u);
  EXPECT_EQ(result->stderr_text.size(), 5001000u);
  EXPECT_FALSE(result->output_truncated);
}

TEST(RunProcessTest, OutputBeyondLimitIsDrainedAndTruncated) {
  ProcessSpec spec = Shell("echo start; head -c 5000000 /dev/zero; echo tiny >&2");
  spec.output_limit_bytes = 1000;
  spec.timeout = absl::Seconds(30);
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);  // not killed by SIGPIPE
  ASSERT_EQ(result->stdout_text.size(), 1000u);
  EXPECT_EQ(result->stdout_text.substr(0, 6), "start\n");
  EXPECT_EQ(result->stderr_text, "tiny\n");
  EXPECT_TRUE(result->output_truncated);
}

TEST(RunProcessTest, MeasuresCpuTime) {
  ProcessSpec spec = Shell("i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done");
  spec.timeout = absl::Seconds(30);
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_GT(result->user_cpu_time, absl::ZeroDuration());
  EXPECT_GE(result->system_cpu_time, absl::ZeroDuration());
  EXPECT_GE(result->wall_time, result->user_cpu_time / 2);
}

TEST(RunProcessTest, MeasuresPeakRssOfDescendants) {
  // dd fills one 100 MiB buffer; it runs as a child of the shell, so this
  // also checks that waited-for descendants count.
  ProcessSpec spec = Shell("dd if=/dev/zero of=/dev/null bs=100M count=1 2>/dev/null; true");
  spec.timeout = absl::Seconds(30);
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_GE(result->peak_rss_bytes, int64_t{90} << 20);
  EXPECT_LT(result->peak_rss_bytes, int64_t{1} << 30);
}

TEST(RunProcessTest, ChildWritesHappenBeforeTheProgram) {
  std::string dir = MakeTempDir();
  ASSERT_TRUE(WriteFileAtomically(dir + "/first", "old").ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/second", "old").ok());
  ProcessSpec spec = Shell("cat first; echo; cat second");
  spec.working_directory = dir;
  spec.child_writes = {{dir + "/first", "one"}, {dir + "/second", "two"}};
  // Not required: its failure is ignored.
  spec.child_writes.push_back({dir + "/no/such/folder/file", "x", /*required=*/false});
  pid_t seen = 0;
  bool own_group = false;
  spec.on_started = [&](pid_t pid) {
    seen = pid;
    own_group = getpgid(pid) == pid;
  };
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_EQ(result->stdout_text, "one\ntwo");
  EXPECT_GT(seen, 0);
  EXPECT_TRUE(own_group);
}

TEST(RunProcessTest, AFailedChildWriteStopsTheProgramAndNamesTheFile) {
  std::string dir = MakeTempDir();
  ProcessSpec spec = Shell("echo ran > ran");
  spec.working_directory = dir;
  spec.child_writes = {{dir + "/missing/cgroup.procs", "0"}};
  bool started = false;
  spec.on_started = [&](pid_t) { started = true; };
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound) << result.status();
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("cannot write '" + dir + "/missing/cgroup.procs' before running"));
  EXPECT_FALSE(started);
  EXPECT_NE(access((dir + "/ran").c_str(), F_OK), 0) << "the program must not have run";
}

TEST(RunProcessTest, ConcurrentCallsFromSeveralThreads) {
  constexpr int kThreads = 4;
  constexpr int kRunsPerThread = 12;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      for (int i = 0; i < kRunsPerThread; ++i) {
        ProcessSpec spec;
        std::string expected;
        switch (i % 3) {
          case 0:  // small output and an exit code
            spec = Shell(absl::StrCat("echo run-", t, "-", i, "; exit ", i));
            expected = absl::StrCat("run-", t, "-", i, "\n");
            break;
          case 1:  // more output than a pipe holds
            spec = Shell("head -c 1000000 /dev/zero");
            expected = std::string(1000000, '\0');
            break;
          case 2:  // a timeout, with a child that holds the pipes
            spec = Shell("sleep 30 & sleep 30");
            spec.timeout = absl::Milliseconds(50);
            break;
        }
        if (spec.timeout == absl::InfiniteDuration()) {
          spec.timeout = absl::Seconds(30);
        }
        absl::StatusOr<ProcessResult> result = RunProcess(spec);
        bool ok = result.ok() && result->stdout_text == expected;
        if (ok && i % 3 == 0) ok = result->exit_code == i;
        if (ok && i % 3 == 1) ok = result->exit_code == 0;
        if (ok && i % 3 == 2) ok = result->timed_out;
        if (!ok) {
          ++failures;
          ADD_FAILURE() << "thread " << t << " run " << i << ": "
                        << (result.ok() ? DescribeTermination(*result)
                                        : result.status().ToString());
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(RunProcessTest, BindMountIsSeenByTheChildAlone) {
  std::string root = testing::NewTempDir("bind-");
  std::string target = root + "/target";
  absl::Status works = MountNamespacesWork(target);
  if (!works.ok()) GTEST_SKIP() << "no mount namespaces here (needs root): " << works;
  ASSERT_TRUE(WriteFileAtomically(root + "/sandbox/sub/marker", "from the sandbox").ok());
  ProcessSpec spec;
  spec.argv = {"sh", "-c", "pwd; cat marker; echo written > out"};
  spec.binds = {{root + "/sandbox", target}};
  spec.working_directory = target + "/sub";
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0) << result->stderr_text;
  EXPECT_EQ(result->stdout_text, target + "/sub\nfrom the sandbox");
  // What it wrote is in the sandbox; the target stays an empty folder here.
  EXPECT_EQ(*ReadFile(root + "/sandbox/sub/out"), "written\n");
  EXPECT_TRUE(std::filesystem::is_empty(target));
}

TEST(RunProcessTest, ChildInAPidNamespaceOfItsOwnIsProcessOneAndTakesItsChildrenAlong) {
  std::string root = testing::NewTempDir("pidns-");
  if (!MountNamespacesWork(root + "/probe").ok()) GTEST_SKIP() << "no namespaces here (needs root)";
  ProcessSpec spec;
  // A child that outlives its parent inside: it dies with process 1.
  spec.argv = {"sh", "-c", "echo $$; sh -c 'echo $$'; (sleep 30 &) ; echo $$ > " + root + "/pid"};
  spec.new_pid_namespace = true;
  spec.timeout = absl::Seconds(20);
  absl::Time start = absl::Now();
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0) << result->stderr_text;
  EXPECT_EQ(result->stdout_text, "1\n2\n") << "the same process ids on every run";
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "the orphaned sleep kept the pipes open";
  // The same twice.
  absl::StatusOr<ProcessResult> again = RunProcess(spec);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->stdout_text, result->stdout_text);
}

TEST(RunProcessTest, BindMountOntoAMissingFolderSaysWhat) {
  std::string root = testing::NewTempDir("bind-");
  if (!MountNamespacesWork(root + "/probe").ok()) GTEST_SKIP() << "no mount namespaces here";
  ProcessSpec spec;
  spec.argv = {"true"};
  spec.binds = {{root, root + "/missing"}};
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              ::testing::HasSubstr("cannot mount '" + root + "' at '" + root + "/missing'"));
}

// How a worker running as root lets bwrap, run as the sandbox user, reach a
// toolkit in a folder only its owner can enter: the child binds it at a
// folder that user can reach, then gives up its user.
TEST(RunProcessTest, BindsAreMadeBeforeTheUserIsGivenUpAndReadOnlyWhereAsked) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (runs the program as nobody)";
  std::string root = testing::NewTempDir("binds-");
  absl::Status works = MountNamespacesWork(root + "/probe");
  if (!works.ok()) GTEST_SKIP() << "no mount namespaces here: " << works;
  ASSERT_TRUE(WriteFileAtomically(root + "/private/toolkit/bin/tool", "the tool\n").ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/private/out/keep", "").ok());
  ASSERT_EQ(chmod((root + "/private").c_str(), 0700), 0);
  // Writable by anyone: only the read-only bind keeps the program out.
  ASSERT_EQ(chmod((root + "/private/toolkit/bin").c_str(), 0777), 0);
  ASSERT_EQ(chmod((root + "/private/out").c_str(), 0777), 0);
  ASSERT_TRUE(MakeDirectories(root + "/open/toolkit").ok());
  ASSERT_TRUE(MakeDirectories(root + "/open/out").ok());
  ProcessSpec spec =
      Shell("id -u; cat bin/tool; cat " + root +
            "/private/toolkit/bin/tool 2>/dev/null || echo private;"
            "echo x > bin/new 2>/dev/null || echo read-only; echo x > ../out/new && echo writable");
  spec.binds = {{root + "/private/toolkit", root + "/open/toolkit", true},
                {root + "/private/out", root + "/open/out", false}};
  spec.working_directory = root + "/open/toolkit";
  spec.run_as = ProcessSpec::Identity{65534, 65534};
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0) << result->stderr_text;
  EXPECT_EQ(result->stdout_text, "65534\nthe tool\nprivate\nread-only\nwritable\n");
  EXPECT_TRUE(IsRegularFile(root + "/private/out/new"));
  // Nothing is left mounted here.
  EXPECT_TRUE(std::filesystem::is_empty(root + "/open/toolkit"));
  EXPECT_THAT(*ReadFile("/proc/self/mountinfo"), Not(HasSubstr(root + "/open")));
}

TEST(RunProcessTest, AFailedBindNamesItsSourceAndTarget) {
  std::string root = testing::NewTempDir("binds-");
  if (!MountNamespacesWork(root + "/probe").ok()) GTEST_SKIP() << "no mount namespaces here";
  ASSERT_TRUE(MakeDirectories(root + "/a").ok());
  ProcessSpec spec;
  spec.argv = {"true"};
  spec.binds = {{root, root + "/a"}, {root, root + "/missing"}};
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("cannot mount '" + root + "' at '" + root + "/missing'"));
}

TEST(DescribeTerminationTest, Cases) {
  struct Case {
    ProcessResult result;
    std::string expected;
  };
  ProcessResult exited;
  exited.exit_code = 2;
  ProcessResult signalled;
  signalled.term_signal = SIGSEGV;
  ProcessResult timed_out;
  timed_out.timed_out = true;
  timed_out.term_signal = SIGKILL;
  timed_out.wall_time = absl::Milliseconds(5003);
  ProcessResult quick_timeout = timed_out;
  quick_timeout.wall_time = absl::Microseconds(250400);
  ProcessResult never_ran;
  const Case cases[] = {
      {exited, "exit code 2"},
      {signalled, "killed by signal 11 (Segmentation fault)"},
      {timed_out, "timed out after 5s"},
      {quick_timeout, "timed out after 250ms"},
      {never_ran, "did not run to completion"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(DescribeTermination(c.result), c.expected);
  }
}

}  // namespace
}  // namespace distcc_cuda
