// SPDX-License-Identifier: Apache-2.0
// The worker's sandbox: how its file system is planned, and (as root, with
// bubblewrap and the real nvcc) what a program inside can and cannot do.
#include "common/process/sandbox.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "tests/support/process_tree.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// The mounts as "op source dest" lines, for matching.
std::string Lines(const std::vector<std::string>& args) {
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& op = args[i];
    if (op == "--bind" || op == "--ro-bind" || op == "--symlink") {
      absl::StrAppend(&out, op, " ", args[i + 1], " ", args[i + 2], "\n");
      i += 2;
    } else if (op == "--dir" || op == "--proc" || op == "--dev" || op == "--chdir" ||
               op == "--remount-ro") {
      absl::StrAppend(&out, op, " ", args[i + 1], "\n");
      i += 1;
    }
  }
  return out;
}

void Touch(const std::string& path) { ASSERT_TRUE(WriteFileAtomically(path, "x").ok()) << path; }

TEST(SandboxMountArgumentsTest, TreeAtTheRootSystemPathsReadOnlyTempUnderRun) {
  std::string dir = testing::NewTempDir("mounts-");
  Touch(dir + "/tree/src/a.cu");
  absl::StatusOr<std::vector<std::string>> args = SandboxMountArguments(
      {"/usr", "/etc/ld.so.cache"},
      SandboxTask{dir + "/tree", "/work/proj", dir + "/tmp", "/work/proj/src"});
  ASSERT_TRUE(args.ok()) << args.status();
  std::string lines = Lines(*args);
  EXPECT_THAT(lines, HasSubstr("--ro-bind /usr /usr\n"));
  EXPECT_THAT(lines, HasSubstr("--ro-bind /etc/ld.so.cache /etc/ld.so.cache\n"));
  EXPECT_THAT(lines, HasSubstr(absl::StrCat("--bind ", dir, "/tree /work/proj\n")));
  EXPECT_THAT(lines, HasSubstr(absl::StrCat("--bind ", dir, "/tmp /run/distcc-cuda/tmp\n")));
  EXPECT_THAT(lines, HasSubstr("--proc /proc\n--dev /dev\n"));
  EXPECT_THAT(lines, HasSubstr("--remount-ro /\n--chdir /work/proj/src\n"));
  // /etc holds ld.so's cache and nothing else.
  for (absl::string_view line : absl::StrSplit(lines, '\n')) {
    if (line.find("/etc") == absl::string_view::npos) continue;
    EXPECT_TRUE(line == "--dir /etc" || line == "--ro-bind /etc/ld.so.cache /etc/ld.so.cache")
        << line;
  }
}

// torch's headers installed by pip into /usr/local/lib/python3.X: the
// workspace lies beside the system's folders, whose common ancestors are
// rebuilt entry by entry around it.
TEST(SandboxMountArgumentsTest, WorkspaceBesideSystemFoldersIsMergedAtTheirAncestors) {
  std::string dir = testing::NewTempDir("mounts-");
  std::string usr = dir + "/usr";
  Touch(usr + "/bin/gcc");
  Touch(usr + "/local/cuda/bin/nvcc");
  Touch(dir + "/tree/torch/include/t.h");
  absl::StatusOr<std::vector<std::string>> args = SandboxMountArguments(
      {usr + "/bin", usr + "/local/cuda"},
      SandboxTask{dir + "/tree", usr + "/local/lib/py", dir + "/tmp", usr + "/local/lib/py"});
  ASSERT_TRUE(args.ok()) << args.status();
  std::string lines = Lines(*args);
  EXPECT_THAT(lines, HasSubstr(absl::StrCat("--ro-bind ", usr, "/bin ", usr, "/bin\n")));
  EXPECT_THAT(lines,
              HasSubstr(absl::StrCat("--ro-bind ", usr, "/local/cuda ", usr, "/local/cuda\n")));
  EXPECT_THAT(lines, HasSubstr(absl::StrCat("--bind ", dir, "/tree ", usr, "/local/lib/py\n")));
}

// The review's attack: a workspace root at a system folder, or an input at a
// system file's path, would run the submitter's gcc inside the sandbox. The
// plan refuses (ValidateCompileUnit refuses such units before that).
TEST(SandboxMountArgumentsTest, InputsNeverReplaceOrJoinTheSystemsFiles) {
  std::string dir = testing::NewTempDir("mounts-");
  std::string sys = dir + "/sys";
  Touch(sys + "/bin/gcc");
  Touch(dir + "/tree" + sys + "/bin/gcc");
  Touch(dir + "/over/gcc");
  Touch(dir + "/beside/bin/tool");  // a folder of the system's name, to join it
  for (const SandboxTask& task :
       {SandboxTask{dir + "/tree", "/", dir + "/tmp", "/"},
        SandboxTask{dir + "/over", sys + "/bin", dir + "/tmp", sys + "/bin"},
        SandboxTask{dir + "/beside", sys, dir + "/tmp", sys}}) {
    absl::StatusOr<std::vector<std::string>> args = SandboxMountArguments({sys + "/bin"}, task);
    EXPECT_EQ(args.status().code(), absl::StatusCode::kInvalidArgument)
        << task.workspace_root << ": " << (args.ok() ? Lines(*args) : "");
  }
}

// flash-attention next to torch in ~/.pyenv: the common root is "/", and
// each of the tree's top folders is bound at its own path.
TEST(SandboxMountArgumentsTest, RootWorkspaceBindsEachTopFolder) {
  std::string dir = testing::NewTempDir("mounts-");
  std::string sys = dir + "/sys";
  Touch(sys + "/include/b.h");
  Touch(dir + "/tree/work/fa/x.cu");
  Touch(dir + "/tree/root/.pyenv/torch.h");
  absl::StatusOr<std::vector<std::string>> args =
      SandboxMountArguments({sys}, SandboxTask{dir + "/tree", "/", dir + "/tmp", "/work/fa"});
  ASSERT_TRUE(args.ok()) << args.status();
  std::string lines = Lines(*args);
  EXPECT_THAT(lines, HasSubstr(absl::StrCat("--bind ", dir, "/tree/work /work\n")));
  EXPECT_THAT(lines, HasSubstr(absl::StrCat("--bind ", dir, "/tree/root /root\n")));
  EXPECT_THAT(lines, HasSubstr(absl::StrCat("--ro-bind ", sys, " ", sys, "\n")));
  EXPECT_THAT(lines, Not(HasSubstr(absl::StrCat(dir, "/tree /\n"))))
      << "nothing is mounted over the root itself";
}

TEST(SandboxMountArgumentsTest, SymlinkedSystemPathsStaySymlinks) {
  std::string dir = testing::NewTempDir("mounts-");
  fs::create_directories(dir + "/usr/lib");
  fs::create_symlink("usr/lib", dir + "/lib");
  absl::StatusOr<std::vector<std::string>> args = SandboxMountArguments(
      {dir + "/usr", dir + "/lib"}, SandboxTask{dir + "/tree", "/w", dir + "/tmp", "/w"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(Lines(*args), HasSubstr(absl::StrCat("--symlink usr/lib ", dir, "/lib\n")));
}

TEST(SandboxMountArgumentsTest, RelativeOrUnnormalisedPathsAreRefused) {
  for (const SandboxTask& task : {SandboxTask{"/t", "work", "/tmp/x", "/work"},
                                  SandboxTask{"/t", "/work/../etc", "/tmp/x", "/work"},
                                  SandboxTask{"tree", "/work", "/tmp/x", "/work"}}) {
    EXPECT_EQ(SandboxMountArguments({"/usr"}, task).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_FALSE(SandboxMountArguments({"/"}, SandboxTask{"/t", "/w", "/x", "/w"}).ok());
}

// A system path the sandbox user cannot reach at its own path (a toolkit in
// a 0700 home folder) is bound from the folder it is staged at, and still
// appears inside at its own path; what the plan reads of it (entries, links)
// it reads on this machine, at the path itself.
TEST(SandboxMountArgumentsTest, StagedSystemPathsBindFromWhereTheyAreStaged) {
  std::string dir = testing::NewTempDir("mounts-");
  std::string home = dir + "/home/u";
  Touch(home + "/cuda/bin/nvcc");
  Touch(home + "/cuda/lib64/libcudart.so");
  Touch(home + "/cuda/nvvm/bin/cicc");
  fs::create_symlink("cuda", home + "/cuda-link");
  const std::string stage = dir + "/tasks/sandbox-system";
  struct Case {
    std::string name;
    std::vector<std::string> system_paths;
    std::map<std::string, std::string> staged;
    std::vector<std::string> expected;    // lines of the plan
    std::vector<std::string> unexpected;  // no line holds one of these
  };
  const std::vector<Case> cases = {
      {"the staged path binds from its staging folder, at its own path",
       {"/usr", home + "/cuda"},
       {{home + "/cuda", stage + "/1"}},
       {"--ro-bind /usr /usr", "--dir " + dir + "/home/u",
        "--ro-bind " + stage + "/1 " + home + "/cuda"},
       {"--ro-bind " + home + "/cuda "}},
      {"not staged: from its own path, as before",
       {"/usr", home + "/cuda"},
       {},
       {"--ro-bind " + home + "/cuda " + home + "/cuda"},
       {stage}},
      {"a system path inside a staged one: the staged one's entries, from its staging folder",
       {home + "/cuda", home + "/cuda/nvvm"},
       {{home + "/cuda", stage + "/0"}},
       {"--dir " + home + "/cuda", "--ro-bind " + stage + "/0/bin " + home + "/cuda/bin",
        "--ro-bind " + stage + "/0/lib64 " + home + "/cuda/lib64",
        "--ro-bind " + stage + "/0/nvvm " + home + "/cuda/nvvm"},
       {"--ro-bind " + home + "/cuda/"}},
      {"a link stays a link, its target read here",
       {home + "/cuda-link", home + "/cuda"},
       {{home + "/cuda", stage + "/1"}},
       {"--symlink cuda " + home + "/cuda-link", "--ro-bind " + stage + "/1 " + home + "/cuda"},
       {}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<std::string>> args = SandboxMountArguments(
        c.system_paths, SandboxTask{dir + "/tree", "/w", dir + "/tmp", "/w"}, c.staged);
    ASSERT_TRUE(args.ok()) << c.name << ": " << args.status();
    std::string lines = Lines(*args);
    for (const std::string& line : c.expected) {
      EXPECT_THAT(lines, HasSubstr(line + "\n")) << c.name;
    }
    for (const std::string& part : c.unexpected) {
      EXPECT_THAT(lines, Not(HasSubstr(part))) << c.name;
    }
  }
}

TEST(SandboxMountArgumentsTest, AStagedPathMustBeASystemPathStagedAtAnAbsolutePath) {
  SandboxTask task{"/t", "/w", "/x", "/w"};
  for (const std::map<std::string, std::string>& staged :
       std::vector<std::map<std::string, std::string>>{
           {{"/opt/other", "/var/tmp/stage/0"}},  // not a system path
           {{"/opt/cuda", "stage/0"}},            // relative
           {{"/opt/cuda", "/var/tmp/../stage"}}}) {
    EXPECT_EQ(SandboxMountArguments({"/usr", "/opt/cuda"}, task, staged).status().code(),
              absl::StatusCode::kInvalidArgument)
        << staged.begin()->first << " at " << staged.begin()->second;
  }
}

// The real thing: bubblewrap, an unprivileged user, the real nvcc's toolkit.
class RealSandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (the worker's sandbox user is nobody)";
    nvcc_ = testing::RealNvccPath();
    if (nvcc_.empty()) GTEST_SKIP() << "needs the real nvcc at /usr/local/cuda/bin/nvcc";
    if (access("/usr/bin/bwrap", X_OK) != 0) GTEST_SKIP() << "needs bubblewrap";
    dir_ = testing::NewTempDir("sandbox-");
    SandboxOptions options;
    options.toolkit_root = "/usr/local/cuda";
    absl::StatusOr<std::unique_ptr<Sandbox>> sandbox = Sandbox::Create(options, nvcc_, {dir_});
    ASSERT_TRUE(sandbox.ok()) << sandbox.status();
    sandbox_ = std::move(*sandbox);
  }

  // Runs `script` with /bin/sh inside a task whose tree holds in/a.h
  // (an input) and an output folder out/, at workspace root /work/p.
  ProcessResult RunInside(const std::string& script) {
    std::string task = dir_ + "/task";
    RemoveAll(task).IgnoreError();
    EXPECT_TRUE(WriteFileAtomically(task + "/tree/in/a.h", "input").ok());
    chmod((task + "/tree/in/a.h").c_str(), 0444);
    EXPECT_TRUE(MakeDirectories(task + "/tree/out").ok());
    EXPECT_TRUE(MakeDirectories(task + "/tmp").ok());
    EXPECT_TRUE(sandbox_->GrantReach(task).ok());
    EXPECT_TRUE(sandbox_->GrantWrite(task + "/tree/out").ok());
    EXPECT_TRUE(sandbox_->GrantWrite(task + "/tmp").ok());
    ProcessSpec spec;
    spec.argv = {"/bin/sh", "-c", script};
    spec.timeout = absl::Seconds(30);
    absl::StatusOr<ProcessSpec> wrapped =
        sandbox_->Wrap(spec, SandboxTask{task + "/tree", "/work/p", task + "/tmp", "/work/p"});
    EXPECT_TRUE(wrapped.ok()) << wrapped.status();
    absl::StatusOr<ProcessResult> ran = RunProcess(*wrapped);
    EXPECT_TRUE(ran.ok()) << ran.status();
    return ran.ok() ? *ran : ProcessResult{};
  }

  std::string nvcc_;
  std::string dir_;
  std::unique_ptr<Sandbox> sandbox_;
};

TEST_F(RealSandboxTest, SeesOnlyTheToolchainItsTreeAndNoNetwork) {
  // A canary beside the task folder and one in /etc.
  Touch(dir_ + "/canary");
  ProcessResult run =
      RunInside("echo pid=$$ uid=$(id -u); ls /; ls /etc; cat /etc/hostname /etc/shadow " + dir_ +
                "/canary 2>&1; echo cwd=$(pwd); cat in/a.h; echo; cat /proc/net/dev | tail -n +3");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_THAT(run.stdout_text, HasSubstr("pid=1 uid=65534"));
  EXPECT_THAT(run.stdout_text, HasSubstr("cwd=/work/p"));
  EXPECT_THAT(run.stdout_text, HasSubstr("\ninput\n")) << "the tree is at the client's path";
  EXPECT_THAT(run.stdout_text, HasSubstr("/etc/hostname: No such file"));
  EXPECT_THAT(run.stdout_text, HasSubstr("/etc/shadow: No such file"));
  EXPECT_THAT(run.stdout_text, HasSubstr("canary: No such file"));
  EXPECT_THAT(run.stdout_text, Not(HasSubstr("root\n"))) << "no home folders: " << run.stdout_text;
  EXPECT_THAT(run.stdout_text, Not(HasSubstr("eth"))) << "only loopback: " << run.stdout_text;
}

TEST_F(RealSandboxTest, WritesOnlyItsOutputFolderAndTemp) {
  ProcessResult run = RunInside(
      "echo x > out/o.o && echo x > /run/distcc-cuda/tmp/t && echo wrote;"
      "echo x > in/a.h 2>/dev/null || echo input-read-only;"
      "echo x > in/new 2>/dev/null || echo input-folder-read-only;"
      "echo x > /usr/evil 2>/dev/null || echo usr-read-only;"
      "echo x > /evil 2>/dev/null || echo root-read-only;"
      "mount -t tmpfs none /work 2>/dev/null || echo no-mount");
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  for (const char* expected : {"wrote", "input-read-only", "input-folder-read-only",
                               "usr-read-only", "root-read-only", "no-mount"}) {
    EXPECT_THAT(run.stdout_text, HasSubstr(expected));
  }
  EXPECT_EQ(*ReadFile(dir_ + "/task/tree/in/a.h"), "input");
  EXPECT_TRUE(IsRegularFile(dir_ + "/task/tree/out/o.o"));
  EXPECT_FALSE(fs::exists("/usr/evil"));
}

TEST_F(RealSandboxTest, TheRealNvccCompilesInside) {
  std::string task = dir_ + "/task";
  ASSERT_TRUE(WriteFileAtomically(task + "/tree/k.cu", "__global__ void k() {}\n").ok());
  ASSERT_TRUE(MakeDirectories(task + "/tmp").ok());
  ASSERT_TRUE(sandbox_->GrantReach(task).ok());
  ASSERT_TRUE(sandbox_->GrantWrite(task + "/tree").ok());
  ASSERT_TRUE(sandbox_->GrantWrite(task + "/tmp").ok());
  ProcessSpec spec;
  spec.argv = {nvcc_, "-gencode", "arch=compute_100,code=sm_100", "-c", "k.cu", "-o", "k.o"};
  spec.timeout = absl::Minutes(2);
  absl::StatusOr<ProcessSpec> wrapped =
      sandbox_->Wrap(spec, SandboxTask{task + "/tree", "/work/p", task + "/tmp", "/work/p"});
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  absl::StatusOr<ProcessResult> ran = RunProcess(*wrapped);
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(ran->exit_code, 0) << ran->stderr_text;
  EXPECT_TRUE(IsRegularFile(task + "/tree/k.o"));
  // The CPU time and peak of the compile reach the caller through bwrap.
  EXPECT_GT(ran->user_cpu_time + ran->system_cpu_time, absl::Milliseconds(100));
  EXPECT_GT(ran->peak_rss_bytes, 20 << 20);
}

TEST(SandboxCreateTest, MissingBubblewrapSaysWhatToDo) {
  SandboxOptions options;
  options.bwrap = "/nonexistent/bwrap";
  absl::StatusOr<std::unique_ptr<Sandbox>> sandbox =
      Sandbox::Create(options, "/bin/true", {testing::NewTempDir("sandbox-")});
  ASSERT_FALSE(sandbox.ok());
  EXPECT_EQ(sandbox.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(sandbox.status().message(), HasSubstr("apt-get install bubblewrap"));
  EXPECT_THAT(sandbox.status().message(), HasSubstr("--insecure-no-sandbox"));
}

TEST(SandboxCreateTest, AnUnreachableTaskFolderIsRefusedNamingIt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (the sandbox user differs from ours)";
  if (access("/usr/bin/bwrap", X_OK) != 0) GTEST_SKIP() << "needs bubblewrap";
  std::string dir = testing::NewTempDir("sandbox-");
  ASSERT_TRUE(MakeDirectories(dir + "/private/tasks").ok());
  chmod((dir + "/private").c_str(), 0700);
  absl::StatusOr<std::unique_ptr<Sandbox>> sandbox =
      Sandbox::Create(SandboxOptions{}, "/bin/true", {dir + "/private/tasks"});
  ASSERT_FALSE(sandbox.ok());
  EXPECT_THAT(sandbox.status().message(), HasSubstr(dir + "/private is not searchable"));
}

// A toolkit in a folder only its owner can enter: pip's in a 0700 home, a
// clone's build folder (the fake's toolkit) in `mktemp -d`. The sandbox user
// cannot search the way there; each compile's process binds it where that
// user can before becoming it, and nvcc still runs at its own path inside.
class PrivateToolkitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (the worker's sandbox user is nobody)";
    if (access("/usr/bin/bwrap", X_OK) != 0) GTEST_SKIP() << "needs bubblewrap";
    dir_ = testing::NewTempDir("private-toolkit-");
    home_ = dir_ + "/home";
    ASSERT_TRUE(MakeDirectories(home_).ok());
    ASSERT_EQ(chmod(home_.c_str(), 0700), 0);
  }

  absl::StatusOr<std::unique_ptr<Sandbox>> Create(const std::string& nvcc,
                                                  const std::string& bwrap = "bwrap") {
    SandboxOptions options;
    options.bwrap = bwrap;
    options.toolkit_root = fs::path(nvcc).parent_path().parent_path().string();
    return Sandbox::Create(options, nvcc, {dir_ + "/tasks"});
  }

  // Runs `argv` in a task whose tree holds k.cu, at workspace root /work/p.
  ProcessResult Compile(const Sandbox& sandbox, const std::vector<std::string>& argv) {
    std::string task = dir_ + "/task";
    RemoveAll(task).IgnoreError();
    EXPECT_TRUE(WriteFileAtomically(task + "/tree/k.cu", "__global__ void k() {}\n").ok());
    EXPECT_TRUE(MakeDirectories(task + "/tmp").ok());
    EXPECT_TRUE(sandbox.GrantReach(task).ok());
    EXPECT_TRUE(sandbox.GrantWrite(task + "/tree").ok());
    EXPECT_TRUE(sandbox.GrantWrite(task + "/tmp").ok());
    ProcessSpec spec;
    spec.argv = argv;
    spec.timeout = absl::Minutes(2);
    absl::StatusOr<ProcessSpec> wrapped =
        sandbox.Wrap(spec, SandboxTask{task + "/tree", "/work/p", task + "/tmp", "/work/p"});
    EXPECT_TRUE(wrapped.ok()) << wrapped.status();
    if (!wrapped.ok()) return ProcessResult{};
    absl::StatusOr<ProcessResult> ran = RunProcess(*wrapped);
    EXPECT_TRUE(ran.ok()) << ran.status();
    return ran.ok() ? *ran : ProcessResult{};
  }

  std::string dir_;
  std::string home_;  // 0700
};

TEST_F(PrivateToolkitTest, TheFakeNvccCompilesAsNobodyAtItsOwnPath) {
  const std::string nvcc = testing::FakeNvccWithRelease(home_, "13.0");
  absl::StatusOr<std::unique_ptr<Sandbox>> sandbox = Create(nvcc);
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  ProcessResult run = Compile(**sandbox, {"/bin/sh", "-c",
                                          "id -u; ls " + home_ + "/cuda-13.0/bin; " + nvcc +
                                              " -c k.cu -o k.o && echo compiled"});
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "65534\nfake_nvcc\nnvcc\ncompiled\n");
  EXPECT_TRUE(IsRegularFile(dir_ + "/task/tree/k.o"));
  // Bound in the compile's own mount namespace only: nothing is left here.
  EXPECT_THAT(*ReadFile("/proc/self/mountinfo"), Not(HasSubstr("sandbox-system")));
  for (const auto& entry : fs::directory_iterator(dir_ + "/tasks/sandbox-system")) {
    EXPECT_TRUE(fs::is_empty(entry.path())) << entry.path();
  }
}

// The real toolkit, hard-linked into the private folder (pip's layout is
// the same: bin/nvcc, nvvm/bin/cicc, bin/ptxas beside each other).
TEST_F(PrivateToolkitTest, TheRealNvccCompilesAsNobodyAtItsOwnPath) {
  if (testing::RealNvccPath().empty()) GTEST_SKIP() << "needs the real nvcc";
  const std::string toolkit = fs::canonical(testing::RealNvccPath()).parent_path().parent_path();
  ProcessSpec copy;
  copy.argv = {"cp", "-al", toolkit, home_ + "/cuda"};
  copy.timeout = absl::Minutes(2);
  absl::StatusOr<ProcessResult> copied = RunProcess(copy);
  if (!copied.ok() || copied->exit_code != 0) {
    GTEST_SKIP() << "cannot hard-link " << toolkit
                 << " here: " << (copied.ok() ? copied->stderr_text : copied.status().ToString());
  }
  const std::string nvcc = home_ + "/cuda/bin/nvcc";
  absl::StatusOr<std::unique_ptr<Sandbox>> sandbox = Create(nvcc);
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  ProcessResult run = Compile(
      **sandbox, {nvcc, "-gencode", "arch=compute_100,code=sm_100", "-c", "k.cu", "-o", "k.o"});
  EXPECT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_TRUE(IsRegularFile(dir_ + "/task/tree/k.o"));
}

// Where binding cannot help: the toolkit's own folder is closed to the
// sandbox user. The worker says so in one line, and what to change.
TEST_F(PrivateToolkitTest, AToolkitFolderClosedToTheSandboxUserIsRefusedSayingWhatToDo) {
  const std::string nvcc = testing::FakeNvccWithRelease(dir_, "13.0");
  ASSERT_EQ(chmod((dir_ + "/cuda-13.0").c_str(), 0700), 0);
  absl::StatusOr<std::unique_ptr<Sandbox>> sandbox = Create(nvcc);
  ASSERT_FALSE(sandbox.ok());
  EXPECT_EQ(sandbox.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(sandbox.status().message(), HasSubstr("the toolkit is out of the sandbox's reach"));
  EXPECT_THAT(sandbox.status().message(), HasSubstr("chmod o+rx " + dir_ + "/cuda-13.0)"));
  EXPECT_THAT(sandbox.status().message(), Not(HasSubstr("\n")));
}

// bwrap arms the death signal of the process it sandboxes only at the end
// of its set-up. A worker killed outright before then (here a helper process
// stands for it, and a wrapper holds bwrap's set-up with --block-fd on a FIFO
// until the helper is dead) must still take the compile along.
TEST_F(PrivateToolkitTest, AWorkerKilledWhileTheSandboxIsSetUpLeavesNoCompileRunning) {
  const std::string nvcc = testing::FakeNvccWithRelease(dir_, "13.0");
  const std::string fifo = dir_ + "/hold-fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(chmod(fifo.c_str(), 0666), 0);  // opened by bwrap as the sandbox user
  const std::string holding = dir_ + "/holding";
  const std::string wrapper = dir_ + "/bwrap-held";
  const std::string script = absl::StrCat("#!/bin/sh\nif [ -e ", holding, " ]; then exec 3<>", fifo,
                                          "; exec /usr/bin/bwrap --block-fd 3 \"$@\"; fi\n",
                                          "exec /usr/bin/bwrap \"$@\"\n");
  ASSERT_TRUE(WriteFileAtomically(wrapper, script).ok());
  ASSERT_EQ(chmod(wrapper.c_str(), 0755), 0);
  absl::StatusOr<std::unique_ptr<Sandbox>> sandbox = Create(nvcc, wrapper);
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const std::string task = dir_ + "/task";
  ASSERT_TRUE(MakeDirectories(task + "/tree").ok());
  ASSERT_TRUE(MakeDirectories(task + "/tmp").ok());
  ASSERT_TRUE((*sandbox)->GrantReach(task).ok());
  ASSERT_TRUE((*sandbox)->GrantWrite(task + "/tree").ok());
  ASSERT_TRUE((*sandbox)->GrantWrite(task + "/tmp").ok());
  const std::string marker = absl::StrCat("compile-of-", getpid());
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", "echo ran > ran; sleep 30 # " + marker};
  spec.timeout = absl::Seconds(60);
  absl::StatusOr<ProcessSpec> wrapped =
      (*sandbox)->Wrap(spec, SandboxTask{task + "/tree", "/work/p", task + "/tmp", "/work/p"});
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  ASSERT_TRUE(WriteFileAtomically(holding, "").ok());
  pid_t helper = fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    RunProcess(*wrapped).IgnoreError();
    _exit(0);
  }
  // bwrap and the process it set up to run the compile, held before it is
  // armed.
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (testing::ProcessesMentioning(marker) < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GE(testing::ProcessesMentioning(marker), 2) << "the sandbox never started";
  absl::SleepFor(absl::Milliseconds(300));
  kill(helper, SIGKILL);
  int status = 0;
  waitpid(helper, &status, 0);
  absl::SleepFor(absl::Milliseconds(300));
  // Let the set-up go on, if anything is left to read the FIFO.
  int writer = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  if (writer >= 0) {
    EXPECT_EQ(write(writer, "x", 1), 1);
    close(writer);
  }
  deadline = absl::Now() + absl::Seconds(5);
  while (testing::ProcessesMentioning(marker) > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(testing::ProcessesMentioning(marker), 0)
      << "the compile outlived its worker:\n"
      << testing::DescribeProcessesMentioning(marker);
  EXPECT_FALSE(fs::exists(task + "/tree/ran")) << "the compile ran after its worker died";
}

}  // namespace
}  // namespace distcc_cuda

namespace distcc_cuda {
namespace {

// What a compile leaves in its tree is read back without following a link:
// the review's attack renamed an output's folder and put a link to a root-only
// folder in its place.
TEST(CopyFileBeneathTest, FollowsNoLinkAnywhereOnThePath) {
  std::string dir = testing::NewTempDir("beneath-");
  ASSERT_TRUE(WriteFileAtomically(dir + "/secret/token.txt", "TOP-SECRET").ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/tree/ok/a.o", "object").ok());
  fs::create_symlink(dir + "/secret", dir + "/tree/sub");
  fs::create_symlink(dir + "/secret/token.txt", dir + "/tree/ok/link.o");
  EXPECT_TRUE(CopyFileBeneath(dir + "/tree", "ok/a.o", dir + "/copy1").ok());
  EXPECT_EQ(*ReadFile(dir + "/copy1"), "object");
  for (const char* relative : {"sub/token.txt", "ok/link.o"}) {
    absl::Status status = CopyFileBeneath(dir + "/tree", relative, dir + "/copy2");
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << relative << ": " << status;
    EXPECT_FALSE(fs::exists(dir + "/copy2")) << relative;
  }
  EXPECT_EQ(CopyFileBeneath(dir + "/tree", "ok/missing.o", dir + "/copy3").code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(CopyFileBeneath(dir + "/tree", "../secret/token.txt", dir + "/copy4").ok());
  EXPECT_FALSE(CopyFileBeneath(dir + "/tree", "ok", dir + "/copy5").ok()) << "a folder";
}

}  // namespace
}  // namespace distcc_cuda
