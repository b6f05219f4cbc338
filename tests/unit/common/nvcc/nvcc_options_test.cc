// SPDX-License-Identifier: Apache-2.0
// The argument allowlist: what real builds send is accepted, option by
// option, and what an attacker sends is refused with the option named.
#include "common/nvcc/nvcc_options.h"

#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/nvcc/forwarded_flags.h"
#include "common/nvcc/nvcc_args.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distcc_cuda {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Args = std::vector<std::string>;

// The nvcc arguments of one compile of a real build, as its build system
// runs it (after the shell has removed one level of quoting).
struct BuildLine {
  std::string name;
  Args arguments;
};

void PrintTo(const BuildLine& c, std::ostream* os) { *os << c.name; }

class RealBuildLineTest : public ::testing::TestWithParam<BuildLine> {};

// The compile a worker gets: the dependency options go (the client writes
// dependency files), the paths are the client's own.
TEST_P(RealBuildLineTest, IsAcceptedWhole) {
  absl::StatusOr<NvccCommand> command = ParseNvccCommand(GetParam().arguments);
  ASSERT_TRUE(command.ok()) << command.status();
  Args remote = command->FlagArguments();
  // The client's own paths become relative ones inside the workspace root
  // ("/" here: the sources and torch's headers share no other ancestor).
  std::string source = command->sources.at(0);
  if (source[0] == '/') source = source.substr(1);
  remote.insert(remote.end(), {"-c", source, "-o", "unit.o"});
  PathPolicy policy{"/", "", SystemIncludePrefixes()};
  for (std::string& argument : remote) {
    if (argument.rfind("-I/", 0) == 0 && argument.rfind("-I/usr/", 0) != 0) {
      argument = "-I" + argument.substr(3);
    }
  }
  EXPECT_TRUE(ValidateCompileArguments(remote, policy).ok())
      << ValidateCompileArguments(remote, policy) << "\n"
      << absl::StrJoin(remote, " ");
}

// Every option of the line, on its own after a plain compile, is accepted:
// a table of the options real builds use.
TEST_P(RealBuildLineTest, EveryOptionIsKnown) {
  absl::StatusOr<NvccCommand> command = ParseNvccCommand(GetParam().arguments);
  ASSERT_TRUE(command.ok()) << command.status();
  for (const NvccArgument& flag : command->flags) {
    Args arguments = flag.Render();
    arguments.insert(arguments.end(), {"-c", "a.cu", "-o", "a.o"});
    absl::StatusOr<NvccCommand> one = ParseNvccCommand(arguments);
    EXPECT_TRUE(one.ok()) << absl::StrJoin(flag.Render(), " ") << ": " << one.status();
  }
}

Args Split(const std::string& line) { return absl::StrSplit(line, ' ', absl::SkipEmpty()); }

// flash-attention 2's setup.py through torch's cpp_extension (build.ninja:
// `$nvcc --generate-dependencies-with-compile --dependency-output $out.d
// $cuda_cflags -c $in -o $out $cuda_post_cflags`), for CUDA 13 with
// FLASH_ATTN_CUDA_ARCHS=100 and NVCC_THREADS=4.
const char kFlashAttention[] =
    "--generate-dependencies-with-compile --dependency-output "
    "/work/fa/build/temp/csrc/flash_attn/src/flash_fwd_hdim128_bf16_sm80.o.d "
    "-I/work/fa/csrc/flash_attn -I/work/fa/csrc/flash_attn/src -I/work/fa/csrc/cutlass/include "
    "-I/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/include "
    "-I/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/include/torch/csrc/api/"
    "include -I/usr/local/cuda/include -I/root/.pyenv/versions/3.11.7/include/python3.11 -c -c "
    "/work/fa/csrc/flash_attn/src/flash_fwd_hdim128_bf16_sm80.cu -o "
    "/work/fa/build/temp/csrc/flash_attn/src/flash_fwd_hdim128_bf16_sm80.o "
    "-D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ "
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr "
    "--compiler-options -fPIC -O3 -std=c++17 -U__CUDA_NO_HALF_OPERATORS__ "
    "-U__CUDA_NO_HALF_CONVERSIONS__ -U__CUDA_NO_HALF2_OPERATORS__ "
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__ --expt-relaxed-constexpr --expt-extended-lambda "
    "--use_fast_math -gencode arch=compute_100f,code=sm_100 -gencode "
    "arch=compute_100,code=compute_100 --threads 4 -DTORCH_API_INCLUDE_EXTENSION_H "
    "-DPYBIND11_COMPILER_TYPE=\"_gcc\" -DPYBIND11_STDLIB=\"_libstdcpp\" "
    "-DPYBIND11_BUILD_ABI=\"_cxxabi1018\" -DTORCH_EXTENSION_NAME=flash_attn_2_cuda "
    "-D_GLIBCXX_USE_CXX11_ABI=1";

// flash-attention 3 (hopper/setup.py) adds these to the same line.
const char kFlashAttention3[] =
    "-c /work/fa/hopper/instantiations/flash_fwd_hdim128_bf16_sm90.cu -o x.o -O3 -std=c++17 "
    "--ftemplate-backtrace-limit=0 --use_fast_math --resource-usage -lineinfo "
    "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DCUTLASS_ENABLE_GDC_FOR_SM90 "
    "-DCUTLASS_DEBUG_TRACE_LEVEL=0 -DNDEBUG -Xfatbin -compress-all -Xptxas=-v,--warn-on-spills "
    "-Xcompiler -fno-strict-aliasing -gencode arch=compute_90a,code=sm_90a";

// CUTLASS's CMake build of an sm100 GEMM library unit (ninja -t commands).
const char kCutlass[] =
    "-forward-unknown-to-host-compiler -DCUTLASS_ENABLE_CUBLAS=1 -DCUTLASS_NAMESPACE=cutlass "
    "-DCUTLASS_TEST_LEVEL=0 -DCUTLASS_TEST_ENABLE_CACHED_RESULTS=1 "
    "-DCUTLASS_CONV_UNIT_TEST_RIGOROUS_SIZE_ENABLED=1 -DCUTLASS_DEBUG_TRACE_LEVEL=0 "
    "-I/src/cutlass/include -I/src/cutlass/tools/library/include "
    "-I/src/cutlass/build/tools/library/include -I/src/cutlass/tools/library/src "
    "-isystem /usr/local/cuda/include -O3 -DNDEBUG -Xcompiler=-fPIC "
    "-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1 -DCUTLASS_ENABLE_GDC_FOR_SM100=1 --expt-relaxed-constexpr "
    "-DCUTLASS_USE_TMA=1 -DCUTE_USE_PACKED_TUPLE=1 -ftemplate-backtrace-limit=0 "
    "-Xcompiler=-Wconversion -Xcompiler=-fno-strict-aliasing -lineinfo -std=c++17 "
    "--generate-code=arch=compute_100a,code=[sm_100a,compute_100a] "
    "-gencode=arch=compute_100a,code=[sm_100a,compute_100a] -MD -MT "
    "tools/library/CMakeFiles/cutlass_library_gemm_sm100_bf16.dir/generated/gemm/100/bf16/"
    "cutlass3x_sm100_tensorop_gemm_bf16.cu.o -MF "
    "tools/library/CMakeFiles/cutlass_library_gemm_sm100_bf16.dir/generated/gemm/100/bf16/"
    "cutlass3x_sm100_tensorop_gemm_bf16.cu.o.d -x cu -c "
    "/src/cutlass/build/tools/library/generated/gemm/100/bf16/"
    "cutlass3x_sm100_tensorop_gemm_bf16.cu "
    "-o tools/library/gemm.cu.o";

// What CMake writes for a plain CUDA target with its defaults.
const char kCmakeDefault[] =
    "-I/work/proj/include -isystem=/usr/local/cuda/targets/x86_64-linux/include -O3 -DNDEBUG "
    "--generate-code=arch=compute_100,code=[compute_100,sm_100] -Xcompiler=-fPIC "
    "-Xcompiler=-fvisibility=hidden -std=c++17 -MD -MT k.cu.o -MF k.cu.o.d -x cu -c "
    "/work/proj/k.cu -o k.cu.o";

// Other options real projects use: vLLM, xformers, apex, the example here.
const char kOthers[] =
    "-c a.cu -o a.o -O2 -g -G -Xptxas -O3,-v -Xptxas=--allow-expensive-optimizations=true "
    "-Xcudafe --diag_suppress=esa_on_defaulted_function_ignored -Xcudafe "
    "--diag_suppress=177 --diag-suppress=20012,20013 -diag-suppress 186 -maxrregcount=128 "
    "-Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-O3,-fopenmp,-funroll-loops,-pthread "
    "-Xcompiler -fvisibility=hidden -Xcompiler -Werror=return-type -Xcompiler -march=x86-64-v3 "
    "-Xcompiler -ffile-prefix-map=/work/proj=. -Xcompiler -g3 -Xcompiler -std=c++17 "
    "--default-stream per-thread -rdc=false -ftz=true -prec-div=false -prec-sqrt=false "
    "-fmad=true --split-compile=4 -Wno-deprecated-gpu-targets -allow-unsupported-compiler "
    "--extended-lambda -Werror cross-execution-space-call -DVERSION=\"1.2\" -UNDEBUG -t 0 "
    "--compress-mode=size -arch=sm_90a -code=sm_90a,compute_90a -x cu -m64 -include pch.h";

INSTANTIATE_TEST_SUITE_P(Tables, RealBuildLineTest,
                         ::testing::Values(BuildLine{"FlashAttention2", Split(kFlashAttention)},
                                           BuildLine{"FlashAttention3", Split(kFlashAttention3)},
                                           BuildLine{"CutlassCmake", Split(kCutlass)},
                                           BuildLine{"CmakeDefaults", Split(kCmakeDefault)},
                                           BuildLine{"OtherProjects", Split(kOthers)}),
                         [](const ::testing::TestParamInfo<BuildLine>& info) {
                           return info.param.name;
                         });

TEST(RealBuildLineTest, FlashAttentionKeepsItsDefinitionsAndTargets) {
  absl::StatusOr<NvccCommand> command = ParseNvccCommand(Split(kFlashAttention));
  ASSERT_TRUE(command.ok()) << command.status();
  EXPECT_TRUE(command->dependency_flags_dropped);
  // cpp_extension writes "-c -c": one compile.
  EXPECT_THAT(command->actions, ElementsAre("-c"));
  Args flags = command->FlagArguments();
  EXPECT_THAT(flags, ::testing::Contains("-DPYBIND11_COMPILER_TYPE=\"_gcc\""));
  EXPECT_THAT(flags, ::testing::Contains("arch=compute_100f,code=sm_100"));
  EXPECT_THAT(flags, ::testing::Contains("-fPIC"));
}

// The payloads of the security report, and others of their kind.
struct Refusal {
  std::string name;
  Args arguments;
  std::string message_has;
};

void PrintTo(const Refusal& c, std::ostream* os) { *os << c.name; }

class RefusedArgumentTest : public ::testing::TestWithParam<Refusal> {};

TEST_P(RefusedArgumentTest, IsRefusedNamingIt) {
  Args arguments = GetParam().arguments;
  arguments.insert(arguments.end(), {"-c", "a.cu", "-o", "a.o"});
  absl::Status status = ValidateCompileArguments(arguments, {"/work", "", SystemIncludePrefixes()});
  ASSERT_FALSE(status.ok()) << absl::StrJoin(arguments, " ");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(GetParam().message_has));
}

INSTANTIATE_TEST_SUITE_P(
    Payloads, RefusedArgumentTest,
    ::testing::Values(
        Refusal{"XcompilerSemicolon", {"-Xcompiler", "-DX=1;touch /tmp/p #"}, "';'"},
        Refusal{"XptxasSemicolon", {"-Xptxas", "-v;touch /tmp/p #"}, "';'"},
        Refusal{"XcompilerSpaceHidesPlugin", {"-Xcompiler", "-O2 -fplugin=/x.so"}, "byte 0x20"},
        Refusal{"XcompilerSpaceHidesB", {"-Xcompiler", "-O2 -B/dir"}, "byte 0x20"},
        Refusal{"XcompilerB", {"-Xcompiler", "-B/dir"}, "-B/dir"},
        Refusal{"XcompilerPlugin", {"-Xcompiler=-fplugin=/x.so"}, "-fplugin"},
        Refusal{"XcompilerSpecs", {"-Xcompiler", "-specs=/x"}, "-specs=/x"},
        Refusal{"XcompilerWrapper", {"-Xcompiler", "-wrapper,/bin/sh"}, "-wrapper"},
        Refusal{"XcompilerSaveTemps", {"-Xcompiler", "-save-temps"}, "-save-temps"},
        Refusal{"XcompilerIncludeFile", {"-Xcompiler", "-include,/etc/shadow"}, "-include"},
        Refusal{"XcompilerResponseFile", {"-Xcompiler", "@/etc/passwd"}, "'@/etc/passwd'"},
        Refusal{"XcompilerAssemblerPassthrough", {"-Xcompiler", "-Wa\\,-adhln=/tmp/x"}, "-Wa"},
        Refusal{"XcompilerLinkerPassthrough", {"-Xcompiler", "-Wl,-rpath"}, "-Wl"},
        Refusal{
            "XcompilerProfileWritesFiles", {"-Xcompiler", "-fprofile-generate=/tmp"}, "-fprofile"},
        Refusal{"XcompilerDumpWritesFiles", {"-Xcompiler", "-fdump-tree-all"}, "-fdump"},
        Refusal{"XcompilerOptInfoFile", {"-Xcompiler", "-fopt-info-vec=/tmp/x"}, "-fopt-info"},
        Refusal{"XcompilerMarchNative", {"-Xcompiler", "-march=native"}, "-march=native"},
        Refusal{"XcompilerDollar", {"-Xcompiler", "-DX=$(id)"}, "'$'"},
        Refusal{"XcompilerBacktick", {"-Xcompiler", "-DX=`id`"}, "'`'"},
        Refusal{"XcompilerQuote", {"-Xcompiler", "-DX=\"a\""}, "'\"'"},
        Refusal{"XcompilerNewline", {"-Xcompiler", "-O2\ntouch /tmp/p"}, "byte 0x0a"},
        Refusal{"XptxasOutput", {"-Xptxas", "--output-file=/tmp/x"}, "--output-file"},
        Refusal{"XptxasOptionsFile", {"-Xptxas", "--options-file=/etc/x"}, "--options-file"},
        Refusal{"Xlinker", {"-Xlinker", "-rpath"}, "no linker"},
        Refusal{"Xarchive", {"-Xarchive", "x"}, "no linker or archiver"},
        Refusal{"XnvlinkOther", {"-Xnvlink", "--output-file=/x"}, "nvlink accepts only"},
        Refusal{"XcudafeOther", {"-Xcudafe", "--gen_c_file_name=/tmp/x"}, "cudafe++"},
        Refusal{"DefineDollar", {"-DX=$(touch /tmp/p)"}, "'$'"},
        Refusal{"DefineBacktick", {"-D", "X=`id`"}, "'`'"},
        Refusal{"DefineNotIdentifier", {"-D", "1X=2"}, "NAME or NAME=VALUE"},
        Refusal{"IncludePathDollar", {"-I$(id)"}, "'$'"},
        Refusal{"IncludePathQuote", {"-I", "a\"b"}, "'\"'"},
        Refusal{"Time", {"--time=/tmp/t"}, "--time"},
        Refusal{"TimeSeparate", {"-time", "/tmp/t"}, "-time"},
        Refusal{"DeviceTimeTrace", {"-fdevice-time-trace", "/tmp/t"}, "-fdevice-time-trace"},
        Refusal{"Ccbin", {"-ccbin", "/tmp/evil"}, "-ccbin"},
        Refusal{"CompilerBindirEquals", {"--compiler-bindir=/tmp"}, "--compiler-bindir"},
        Refusal{"Run", {"--run"}, "--run"}, Refusal{"RunArgs", {"-run-args", "x"}, "-run-args"},
        Refusal{"OptionsFile", {"--options-file", "/tmp/o"}, "--options-file"},
        Refusal{"Optf", {"-optf=/tmp/o"}, "-optf"},
        Refusal{"ResponseFile", {"@/tmp/args"}, "response file"},
        Refusal{"Keep", {"-keep"}, "-keep"},
        Refusal{"LibdeviceDirectory", {"-ldir", "/tmp"}, "-ldir"},
        Refusal{"ArchNative", {"-arch=native"}, "native"},
        Refusal{"UnknownOption", {"--definitely-not-nvcc"}, "not in distcc-cuda's argument model"},
        Refusal{"UnknownWithValue", {"--unknown=1"}, "--unknown"},
        Refusal{"SwitchWithValue", {"-G=1"}, "takes no value"},
        Refusal{"Link", {"-shared"}, "links and archives run on the client"},
        Refusal{"Preprocess", {"-E"}, "preprocesses"},
        Refusal{"ThreadsNotANumber", {"--threads", "4;id"}, "whole number"},
        Refusal{"GencodeJunk", {"-gencode", "arch=compute_90,code=sm_90;id"}, "-gencode"},
        Refusal{"StdJunk", {"-std=c++17 -B/x"}, "C++ standard"},
        Refusal{"SourceWithSemicolon", {"b;id.cu"}, "';'"},
        // The review's bypass: gcc reads an argument starting with '@' as a
        // file of options (-wrapper ...), and nvcc hands these on alone.
        Refusal{"IsystemResponseFile", {"-isystem", "@inc/a.rsp"}, "start with '@'"},
        Refusal{"IsystemJoinedResponseFile", {"-isystem@inc/a.rsp"}, "start with '@'"},
        Refusal{"PreIncludeResponseFile", {"-include", "@inc/a.rsp"}, "start with '@'"},
        Refusal{"IncludeListResponseFile", {"-Iinc,@inc/a.rsp"}, "start with '@'"},
        Refusal{"PathThatIsAnOption", {"-isystem", "-fplugin=/x.so"}, "start with '@' or '-'"}),
    [](const ::testing::TestParamInfo<Refusal>& info) { return info.param.name; });

TEST(RefusedArgumentTest, OutputThatGccWouldReadAsOptionsIsRefused) {
  for (const char* output : {"@o.rsp", "-wrapper"}) {
    absl::Status status = ValidateCompileArguments({"-c", "a.cu", "-o", output}, {});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << output;
  }
}

TEST(ForbiddenOptionTest, LocalOnlyOptionsAreMarkedForTheLauncher) {
  for (const char* name : {"-shared", "--version", "-E", "-dlink", "-lib", "--dryrun"}) {
    const NvccOptionSpec* spec = FindNvccOption(name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_EQ(spec->kind, NvccValueKind::kForbidden) << name;
    EXPECT_TRUE(spec->local_only) << name;
  }
  for (const char* name : {"-ccbin", "--run", "-optf", "--time"}) {
    const NvccOptionSpec* spec = FindNvccOption(name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_FALSE(spec->local_only) << name;
  }
}

TEST(SplitNvccListTest, SplitsAtUnescapedCommasOnly) {
  EXPECT_THAT(SplitNvccList("-fPIC,-Wall"), ElementsAre("-fPIC", "-Wall"));
  EXPECT_THAT(SplitNvccList("X=900\\,1000"), ElementsAre("X=900,1000"));
  EXPECT_THAT(SplitNvccList(""), ElementsAre(""));
  EXPECT_THAT(SplitNvccList("a,"), ElementsAre("a", ""));
}

TEST(ForwardedFlagsTest, EmptyPieceIsRefused) {
  EXPECT_FALSE(CheckForwardedFlags(ForwardedTool::kHostCompiler, "-Xcompiler", "-fPIC,").ok());
}

TEST(ForwardedFlagsTest, HostCompilerFamiliesAccepted) {
  for (const char* piece : {"-fPIC",
                            "-fno-strict-aliasing",
                            "-fvisibility=hidden",
                            "-Wall",
                            "-Wno-psabi",
                            "-Werror=return-type",
                            "-O0",
                            "-O3",
                            "-Os",
                            "-Ofast",
                            "-g",
                            "-g3",
                            "-ggdb",
                            "-std=c++17",
                            "-std=gnu++20",
                            "-DNDEBUG",
                            "-DX=1",
                            "-UNDEBUG",
                            "-m64",
                            "-mavx2",
                            "-march=x86-64-v3",
                            "-pthread",
                            "-fopenmp",
                            "--param=max-inline-insns-single=1000",
                            "-fmax-errors=5",
                            "-fdiagnostics-color=always",
                            "-fno-gnu-unique",
                            "-fopt-info-vec-missed"}) {
    EXPECT_TRUE(CheckForwardedFlags(ForwardedTool::kHostCompiler, "-Xcompiler", piece).ok())
        << piece << ": " << CheckForwardedFlags(ForwardedTool::kHostCompiler, "-Xcompiler", piece);
  }
}

TEST(ForwardedFlagsTest, PtxasOptionsAccepted) {
  for (const char* piece : {"-v", "--verbose", "-O3", "--warn-on-spills", "-warn-spills",
                            "--maxrregcount=64", "--allow-expensive-optimizations=true",
                            "--suppress-stack-size-warning", "-lineinfo", "--def-load-cache=ca"}) {
    EXPECT_TRUE(CheckForwardedFlags(ForwardedTool::kPtxas, "-Xptxas", piece).ok())
        << piece << ": " << CheckForwardedFlags(ForwardedTool::kPtxas, "-Xptxas", piece);
  }
}

}  // namespace
}  // namespace distcc_cuda
