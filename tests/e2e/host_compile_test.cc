// SPDX-License-Identifier: Apache-2.0
// The host C++ compiler behind `distcc-cuda build -- COMMAND`: the .cpp
// compiles of a build go to the cluster like its .cu ones, through two
// loopback workers and through the embedded default, and come back as the
// local g++ would have written them; what cannot go (a refused argument,
// another compiler than the toolchain's) runs here and says why.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "tests/support/loopback_cluster.h"
#include "tests/support/process_tree.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kHeader[] = "#pragma once\n#include <vector>\ninline int Count() { return 3; }\n";
constexpr char kSource[] = R"(#include "api.h"
#include <string>
std::string Describe() { std::vector<int> v(Count()); return std::to_string(v.size()); }
)";
// The compile a build tool would run, with debug information (which names
// the source's folder) and a dependency file.
constexpr char kCompile[] =
    "$CXX -g -O2 -fPIC -std=c++17 -Iinclude -MMD -c src/api.cpp -o obj/api.o";

class HostCompileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nvcc_ = testing::RealNvccPath();
    if (nvcc_.empty()) GTEST_SKIP() << "needs the real nvcc at /usr/local/cuda/bin/nvcc";
    root_ = testing::NewTempDir("host-compile-");
    proj_ = root_ + "/proj";
    ASSERT_TRUE(WriteFileAtomically(proj_ + "/include/api.h", kHeader).ok());
    ASSERT_TRUE(WriteFileAtomically(proj_ + "/src/api.cpp", kSource).ok());
    fs::create_directories(proj_ + "/obj");
  }

  // `distcc-cuda build FLAGS -- sh -c SCRIPT` in the project.
  ProcessResult Build(const std::vector<std::string>& flags, const std::string& script,
                      std::map<std::string, std::string> environment = {}) {
    ProcessSpec spec;
    spec.argv = {testing::BinaryPath("distcc-cuda"), "build", "--nvcc", nvcc_};
    spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
    spec.argv.insert(spec.argv.end(), {"--", "sh", "-c", script});
    spec.working_directory = proj_;
    environment.try_emplace("DISTCC_CUDA_SCAN_CACHE", root_ + "/scan");
    spec.environment = std::move(environment);
    spec.timeout = absl::Minutes(5);
    absl::StatusOr<ProcessResult> ran = RunProcess(spec);
    EXPECT_TRUE(ran.ok()) << ran.status();
    return ran.ok() ? *ran : ProcessResult{};
  }

  // The object and dependency file the build wrote equal those of the same
  // compile run here with g++, at the same paths. Workers compile the
  // workspace at /distcc-cuda/workspace, which the debug information names:
  // unless the build had --absolute-paths (`as_is`), g++ here gets the
  // project's folder mapped there, and nothing else may differ.
  void ExpectTheLocalCompilersFiles(bool as_is = false) {
    absl::StatusOr<std::string> object = ReadFile(proj_ + "/obj/api.o");
    absl::StatusOr<std::string> dependencies = ReadFile(proj_ + "/obj/api.d");
    ASSERT_TRUE(object.ok() && dependencies.ok()) << "the build wrote no object or .d";
    EXPECT_EQ(object->find(proj_) == std::string::npos, !as_is)
        << "the debug information names the project's folder";
    ProcessSpec local;
    local.argv = {
        "sh", "-c",
        as_is ? std::string(kCompile)
              : absl::StrCat(kCompile, " -fdebug-prefix-map=", proj_, "=/distcc-cuda/workspace")};
    local.working_directory = proj_;
    local.environment = {{"CXX", "g++"}};
    absl::StatusOr<ProcessResult> ran = RunProcess(local);
    ASSERT_TRUE(ran.ok() && ran->exit_code == 0) << (ran.ok() ? ran->stderr_text : "");
    EXPECT_TRUE(*object == *ReadFile(proj_ + "/obj/api.o"))
        << "the cluster's object differs from g++'s here";
    EXPECT_EQ(*dependencies, *ReadFile(proj_ + "/obj/api.d"));
    EXPECT_THAT(*dependencies, HasSubstr("include/api.h"));
  }

  std::string nvcc_;
  std::string root_;
  std::string proj_;
};

TEST_F(HostCompileTest, GoesToTwoLoopbackWorkersAndComesBackAsGccsOwn) {
  auto cluster = testing::LoopbackCluster::Start(root_, nvcc_, {{"h-a"}, {"h-b"}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // A compile, then one with an argument the model refuses, then a link.
  ProcessResult build =
      Build({"--coordinator", (*cluster)->address(), "--absolute-paths"},
            absl::StrCat(kCompile,
                         " && $CXX -B/nonexistent -Iinclude -c src/api.cpp -o obj/refused.o"
                         " && $CXX -shared obj/api.o -o obj/libapi.so"));
  ASSERT_EQ(build.exit_code, 0) << build.stderr_text;
  EXPECT_THAT(build.stderr_text, ContainsRegex("api.cpp +h-[ab] "));
  EXPECT_THAT(build.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(build.stderr_text,
              HasSubstr("here   api.cpp: host compiler option -B/nonexistent is not allowed: it "
                        "replaces the compiler's own programs"));
  EXPECT_THAT(build.stderr_text, HasSubstr("here   libapi.so: not a compile (no -c)"));
  EXPECT_TRUE(fs::exists(proj_ + "/obj/refused.o"));
  EXPECT_TRUE(fs::exists(proj_ + "/obj/libapi.so"));
  ExpectTheLocalCompilersFiles(/*as_is=*/true);
  // Unchanged, the compile comes from the result cache.
  fs::remove(proj_ + "/obj/api.o");
  ProcessResult again =
      Build({"--coordinator", (*cluster)->address(), "--absolute-paths"}, kCompile);
  ASSERT_EQ(again.exit_code, 0) << again.stderr_text;
  EXPECT_THAT(again.stderr_text, HasSubstr("1 on the cluster (0 compiled, 1 cached, 0 failed)"));
  ExpectTheLocalCompilersFiles(/*as_is=*/true);
}

TEST_F(HostCompileTest, GoesToTheEmbeddedDefaultsSandboxedWorker) {
  ProcessResult build =
      Build({"--state-dir", root_ + "/state"}, kCompile + std::string(" && echo \"CXX=$CXX\""));
  ASSERT_EQ(build.exit_code, 0) << build.stderr_text;
  EXPECT_THAT(build.stderr_text, ContainsRegex("api.cpp +local "));
  EXPECT_THAT(build.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached, 0 failed)"));
  ExpectTheLocalCompilersFiles();
  // The command's CXX is a link that outlives the session (CMake keeps it
  // in its cache): afterwards it runs the real compiler here.
  const size_t at = build.stdout_text.find("CXX=");
  ASSERT_NE(at, std::string::npos) << build.stdout_text;
  const std::string cxx =
      build.stdout_text.substr(at + 4, build.stdout_text.find('\n', at) - at - 4);
  EXPECT_THAT(cxx, ::testing::StartsWith(root_ + "/state/compilers/"));
  EXPECT_EQ(fs::path(cxx).filename(), "c++");
  ProcessSpec after;
  after.argv = {cxx, "-O2", "-Iinclude", "-c", "src/api.cpp", "-o", "obj/after.o"};
  after.working_directory = proj_;
  after.environment = {{"DISTCC_CUDA_SESSION", ""}};
  absl::StatusOr<ProcessResult> ran = RunProcess(after);
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(ran->exit_code, 0) << ran->stderr_text;
  EXPECT_TRUE(fs::exists(proj_ + "/obj/after.o"));
  // Behind CMAKE_CXX_COMPILER_LAUNCHER as well: `distcc-cuda LINK ARGS`.
  after.argv.insert(after.argv.begin(), testing::BinaryPath("distcc-cuda"));
  after.argv.back() = "obj/launched.o";
  ran = RunProcess(after);
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(ran->exit_code, 0) << ran->stderr_text;
  EXPECT_TRUE(fs::exists(proj_ + "/obj/launched.o"));
}

// torch 2.15 ships torch/csrc/utils/python_stub.h and c10/util/python_stub.h
// with the same bytes and time: GCC's #pragma once takes the second for the
// first and its dependency output never names it, yet the worker's lookup
// of that name needs the file (flash-attention's flash_api.cpp failed so).
TEST_F(HostCompileTest, AHeaderThatPragmaOnceTookForAnotherReachesTheWorker) {
  constexpr char kStub[] = "#pragma once\nstruct _object;\nusing PyObject = _object;\n";
  for (const char* stub : {"/include/torch/python_stub.h", "/include/c10/python_stub.h"}) {
    ASSERT_TRUE(WriteFileAtomically(proj_ + stub, kStub).ok());
    const struct timespec times[2] = {{1700000000, 0}, {1700000000, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, (proj_ + stub).c_str(), times, 0), 0);
  }
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/src/stub.cpp",
                                  "#include <torch/python_stub.h>\n#include <c10/python_stub.h>\n"
                                  "PyObject* Nothing() { return nullptr; }\n")
                  .ok());
  ProcessResult build = Build({"--state-dir", root_ + "/state"},
                              "$CXX -O2 -Iinclude -MMD -c src/stub.cpp -o obj/stub.o");
  ASSERT_EQ(build.exit_code, 0) << build.stderr_text;
  EXPECT_THAT(build.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached, 0 failed)"));
  EXPECT_TRUE(fs::exists(proj_ + "/obj/stub.o"));
  // The dependency file stays g++'s own, which names the first stub only.
  absl::StatusOr<std::string> dependencies = ReadFile(proj_ + "/obj/stub.d");
  ASSERT_TRUE(dependencies.ok()) << dependencies.status();
  EXPECT_THAT(*dependencies, HasSubstr("torch/python_stub.h"));
  EXPECT_THAT(*dependencies, Not(HasSubstr("c10/python_stub.h")));
}

// A teammate's CUDA_HOME is another path to the same toolkit (here a link
// in their home to the toolkit's folder): flash_api.cpp's
// -I$CUDA_HOME/include goes by the toolkit's canonical root, so the second
// build takes the first's result, and the object names neither toolkit
// path (-ffile-prefix-map on the worker), only the canonical root.
TEST_F(HostCompileTest, OneToolkitAtAnotherPlaceIsTheSameCompile) {
  const std::string real = fs::canonical(fs::path(nvcc_).parent_path().parent_path()).string();
  const std::string home = root_ + "/home/bob/cuda";
  fs::create_directories(root_ + "/home/bob");
  fs::create_directory_symlink(real, home);
  ASSERT_TRUE(
      WriteFileAtomically(proj_ + "/src/cuda_api.cpp",
                          "#include <cuda_runtime_api.h>\n"
                          "int Devices() { int n = 0; cudaGetDeviceCount(&n); return n; }\n")
          .ok());
  auto compile = [](const std::string& cuda_home) {
    return absl::StrCat("$CXX -g -O2 -fPIC -I", cuda_home,
                        "/include -c src/cuda_api.cpp -o obj/cuda_api.o");
  };
  ProcessResult first = Build({"--state-dir", root_ + "/state"}, compile("/usr/local/cuda"));
  ASSERT_EQ(first.exit_code, 0) << first.stderr_text;
  EXPECT_THAT(first.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached, 0 failed)"));
  absl::StatusOr<std::string> object = ReadFile(proj_ + "/obj/cuda_api.o");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_TRUE(object->find("/distcc-cuda/toolkit/include") != std::string::npos)
      << "the debug information names the toolkit's headers at the canonical root";
  EXPECT_TRUE(object->find("/usr/local/cuda") == std::string::npos)
      << "the debug information names the worker's toolkit";
  fs::remove(proj_ + "/obj/cuda_api.o");
  nvcc_ = home + "/bin/nvcc";
  ProcessResult second = Build({"--state-dir", root_ + "/state"}, compile(home));
  ASSERT_EQ(second.exit_code, 0) << second.stderr_text;
  EXPECT_THAT(second.stderr_text, HasSubstr("1 on the cluster (0 compiled, 1 cached, 0 failed)"));
  EXPECT_TRUE(ReadFile(proj_ + "/obj/cuda_api.o").value_or("") == *object)
      << "the teammate's object differs from the first build's";
  // As is, the flag keeps the teammate's path, and so the result is another.
  fs::remove(proj_ + "/obj/cuda_api.o");
  ProcessResult as_is = Build({"--state-dir", root_ + "/state", "--absolute-paths"}, compile(home));
  ASSERT_EQ(as_is.exit_code, 0) << as_is.stderr_text;
  EXPECT_THAT(as_is.stderr_text, HasSubstr("1 on the cluster (1 compiled, 0 cached, 0 failed)"));
}

TEST_F(HostCompileTest, AnotherCompilerThanTheToolchainsRunsHereSayingWhich) {
  auto cluster = testing::LoopbackCluster::Start(root_, nvcc_, {{"h-a"}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // A g++ of another release: it says so, and compiles as g++ does.
  const std::string other = root_ + "/other-bin/g++-99";
  ASSERT_TRUE(WriteFileAtomically(other,
                                  "#!/bin/sh\n"
                                  "if [ \"$1\" = --version ]; then echo 'g++-99 (Other) 99.1.0'; "
                                  "exit 0; fi\nexec g++ \"$@\"\n")
                  .ok());
  fs::permissions(other, fs::perms::owner_all);
  ProcessResult build = Build({"--coordinator", (*cluster)->address()}, kCompile, {{"CXX", other}});
  ASSERT_EQ(build.exit_code, 0) << build.stderr_text;
  EXPECT_THAT(build.stderr_text, HasSubstr("is (Other) 99.1.0, not the g++ that the workers' "
                                           "toolchain names"));
  EXPECT_THAT(build.stderr_text, HasSubstr("0 on the cluster"));
  EXPECT_THAT(build.stderr_text, Not(ContainsRegex("api.cpp +h-a ")));
  EXPECT_TRUE(fs::exists(proj_ + "/obj/api.o"));
}

// A build tool starts its jobs together, and its calls are ready to be
// submitted at different times: here the kernel, with 1,500 headers of the
// project to hash and upload, a second after the host compiles. The calls
// of such a burst reach the coordinator together (ScanCohort) and its queue
// starts the longest predicted first (the arrival grace): the kernel (a
// flash-attention forward kernel by its marker header and name: 131 s from
// the measured prior) before the host compiles (the 60 s default), on one
// slot. Without them the host compiles, ready first, all ran before it.
TEST_F(HostCompileTest, TheLongestOfABurstStartsFirstThoughItIsReadyLast) {
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/include/flash_fwd_launch_template.h",
                                  "#pragma once\ntemplate <int D> __global__ void Fwd(float* o) "
                                  "{ o[threadIdx.x] = D; }\n")
                  .ok());
  std::string all;
  for (int i = 0; i < 1500; ++i) {
    ASSERT_TRUE(
        WriteFileAtomically(absl::StrCat(proj_, "/include/gen/g", i, ".h"),
                            absl::StrCat("#pragma once\nconstexpr int kG", i, " = ", i, ";\n"))
            .ok());
    absl::StrAppend(&all, "#include \"gen/g", i, ".h\"\n");
  }
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/include/gen/all.h", all).ok());
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/src/flash_fwd_hdim64_fp16.cu",
                                  "#include \"flash_fwd_launch_template.h\"\n"
                                  "#include \"gen/all.h\"\n"
                                  "template __global__ void Fwd<64>(float*);\n")
                  .ok());
  std::string makefile = "all: obj/fwd.o";
  std::string rules =
      "obj/fwd.o: src/flash_fwd_hdim64_fp16.cu\n"
      "\t$(PYTORCH_NVCC) -gencode arch=compute_100,code=sm_100 -Iinclude -c $< -o $@\n";
  for (const char* name : {"h1", "h2", "h3"}) {
    ASSERT_TRUE(WriteFileAtomically(absl::StrCat(proj_, "/src/", name, ".cpp"), kSource).ok());
    absl::StrAppend(&makefile, " obj/", name, ".o");
    absl::StrAppend(&rules, "obj/", name, ".o: src/", name,
                    ".cpp\n\t$(CXX) -O2 -Iinclude -c $< -o $@\n");
  }
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/Makefile", makefile + "\n" + rules).ok());
  ProcessResult build = Build({"--state-dir", root_ + "/state", "--slots", "1"}, "make -j4");
  ASSERT_EQ(build.exit_code, 0) << build.stderr_text;
  EXPECT_THAT(build.stderr_text, HasSubstr("4 on the cluster (4 compiled"));
  // On one slot, what finishes first started first.
  EXPECT_THAT(build.stderr_text, HasSubstr("[1 done, 3 on the cluster] flash_fwd_hdim64_fp16.cu"));
}

// The most compiler back ends (cc1plus) of this test's processes that ran
// at once while it lived, sampled every 10 ms.
class CompilerCount {
 public:
  CompilerCount() : thread_([this] { Watch(); }) {}
  ~CompilerCount() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int most() const { return most_; }

 private:
  void Watch() {
    while (!stop_) {
      int now = 0;
      for (const testing::ProcessId& process : testing::DescendantsOf(getpid())) {
        if (process.command == "cc1plus") ++now;
      }
      most_ = std::max(most_.load(), now);
      absl::SleepFor(absl::Milliseconds(10));
    }
  }

  std::atomic<bool> stop_{false};
  std::atomic<int> most_{0};
  std::thread thread_;
};

// On the embedded default this machine is the worker: the compiles that
// run here (refused by the model) and the include scans hold its slots as
// the worker's compiles do, so that no more compilers run at once than it
// has slots.
TEST_F(HostCompileTest, TheEmbeddedDefaultRunsNoMoreCompilersAtOnceThanItsSlots) {
  std::string makefile = "all:";
  std::string rules;
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(
        WriteFileAtomically(absl::StrCat(proj_, "/src/r", i, ".cpp"),
                            absl::StrCat("#include <regex>\n#include <string>\nstd::string F", i,
                                         "(const std::string& s) { return std::regex_replace(s, "
                                         "std::regex(\"a+b",
                                         i, "\"), \"x\"); }\n"))
            .ok());
    absl::StrAppend(&makefile, " obj/r", i, ".o");
    // Every second one with an argument the model refuses: it runs here.
    absl::StrAppend(&rules, "obj/r", i, ".o: src/r", i, ".cpp\n\t$(CXX) -O2 ",
                    i % 2 == 1 ? "-B/nonexistent " : "", "-c $< -o $@\n");
  }
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/Makefile", makefile + "\n" + rules).ok());
  CompilerCount count;
  ProcessResult build = Build({"--state-dir", root_ + "/state", "--slots", "2"}, "make -j8");
  count.Stop();
  ASSERT_EQ(build.exit_code, 0) << build.stderr_text;
  EXPECT_THAT(build.stderr_text, HasSubstr("3 on the cluster (3 compiled"));
  EXPECT_THAT(build.stderr_text, HasSubstr("3 calls ran their compiler here"));
  EXPECT_GT(count.most(), 0) << "no compiler was seen";
  EXPECT_LE(count.most(), 2) << "more compilers ran at once than the machine's 2 slots";
  std::cout << "make -j8 of 6 compiles on 2 slots: at most " << count.most() << " compilers at once"
            << std::endl;
}

}  // namespace
}  // namespace distcc_cuda
