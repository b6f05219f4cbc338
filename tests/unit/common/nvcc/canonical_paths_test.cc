// SPDX-License-Identifier: Apache-2.0
// A unit names its toolkit at the canonical root; the worker that runs it
// places those paths in the toolkit it compiles with, and an engine's
// Action names the canonical places relative to its working directory
// (common/nvcc/canonical_paths.h); nothing else that looks like them moves.
#include "common/nvcc/canonical_paths.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/nvcc/nvcc_args.h"

namespace distcc_cuda {
namespace {

using ::testing::ElementsAre;

TEST(CanonicalPathsTest, EveryFormOfAPathAtTheCanonicalRootIsPlaced) {
  bool named = false;
  const std::vector<std::string> placed = PlaceToolkitPaths(
      {"-I/distcc-cuda/toolkit/include", "-isystem", "/distcc-cuda/toolkit/include/crt",
       "--include-path=/proj/a,/distcc-cuda/toolkit/include",
       "-Xcompiler=-I/x,-isystem,"
       "/distcc-cuda/toolkit/targets/include",
       "-include/distcc-cuda/toolkit/include/cuda_runtime.h", "-I/distcc-cuda/toolkit"},
      "/opt/cuda-13.0/", &named);
  EXPECT_TRUE(named);
  EXPECT_THAT(placed,
              ElementsAre("-I/opt/cuda-13.0/include", "-isystem", "/opt/cuda-13.0/include/crt",
                          "--include-path=/proj/a,/opt/cuda-13.0/include",
                          "-Xcompiler=-I/x,-isystem,/opt/cuda-13.0/targets/include",
                          "-include/opt/cuda-13.0/include/cuda_runtime.h", "-I/opt/cuda-13.0"));
}

TEST(CanonicalPathsTest, WhatOnlyLooksLikeTheRootStaysAsItIs) {
  bool named = true;
  const std::vector<std::string> arguments = {"-I/distcc-cuda/toolkitX/include",
                                              "-I/proj/distcc-cuda/toolkit/include",
                                              "-DWHERE=\"/distcc-cuda/toolkit\"",
                                              "-I/distcc-cuda/workspace/include",
                                              "-ffile-prefix-map=/opt/cuda=/distcc-cuda/toolkit",
                                              "-I/distcc-cuda/toolkit,x",
                                              "-O2"};
  EXPECT_EQ(PlaceToolkitPaths(arguments, "/opt/cuda", &named), arguments);
  EXPECT_FALSE(named);
}

TEST(CanonicalPathsTest, AHostCompileThatNamedTheToolkitMapsItBackInItsObject) {
  v1::CompileUnit host;
  host.set_compiler(v1::UNIT_COMPILER_HOST_CXX);
  for (const char* argument :
       {"-g", "-I/distcc-cuda/toolkit/include", "-c", "a.cpp", "-o", "a.o"}) {
    host.add_arguments(argument);
  }
  EXPECT_THAT(ArgumentsInToolkit(host, "/usr/local/cuda-12.8/"),
              ElementsAre("-g", "-I/usr/local/cuda-12.8/include", "-c", "a.cpp", "-o", "a.o",
                          "-ffile-prefix-map=/usr/local/cuda-12.8=/distcc-cuda/toolkit"));
  // nvcc's own object names its toolkit as it always did; a unit that names
  // no toolkit folder runs as it came.
  v1::CompileUnit nvcc = host;
  nvcc.set_compiler(v1::UNIT_COMPILER_NVCC);
  EXPECT_THAT(ArgumentsInToolkit(nvcc, "/usr/local/cuda-12.8"),
              ElementsAre("-g", "-I/usr/local/cuda-12.8/include", "-c", "a.cpp", "-o", "a.o"));
  v1::CompileUnit plain;
  plain.set_compiler(v1::UNIT_COMPILER_HOST_CXX);
  plain.add_arguments("-Iinclude");
  EXPECT_THAT(ArgumentsInToolkit(plain, "/usr/local/cuda"), ElementsAre("-Iinclude"));
}

// An engine's workers place the Action's input root where they like: a
// venv's site-packages at /distcc-cuda/site-packages is named from the
// working directory, as the workspace's files already are.
TEST(CanonicalPathsTest, AnActionNamesTheCanonicalPlacesFromItsWorkingDirectory) {
  EXPECT_THAT(
      CanonicalPathsRelativeTo(
          {"-I/distcc-cuda/site-packages/torch/include", "-isystem",
           "/distcc-cuda/include/python3.11", "--include-path=/distcc-cuda/workspace/inc,/usr/x",
           "-include/distcc-cuda/workspace/build/pre.h", "-I/distcc-cuda-other/include",
           "-ffile-prefix-map=/opt/cuda=/distcc-cuda/toolkit", "-I/usr/local/cuda/include", "-c",
           "../one.cu"},
          "distcc-cuda/workspace/build"),
      ElementsAre("-I../../site-packages/torch/include", "-isystem", "../../include/python3.11",
                  "--include-path=../inc,/usr/x", "-includepre.h", "-I/distcc-cuda-other/include",
                  "-ffile-prefix-map=/opt/cuda=/distcc-cuda/toolkit", "-I/usr/local/cuda/include",
                  "-c", "../one.cu"));
}

// The canonical toolkit root arrives over the network like any path: a unit
// may name files under it, never leave it with "..", and no input may lie
// in it (it would stand in for the toolkit's own files).
TEST(CanonicalPathsTest, AUnitNamesTheCanonicalToolkitButCannotLeaveItOrPutInputsThere) {
  auto unit = [](const std::string& flag, const std::string& input) {
    v1::CompileUnit out;
    out.set_name("u");
    out.set_compiler(v1::UNIT_COMPILER_HOST_CXX);
    for (const std::string& argument :
         {flag, std::string("-c"), std::string("a.cpp"), std::string("-o"), std::string("a.o")}) {
      out.add_arguments(argument);
    }
    out.add_output_paths("a.o");
    out.add_inputs()->set_path("a.cpp");
    if (!input.empty()) out.add_inputs()->set_path(input);
    return out;
  };
  const std::vector<std::string> prefixes = SystemIncludePrefixes("/opt/cuda-12.8");
  EXPECT_TRUE(ValidateCompileUnit(unit("-I/distcc-cuda/toolkit/include", ""), prefixes).ok());
  EXPECT_FALSE(
      ValidateCompileUnit(unit("-include/distcc-cuda/toolkit/../../etc/passwd", ""), prefixes)
          .ok());
  EXPECT_FALSE(
      ValidateCompileUnit(unit("-O2", "distcc-cuda/toolkit/include/cuda_runtime.h"), prefixes)
          .ok());
}

}  // namespace
}  // namespace distcc_cuda
