// SPDX-License-Identifier: Apache-2.0
// The host C++ compiler's argument model: what PyTorch's cpp_extension and
// CMake pass g++ goes to a worker; what would run code, read or write files
// outside the unit, or replace the compiler's programs never does, at any
// of the three checks (the launcher's, the coordinator's, the worker's).
#include "common/nvcc/host_compiler_args.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/nvcc/nvcc_args.h"

namespace distcc_cuda {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The compile flags torch 2.x's cpp_extension gives c++ for flash_api.cpp
// (its ninja file), with a conda-free Python's CFLAGS.
const std::vector<std::string> kTorchCompile = {
    "-MMD",
    "-MF",
    "build/flash_api.o.d",
    "-Wsign-compare",
    "-DNDEBUG",
    "-g",
    "-fwrapv",
    "-O3",
    "-Wall",
    "-fPIC",
    "-Icsrc/flash_attn",
    "-Icsrc/cutlass/include",
    "-I/opt/venv/lib/python3.12/site-packages/torch/include",
    "-isystem",
    "/opt/venv/lib/python3.12/site-packages/torch/include/TH",
    "-I/usr/local/cuda/include",
    "-I/usr/include/python3.12",
    "-c",
    "-c",
    "csrc/flash_attn/flash_api.cpp",
    "-o",
    "build/flash_api.o",
    "-O3",
    "-std=c++17",
    "-DTORCH_API_INCLUDE_EXTENSION_H",
    "-DPYBIND11_COMPILER_TYPE=\"_gcc\"",
    "-DPYBIND11_STDLIB=\"_libstdcpp\"",
    "-DPYBIND11_BUILD_ABI=\"_cxxabi1018\"",
    "-DTORCH_EXTENSION_NAME=flash_attn_2_cuda",
    "-D_GLIBCXX_USE_CXX11_ABI=1"};

TEST(HostCompilerArgsTest, ReadsPyTorchsCompileOfAnExtensionSource) {
  absl::StatusOr<NvccCommand> command = ParseHostCompileCommand(kTorchCompile);
  ASSERT_TRUE(command.ok()) << command.status();
  EXPECT_TRUE(command->host_compiler);
  EXPECT_THAT(command->sources, ElementsAre("csrc/flash_attn/flash_api.cpp"));
  EXPECT_EQ(command->output, "build/flash_api.o");
  EXPECT_THAT(command->actions, ElementsAre("-c"));
  ASSERT_EQ(command->dependency_flags.size(), 2u);
  EXPECT_EQ(command->dependency_flags[1].value, "build/flash_api.o.d");
  int paths = 0;
  for (const NvccArgument& flag : command->flags) {
    if (flag.kind == NvccValueKind::kInputPath) ++paths;
  }
  EXPECT_EQ(paths, 6);
  // Rendered back, the flags are the command's own, in order.
  std::vector<std::string> flags = command->FlagArguments();
  EXPECT_EQ(flags.front(), "-Wsign-compare");
  EXPECT_EQ(flags.back(), "-D_GLIBCXX_USE_CXX11_ABI=1");
  EXPECT_THAT(flags, ::testing::Contains("-DPYBIND11_COMPILER_TYPE=\"_gcc\""));
  EXPECT_THAT(flags,
              ::testing::Contains("/opt/venv/lib/python3.12/site-packages/torch/include/TH"));
}

TEST(HostCompilerArgsTest, RefusesWhatRunsCodeReadsOrWritesOutsideTheUnit) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-B/tmp/evil"}, "replaces the compiler's own programs"},
      {{"-B", "/tmp/evil"}, "replaces the compiler's own programs"},
      {{"-fplugin=./evil.so"}, "loads code"},
      {{"-fplugin-arg-evil-x=1"}, "loads code"},
      {{"-specs=evil.specs"}, "driver's rules"},
      {{"-wrapper", "sh,-c,touch /tmp/x"}, "runs another program"},
      {{"@args.rsp"}, "response file"},
      {{"--sysroot=/"}, "system root"},
      {{"-isysroot", "/"}, "system root"},
      {{"-iprefix", "/etc/"}, "not checked"},
      {{"-save-temps"}, "writes files"},
      {{"-dumpdir", "/tmp/"}, "writes files"},
      {{"-gsplit-dwarf"}, ".dwo"},
      {{"-fdump-tree-all"}, "writes files"},
      {{"-fprofile-use=/etc/x"}, "reads a file"},
      {{"-Wp,-MD,/tmp/x.d"}, "unchecked"},
      {{"-Wa,-adhln=/tmp/x.s"}, "unchecked"},
      {{"-Xpreprocessor", "-MD"}, "unchecked"},
      {{"-Xclang", "-load"}, "unchecked"},
      {{"-march=native"}, "worker's own CPU"},
      {{"-DX=1;touch"}, ""},  // fine for g++ (no shell); the value is text
      {{"-x", "assembler"}, "not C or C++"},
      {{"--output=x.o"}, "long options"},
      {{"-Xcompiler", "-fPIC"}, "not allowed"},  // nvcc's, not g++'s
      {{"--generate-code=arch=compute_100,code=sm_100"}, "long options"},
      {{"-o"}, "missing its value"},
      {{"-include", "-B/tmp"}, "needs a path"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> arguments = flags;
    arguments.insert(arguments.end(), {"-c", "a.cpp", "-o", "a.o"});
    if (flags == std::vector<std::string>{"-o"}) arguments = {"-c", "a.cpp", "-o"};
    absl::StatusOr<NvccCommand> command = ParseHostCompileCommand(arguments);
    if (message.empty()) {
      EXPECT_TRUE(command.ok()) << flags[0] << ": " << command.status();
      continue;
    }
    ASSERT_FALSE(command.ok()) << flags[0] << " was accepted";
    EXPECT_EQ(command.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(command.status().message(), HasSubstr(message)) << flags[0];
  }
}

v1::CompileUnit HostUnit(const std::vector<std::string>& flags) {
  v1::CompileUnit unit;
  unit.set_name("a.cpp");
  unit.set_compiler(v1::UNIT_COMPILER_HOST_CXX);
  unit.set_workspace_root("/work/proj");
  for (const std::string& flag : flags) unit.add_arguments(flag);
  for (const char* argument : {"-c", "a.cpp", "-o", "a.o"}) unit.add_arguments(argument);
  unit.add_output_paths("a.o");
  unit.add_inputs()->set_path("a.cpp");
  return unit;
}

TEST(HostCompilerArgsTest, AUnitIsCheckedByItsCompilersModelAndTheSamePathRules) {
  EXPECT_TRUE(ValidateCompileUnit(HostUnit({"-O2", "-fPIC", "-Iinclude", "-std=c++17"})).ok());
  // Paths: inside the workspace or a system folder, never the host's own.
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{"-include", "/etc/shadow"},
                                             {"-I/etc"},
                                             {"-isystem", "/root"},
                                             {"-imacros", "/home/other/x.h"},
                                             {"-iquote", "../../.."}}) {
    absl::Status valid = ValidateCompileUnit(HostUnit(flags));
    EXPECT_EQ(valid.code(), absl::StatusCode::kInvalidArgument) << flags[0];
  }
  // The same arguments under the other compiler's model.
  v1::CompileUnit as_nvcc = HostUnit({"-fPIC"});
  as_nvcc.set_compiler(v1::UNIT_COMPILER_NVCC);
  EXPECT_THAT(ValidateCompileUnit(as_nvcc).message(), HasSubstr("-fPIC"));
  v1::CompileUnit unknown = HostUnit({});
  unknown.set_compiler(static_cast<v1::UnitCompiler>(7));
  EXPECT_THAT(ValidateCompileUnit(unknown).message(), HasSubstr("unknown compiler"));
  // No GPU targets to split.
  absl::StatusOr<NvccCommand> command = ParseHostCompileCommand({"-c", "a.cpp", "-o", "a.o"});
  ASSERT_TRUE(command.ok());
  EXPECT_EQ(SplitByArchitecture(*command).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(HostCompilerArgsTest, KnowsHostCompilersAndTheirSourcesByName) {
  for (const char* name : {"c++", "g++", "g++-12", "/usr/bin/x86_64-linux-gnu-g++-12", "clang++",
                           "clang++-18", "/opt/bin/c++"}) {
    EXPECT_TRUE(LooksLikeHostCompiler(name)) << name;
  }
  for (const char* name : {"nvcc", "gcc", "g++x", "g++-", "build", "c++filt", "evil-g++"}) {
    EXPECT_FALSE(LooksLikeHostCompiler(name)) << name;
  }
  for (const char* name : {"a.cpp", "dir/a.cc", "a.cxx", "a.c", "a.C", "a.c++"}) {
    EXPECT_TRUE(IsHostSource(name)) << name;
  }
  for (const char* name : {"a.cu", "a.h", "a.o", "a"}) EXPECT_FALSE(IsHostSource(name)) << name;
}

}  // namespace
}  // namespace distcc_cuda
