// SPDX-License-Identifier: Apache-2.0
// Which nvcc calls of a build tool the launcher sends to the cluster, and
// what it must write here for them (the dependency file nvcc would write).
#include "client/launcher/launcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "client/launcher/build_session.h"
#include "client/launcher/remote_compile.h"
#include "common/base/files.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

LauncherDecision Decide(std::vector<std::string> arguments) {
  return DecideWhereToCompile(arguments);
}

TEST(MissingFileNamedInTest, FindsTheFileACompilerCouldNotOpen) {
  EXPECT_EQ(MissingFileNamedIn("In file included from src/a.cpp:3:\n"
                               "include/b.h:2:10: fatal error: c10/util/python_stub.h: No such "
                               "file or directory\n    2 | #include <c10/util/python_stub.h>\n"
                               "compilation terminated.\n"),
            "c10/util/python_stub.h");
  EXPECT_EQ(MissingFileNamedIn("k.cu(3): error: identifier \"x\" is undefined\n"), "");
  EXPECT_EQ(MissingFileNamedIn("a.cpp:1:1: error: expected ';': No such file or directory\n"), "");
}

TEST(LauncherDecisionTest, PyTorchsNinjaRuleGoesRemoteWithItsDependencyFile) {
  // cpp_extension's rule, as ninja hands it over: "-c -c", quoted -fPIC.
  LauncherDecision decision =
      Decide({"-MD", "-MF", "/b/temp/scale.o.d", "-I/t/include", "-c", "-c", "/src/scale.cu", "-o",
              "/b/temp/scale.o", "-D__CUDA_NO_HALF_OPERATORS__", "--expt-relaxed-constexpr",
              "--compiler-options", "'-fPIC'", "-O3", "--threads", "2",
              "-gencode=arch=compute_100,code=sm_100", "-std=c++17"});
  ASSERT_TRUE(decision.remote) << decision.local_reason;
  EXPECT_EQ(decision.plan.name, "scale.cu");
  EXPECT_EQ(decision.plan.source, "/src/scale.cu");
  EXPECT_EQ(decision.plan.output, "/b/temp/scale.o");
  EXPECT_EQ(decision.plan.action, "-c");
  EXPECT_EQ(decision.plan.dependency_file, "/b/temp/scale.o.d");
  EXPECT_THAT(decision.plan.dependency_arguments,
              ElementsAre("-M", "-MT", "/b/temp/scale.o", "-MF", "/b/temp/scale.o.d"));
  EXPECT_FALSE(decision.plan.nonsystem_dependencies);
  // No -c, -o, source or dependency option among the flags.
  for (const std::string& flag : decision.plan.flags) {
    EXPECT_NE(flag, "-c");
    EXPECT_NE(flag, "-MD");
    EXPECT_NE(flag, "/src/scale.cu");
    EXPECT_NE(flag, "/b/temp/scale.o");
  }
}

TEST(LauncherDecisionTest, DependencyOptionsFollowNvccsDefaults) {
  // -MMD without -MF: beside the object, with .d; -MT and -MP kept.
  LauncherDecision decision =
      Decide({"-MMD", "-MP", "-MT", "tgt", "-c", "k.cu", "-o", "obj/k.cu.o"});
  ASSERT_TRUE(decision.remote) << decision.local_reason;
  EXPECT_EQ(decision.plan.dependency_file, "obj/k.cu.d");
  EXPECT_TRUE(decision.plan.nonsystem_dependencies);
  EXPECT_THAT(decision.plan.dependency_arguments,
              ElementsAre("-MM", "-MP", "-MT", "tgt", "-MF", "obj/k.cu.d"));
  // No dependency option: no file.
  LauncherDecision plain = Decide({"-c", "k.cu", "-o", "k.o"});
  ASSERT_TRUE(plain.remote);
  EXPECT_TRUE(plain.plan.dependency_file.empty());
  EXPECT_TRUE(plain.plan.dependency_arguments.empty());
}

TEST(LauncherDecisionTest, RelocatableDeviceCodeCompilesRemotelyItsDeviceLinkHere) {
  LauncherDecision dc = Decide({"-dc", "k.cu", "-o", "k.o"});
  ASSERT_TRUE(dc.remote) << dc.local_reason;
  EXPECT_EQ(dc.plan.action, "");
  EXPECT_THAT(dc.plan.flags, ::testing::Contains("-dc"));
  LauncherDecision rdc = Decide({"-rdc=true", "-c", "k.cu", "-o", "k.o"});
  EXPECT_TRUE(rdc.remote) << rdc.local_reason;
  LauncherDecision dlink = Decide({"-dlink", "a.o", "b.o", "-o", "dlink.o"});
  EXPECT_FALSE(dlink.remote);
  EXPECT_THAT(dlink.local_reason, HasSubstr("-dlink"));
}

struct LocalCase {
  std::vector<std::string> arguments;
  std::string reason;  // a piece of the reason
  std::string what;
};

TEST(LauncherDecisionTest, WhatCannotGoRemoteRunsHereWithTheReason) {
  const std::vector<LocalCase> cases = {
      {{"--version"}, "--version", "nvcc --version"},
      {{"-E", "k.cu"}, "-E", "k.cu"},
      {{"-M", "k.cu"}, "-M/-MM", "k.cu"},
      {{"-MM", "-MF", "k.d", "k.cu"}, "-M/-MM", "k.cu"},
      {{"-shared", "a.o", "b.o", "-o", "libx.so"}, "-shared", "libx.so"},
      {{"a.o", "b.o", "-o", "app"}, "not a compile", "app"},
      {{"-c", "host.cpp", "-o", "host.o"}, "not a CUDA source", "host.cpp"},
      {{"-c", "k.cu"}, "no -o", "k.cu"},
      {{"-ptx", "k.cu", "-o", "k.ptx"}, "does not make an object", "k.cu"},
      {{"-c", "a.cu", "b.cu", "-o", "x.o"}, "2 sources", "a.cu"},
      {{"-ccbin", "/opt/gcc/bin/g++", "-c", "k.cu", "-o", "k.o"}, "-ccbin", "k.cu"},
      {{"--frobnicate", "-c", "k.cu", "-o", "k.o"}, "--frobnicate", "k.cu"},
  };
  for (const LocalCase& c : cases) {
    LauncherDecision decision = Decide(c.arguments);
    EXPECT_FALSE(decision.remote) << c.arguments[0];
    EXPECT_THAT(decision.local_reason, HasSubstr(c.reason)) << c.arguments[0];
    EXPECT_EQ(decision.what, c.what) << c.arguments[0];
  }
}

TEST(LauncherDecisionTest, SourceNamesBecomeSafeUnitNames) {
  LauncherDecision decision = Decide({"-c", "dir/my kernel (v2).cu", "-o", "k.o"});
  // A source with spaces is refused by the model; one with odd but inert
  // characters gets a safe unit name.
  EXPECT_FALSE(decision.remote);
  LauncherDecision odd = Decide({"-c", "dir/.hidden%1.cu", "-o", "k.o"});
  ASSERT_TRUE(odd.remote) << odd.local_reason;
  EXPECT_EQ(odd.plan.name, "_.hidden_1.cu");
}

TEST(LauncherTest, RecognisesNvccAsTheFirstWord) {
  EXPECT_TRUE(LooksLikeNvcc("nvcc"));
  EXPECT_TRUE(LooksLikeNvcc("/usr/local/cuda-12.8/bin/nvcc"));
  EXPECT_FALSE(LooksLikeNvcc("build"));
  EXPECT_FALSE(LooksLikeNvcc("status"));
  EXPECT_FALSE(LooksLikeNvcc("/usr/bin/nvcc-wrapper"));
}

TEST(LauncherTest, BareNvccIsLookedUpInPathSkippingTheLauncherItself) {
  const std::string root = testing::NewTempDir("resolve-");
  // First on PATH: a link named nvcc to the launcher itself (as a user
  // might make; the program running here is the launcher's stand-in), then
  // the real nvcc (any executable stands in for it).
  std::filesystem::create_directories(root + "/first");
  std::filesystem::create_directories(root + "/second");
  std::filesystem::create_symlink(std::filesystem::read_symlink("/proc/self/exe"),
                                  root + "/first/nvcc");
  ASSERT_TRUE(WriteFileAtomically(root + "/second/nvcc", "#!/bin/sh\n").ok());
  std::filesystem::permissions(root + "/second/nvcc", std::filesystem::perms::owner_all);
  ClientEnvironment environment;
  environment.path = root + "/first:" + root + "/second";
  absl::StatusOr<std::string> found = ResolveRealNvcc("nvcc", environment);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, root + "/second/nvcc");
  absl::StatusOr<std::string> named = ResolveRealNvcc(root + "/second/nvcc", environment);
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(*named, root + "/second/nvcc");
  EXPECT_FALSE(ResolveRealNvcc(root + "/absent/nvcc", environment).ok());
  // Not in PATH (only the launcher is): CUDA_HOME's, before
  // /usr/local/cuda's.
  environment.path = root + "/first";
  environment.cuda_home = root + "/second/..";
  std::filesystem::create_directories(root + "/bin");
  ASSERT_TRUE(WriteFileAtomically(root + "/bin/nvcc", "#!/bin/sh\n").ok());
  std::filesystem::permissions(root + "/bin/nvcc", std::filesystem::perms::owner_all);
  absl::StatusOr<std::string> from_home = ResolveRealNvcc("nvcc", environment);
  ASSERT_TRUE(from_home.ok()) << from_home.status();
  EXPECT_EQ(*from_home, root + "/second/../bin/nvcc");
}

TEST(BuildSessionTest, TheCommandGetsTheLauncherAndAJobCountForTheCluster) {
  auto environment =
      SessionEnvironment("/opt/bin/distcc-cuda", "/usr/local/cuda/bin/nvcc", "/tmp/s/bin/g++",
                         "/usr/bin/g++", "unix:/tmp/s/session", "b1", MaxJobsFor(6));
  std::map<std::string, std::string> by_name(environment.begin(), environment.end());
  EXPECT_EQ(by_name["PYTORCH_NVCC"], "/opt/bin/distcc-cuda /usr/local/cuda/bin/nvcc");
  EXPECT_EQ(by_name["CMAKE_CUDA_COMPILER_LAUNCHER"], "/opt/bin/distcc-cuda");
  EXPECT_EQ(by_name["CMAKE_CXX_COMPILER_LAUNCHER"], "/opt/bin/distcc-cuda");
  EXPECT_EQ(by_name["CXX"], "/tmp/s/bin/g++");
  EXPECT_EQ(by_name["DISTCC_CUDA_CXX"], "/usr/bin/g++");
  EXPECT_EQ(by_name["DISTCC_CUDA_SESSION"], "unix:/tmp/s/session");
  EXPECT_EQ(by_name["DISTCC_CUDA_BUILD_ID"], "b1");
  EXPECT_EQ(by_name["MAX_JOBS"], "24");
  // Without a link for the host compiler, CXX is left as the caller had it.
  auto without = SessionEnvironment("/d", "/n", "", "", "unix:/s", "b", 16);
  EXPECT_EQ((std::map<std::string, std::string>(without.begin(), without.end()).count("CXX")), 0u);
  EXPECT_EQ(MaxJobsFor(0), 16);
  EXPECT_EQ(MaxJobsFor(1000), 512);
}

}  // namespace
}  // namespace distcc_cuda::client
