// SPDX-License-Identifier: Apache-2.0
// Builds at the scale of a full CUTLASS library: the binaries users run
// (distcc-cuda build, a coordinator, two workers) on 127.0.0.1, with the
// fake compiler. What is tested is that nothing in the path from
// compile_commands.json to the objects on disk is limited by, or quadratic
// in, the number of units.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "tests/support/loopback_cluster.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

// 20,000 compile_commands.json entries, each its own unit and object, in 20
// source folders of 1,000 files (as a generated kernel library lays them
// out), all including one header. As one SubmitBuildRequest with every
// input listed this is about 9 MB; it goes as input trees and a plan blob.
TEST(ScaleTest, TwentyThousandCompileCommandsEntriesBuildAndEveryObjectIsWritten) {
  constexpr int kUnits = 20000;
  constexpr int kFolders = 20;
  const std::string root = testing::NewTempDir("scale-");
  const std::string project = root + "/big";
  const std::string nvcc = testing::FakeNvccPath();
  ASSERT_TRUE(WriteFileAtomically(project + "/include/common.h", "// common to all\n").ok());
  for (int folder = 0; folder < kFolders; ++folder) {
    ASSERT_TRUE(MakeDirectories(absl::StrCat(project, "/src", folder)).ok());
  }
  ASSERT_TRUE(MakeDirectories(project + "/build").ok());
  std::string db = "[";
  for (int i = 0; i < kUnits; ++i) {
    const std::string source = absl::StrCat(project, "/src", i % kFolders, "/u", i, ".cu");
    // Plain writes: 20,000 fsyncs would cost more than the build.
    std::ofstream(source) << "#include \"common.h\"\nint u" << i << "();\n";
    absl::StrAppend(&db, i == 0 ? "\n" : ",\n", R"({"directory": ")", project,
                    R"(/build", "file": ")", source, R"(", "arguments": [")", nvcc, R"(", "-I", ")",
                    project, R"(/include", "-O2", "-c", ")", source, R"(", "-o", "objs/u)", i,
                    R"(.o"]})");
  }
  absl::StrAppend(&db, "\n]\n");
  ASSERT_TRUE(WriteFileAtomically(project + "/build/compile_commands.json", db).ok());
  // Files written just before a scan are too new for the scan cache.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  auto cluster = testing::LoopbackCluster::Start(
      root, nvcc, {{"scale-a", 2, "4GiB", false}, {"scale-b", 2, "4GiB", false}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ProcessSpec build;
  build.argv = {testing::BinaryPath("distcc-cuda"),
                "build",
                project + "/build/compile_commands.json",
                "--coordinator",
                (*cluster)->address(),
                "--library",
                "libbig.so",
                "--nvcc",
                nvcc,
                "-o",
                project + "/build"};
  build.environment["DISTCC_CUDA_SCAN_CACHE"] = root + "/scan";
  build.timeout = absl::Minutes(15);
  build.output_limit_bytes = 64 << 20;
  absl::StatusOr<ProcessResult> run = RunProcess(build);
  ASSERT_TRUE(run.ok()) << run.status();
  const std::string& out = run->stdout_text;
  const std::string tail = out.substr(out.size() > 3000 ? out.size() - 3000 : 0);
  ASSERT_EQ(run->exit_code, 0) << DescribeTermination(*run) << "\n"
                               << tail << "\n"
                               << run->stderr_text.substr(0, 3000);
  EXPECT_THAT(out, HasSubstr("units     20000 (20000 compiled, 0 cached, 0 failed)")) << tail;
  int missing = 0;
  for (int i = 0; i < kUnits; ++i) {
    if (!IsRegularFile(absl::StrCat(project, "/build/objs/u", i, ".o"))) ++missing;
  }
  EXPECT_EQ(missing, 0) << "objects not written";
  // Each object from its own source and the shared header.
  for (int i : {0, 12345, kUnits - 1}) {
    absl::StatusOr<std::string> object = ReadFile(absl::StrCat(project, "/build/objs/u", i, ".o"));
    ASSERT_TRUE(object.ok()) << object.status();
    EXPECT_THAT(*object, HasSubstr(absl::StrCat("int u", i, "();")));
    EXPECT_THAT(*object, HasSubstr("// common to all"));
  }
  EXPECT_TRUE(IsRegularFile(project + "/build/libbig.so"));
  std::cout << tail.substr(tail.find("distcc-cuda: built") == std::string::npos
                               ? 0
                               : tail.find("distcc-cuda: built"))
            << std::flush;
}

}  // namespace
}  // namespace distcc_cuda
