// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/nvcc_args.h"

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distcc_cuda {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

using Args = std::vector<std::string>;

// One parsed flag, as expected.
struct Flag {
  std::string option;
  std::string value;
  NvccValueKind kind;
};

struct ParseCase {
  std::string name;
  Args arguments;
  Args sources;
  std::string output;
  bool compile_only;
  std::vector<Flag> flags;
  bool dependency_flags_dropped = false;
};

void PrintTo(const ParseCase& c, std::ostream* os) { *os << c.name; }

class ParseNvccCommandTest : public ::testing::TestWithParam<ParseCase> {};

TEST_P(ParseNvccCommandTest, Splits) {
  const ParseCase& c = GetParam();
  absl::StatusOr<NvccCommand> command = ParseNvccCommand(c.arguments);
  ASSERT_TRUE(command.ok()) << command.status();
  EXPECT_THAT(command->sources, ElementsAreArray(c.sources));
  EXPECT_EQ(command->output, c.output);
  EXPECT_EQ(command->compile_only, c.compile_only);
  EXPECT_EQ(command->dependency_flags_dropped, c.dependency_flags_dropped);
  ASSERT_EQ(command->flags.size(), c.flags.size());
  for (size_t i = 0; i < c.flags.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(command->flags[i].option, c.flags[i].option);
    EXPECT_EQ(command->flags[i].value, c.flags[i].value);
    EXPECT_EQ(command->flags[i].kind, c.flags[i].kind);
  }
}

constexpr auto kNone = NvccValueKind::kNone;
constexpr auto kText = NvccValueKind::kText;
constexpr auto kInput = NvccValueKind::kInputPath;

INSTANTIATE_TEST_SUITE_P(
    Cases, ParseNvccCommandTest,
    ::testing::Values(
        ParseCase{"CompileSourceOutput", {"-c", "a.cu", "-o", "a.o"}, {"a.cu"}, "a.o", true, {}},
        ParseCase{"LongCompile", {"--compile", "a.cu", "-o", "a.o"}, {"a.cu"}, "a.o", true, {}},
        ParseCase{"NoCompile", {"a.cu", "-o", "a.o"}, {"a.cu"}, "a.o", false, {}},
        ParseCase{"OutputWithEquals", {"-c", "a.cu", "-o=a.o"}, {"a.cu"}, "a.o", true, {}},
        ParseCase{"LongOutput", {"a.cu", "--output-file", "a.o"}, {"a.cu"}, "a.o", false, {}},
        ParseCase{"TwoSources", {"a.cu", "b.cpp"}, {"a.cu", "b.cpp"}, "", false, {}},
        ParseCase{"IncludeJoined",
                  {"-Iinclude", "a.cu"},
                  {"a.cu"},
                  "",
                  false,
                  {{"-I", "include", kInput}}},
        ParseCase{"IncludeSeparate",
                  {"-I", "include", "a.cu"},
                  {"a.cu"},
                  "",
                  false,
                  {{"-I", "include", kInput}}},
        ParseCase{"IncludePathEquals",
                  {"--include-path=include", "a.cu"},
                  {"a.cu"},
                  "",
                  false,
                  {{"--include-path", "include", kInput}}},
        ParseCase{"IncludePathSeparate",
                  {"--include-path", "include", "a.cu"},
                  {"a.cu"},
                  "",
                  false,
                  {{"--include-path", "include", kInput}}},
        ParseCase{"SystemIncludeJoined",
                  {"-isystem/opt/x", "a.cu"},
                  {"a.cu"},
                  "",
                  false,
                  {{"-isystem", "/opt/x", kInput}}},
        ParseCase{"PreInclude",
                  {"-include", "pch.h", "a.cu"},
                  {"a.cu"},
                  "",
                  false,
                  {{"-include", "pch.h", kInput}}},
        ParseCase{
            "DefineWithValue", {"-DX=1", "a.cu"}, {"a.cu"}, "", false, {{"-D", "X=1", kText}}},
        ParseCase{"DefineSeparate", {"-D", "X", "a.cu"}, {"a.cu"}, "", false, {{"-D", "X", kText}}},
        ParseCase{"Undefine", {"-UX", "a.cu"}, {"a.cu"}, "", false, {{"-U", "X", kText}}},
        ParseCase{"Optimize", {"-O3", "a.cu"}, {"a.cu"}, "", false, {{"-O", "3", kText}}},
        ParseCase{"GencodeSeparate",
                  {"-gencode", "arch=compute_90,code=sm_90", "a.cu"},
                  {"a.cu"},
                  "",
                  false,
                  {{"-gencode", "arch=compute_90,code=sm_90", kText}}},
        ParseCase{"GencodeEquals",
                  {"-gencode=arch=compute_90,code=sm_90", "a.cu"},
                  {"a.cu"},
                  "",
                  false,
                  {{"-gencode", "arch=compute_90,code=sm_90", kText}}},
        ParseCase{"ArchSeparate",
                  {"-arch", "sm_90", "a.cu"},
                  {"a.cu"},
                  "",
                  false,
                  {{"-arch", "sm_90", kText}}},
        ParseCase{
            "StdEquals", {"-std=c++17", "a.cu"}, {"a.cu"}, "", false, {{"-std", "c++17", kText}}},
        ParseCase{"XcompilerEquals",
                  {"-Xcompiler=-fPIC", "a.cu"},
                  {"a.cu"},
                  "",
                  false,
                  {{"-Xcompiler", "-fPIC", kText}}},
        ParseCase{"XcompilerSeparate",
                  {"-Xcompiler", "-fPIC,-Wall", "a.cu"},
                  {"a.cu"},
                  "",
                  false,
                  {{"-Xcompiler", "-fPIC,-Wall", kText}}},
        ParseCase{"Switches",
                  {"-G", "--use_fast_math", "-lineinfo", "a.cu"},
                  {"a.cu"},
                  "",
                  false,
                  {{"-G", "", kNone}, {"--use_fast_math", "", kNone}, {"-lineinfo", "", kNone}}},
        ParseCase{"SwitchWithBooleanValueAfterEquals",
                  {"-ftz=true", "a.cu"},
                  {"a.cu"},
                  "",
                  false,
                  {{"-ftz", "true", kText}}},
        ParseCase{"DependencyFlagsDropped",
                  {"-c", "a.cu", "-MD", "-MT", "x", "-MF", "y", "-o", "a.o"},
                  {"a.cu"},
                  "a.o",
                  true,
                  {},
                  true},
        ParseCase{"LongDependencyFlagsDropped",
                  {"--generate-dependencies-with-compile", "--dependency-output", "a.d", "a.cu"},
                  {"a.cu"},
                  "",
                  false,
                  {},
                  true},
        ParseCase{"MmdDropped", {"-MMD", "-MP", "a.cu"}, {"a.cu"}, "", false, {}, true}),
    [](const ::testing::TestParamInfo<ParseCase>& info) { return info.param.name; });

struct ErrorCase {
  std::string name;
  Args arguments;
  std::string message_has;
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

class ParseNvccCommandErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ParseNvccCommandErrorTest, InvalidArgumentNamingTheOption) {
  absl::StatusOr<NvccCommand> command = ParseNvccCommand(GetParam().arguments);
  ASSERT_FALSE(command.ok());
  EXPECT_EQ(command.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(command.status().message(), HasSubstr(GetParam().message_has));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ParseNvccCommandErrorTest,
    ::testing::Values(
        ErrorCase{"Ccbin", {"-ccbin", "/usr/bin/g++-12", "-c", "a.cu"}, "-ccbin"},
        ErrorCase{"CcbinEquals", {"-ccbin=/usr/bin/g++-12", "-c", "a.cu"}, "-ccbin"},
        ErrorCase{"CompilerBindir", {"--compiler-bindir", "/usr/bin", "a.cu"}, "--compiler-bindir"},
        ErrorCase{
            "CompilerBindirEquals", {"--compiler-bindir=/usr/bin", "a.cu"}, "--compiler-bindir"},
        ErrorCase{"Optf", {"-optf", "opts.txt", "a.cu"}, "-optf"},
        ErrorCase{"OptionsFile", {"--options-file", "opts.txt", "a.cu"}, "--options-file"},
        ErrorCase{"Odir", {"-odir", "out", "a.cu"}, "-odir"},
        ErrorCase{"OutputDirectory", {"--output-directory=out", "a.cu"}, "--output-directory"},
        ErrorCase{"KeepDir", {"--keep-dir", "tmp", "a.cu"}, "--keep-dir"},
        ErrorCase{"Run", {"-run", "a.cu"}, "-run"},
        ErrorCase{"MissingOutputValue", {"-c", "a.cu", "-o"}, "-o is missing its value"},
        ErrorCase{"MissingIncludeValue", {"a.cu", "-I"}, "-I is missing its value"},
        ErrorCase{"MissingGencodeValue", {"a.cu", "-gencode"}, "-gencode is missing its value"},
        ErrorCase{"MissingDependencyValue", {"a.cu", "-MF"}, "-MF is missing its value"},
        ErrorCase{"TwoOutputs", {"a.cu", "-o", "a.o", "-o", "b.o"}, "more than one output"},
        ErrorCase{"ResponseFile", {"@args.rsp"}, "@args.rsp"}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) { return info.param.name; });

TEST(ParseNvccCommandTest, ForbiddenMessageSaysWhy) {
  absl::StatusOr<NvccCommand> command = ParseNvccCommand({"-ccbin", "clang++", "a.cu"});
  ASSERT_FALSE(command.ok());
  EXPECT_THAT(command.status().message(), HasSubstr("host compiler"));
}

TEST(ParseNvccCommandTest, FlagArgumentsRenderEveryFormBackUnchanged) {
  Args flags = {"-Iinclude",
                "-I",
                "third_party/cutlass/include",
                "--include-path=gen",
                "-isystem/opt/cuda/include",
                "-DX=1",
                "-D",
                "Y",
                "-O3",
                "-std=c++17",
                "-gencode",
                "arch=compute_90a,code=sm_90a",
                "-gencode=arch=compute_100,code=sm_100",
                "-Xcompiler=-fPIC",
                "-Xptxas",
                "-v",
                "-G",
                "--use_fast_math",
                "-ftz=true"};
  Args arguments = flags;
  arguments.insert(arguments.begin() + 3, {"-c", "kernel.cu", "-MD", "-MF", "k.d"});
  arguments.insert(arguments.end(), {"-o", "kernel.o"});
  absl::StatusOr<NvccCommand> command = ParseNvccCommand(arguments);
  ASSERT_TRUE(command.ok()) << command.status();
  EXPECT_THAT(command->FlagArguments(), ElementsAreArray(flags));
  EXPECT_THAT(command->sources, ElementsAre("kernel.cu"));
  EXPECT_EQ(command->output, "kernel.o");
}

TEST(ParseNvccCommandTest, RenderedFlagsParseToTheSameFlags) {
  Args arguments = {"-Iinc", "-I", "inc2", "--include-path=inc3", "-DA=1", "-O2", "-G"};
  absl::StatusOr<NvccCommand> first = ParseNvccCommand(arguments);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<NvccCommand> second = ParseNvccCommand(first->FlagArguments());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->FlagArguments(), first->FlagArguments());
}

TEST(ParseNvccCommandTest, EmptyCommand) {
  absl::StatusOr<NvccCommand> command = ParseNvccCommand({});
  ASSERT_TRUE(command.ok()) << command.status();
  EXPECT_THAT(command->sources, IsEmpty());
  EXPECT_THAT(command->flags, IsEmpty());
  EXPECT_EQ(command->output, "");
}

struct RenderCase {
  std::string name;
  NvccArgument argument;
  Args rendered;
};

void PrintTo(const RenderCase& c, std::ostream* os) { *os << c.name; }

class NvccArgumentRenderTest : public ::testing::TestWithParam<RenderCase> {};

TEST_P(NvccArgumentRenderTest, Renders) {
  EXPECT_THAT(GetParam().argument.Render(), ElementsAreArray(GetParam().rendered));
}

INSTANTIATE_TEST_SUITE_P(
    Forms, NvccArgumentRenderTest,
    ::testing::Values(
        RenderCase{"Joined", {"-I", "inc", kInput, NvccArgument::Form::kJoined}, {"-Iinc"}},
        RenderCase{"Equals", {"-std", "c++17", kText, NvccArgument::Form::kEquals}, {"-std=c++17"}},
        RenderCase{"Separate", {"-I", "inc", kInput, NvccArgument::Form::kSeparate}, {"-I", "inc"}},
        RenderCase{"Switch", {"-G", "", kNone, NvccArgument::Form::kSeparate}, {"-G"}},
        RenderCase{"Positional", {"", "a.cu", kNone, NvccArgument::Form::kPositional}, {"a.cu"}}),
    [](const ::testing::TestParamInfo<RenderCase>& info) { return info.param.name; });

struct SandboxCase {
  std::string name;
  Args arguments;
  bool ok;
  std::string message_has = "";
  std::string workspace_root = "";
  std::string working_directory = "";
};

void PrintTo(const SandboxCase& c, std::ostream* os) { *os << c.name; }

class ValidateCompileArgumentsTest : public ::testing::TestWithParam<SandboxCase> {};

TEST_P(ValidateCompileArgumentsTest, Checks) {
  PathPolicy policy{GetParam().workspace_root, GetParam().working_directory,
                    SystemIncludePrefixes("/opt/cuda-12.8")};
  absl::Status status = ValidateCompileArguments(GetParam().arguments, policy);
  if (GetParam().ok) {
    EXPECT_TRUE(status.ok()) << status;
  } else {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr(GetParam().message_has));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ValidateCompileArgumentsTest,
    ::testing::Values(
        SandboxCase{"RelativePathsOk",
                    {"-c", "src/a.cu", "-o", "out/a.o", "-Iinclude", "-O3", "-Xcompiler=-fPIC"},
                    true},
        SandboxCase{"InnerDotDotStaysInside",
                    {"-c", "src/../a.cu", "-o", "out/./a.o", "-Iinclude/../gen"},
                    true},
        SandboxCase{"DotDotFromWorkingDirectoryStaysInside",
                    {"-c", "../src/a.cu", "-o", "a.o", "-I../include"},
                    true,
                    "",
                    "/work/proj",
                    "build"},
        SandboxCase{
            "SystemIncludesAllowed",
            {"-c", "a.cu", "-o", "a.o", "-I/usr/local/cuda/include", "-isystem", "/usr/include"},
            true,
            "",
            "/work/proj"},
        SandboxCase{"OwnToolkitIncludeAllowed",
                    {"-c", "a.cu", "-o", "a.o", "-I/opt/cuda-12.8/include"},
                    true,
                    "",
                    "/work/proj"},
        SandboxCase{"AbsoluteIncludeInsideTheRootAllowed",
                    {"-c", "a.cu", "-o", "a.o", "-I/work/proj/include"},
                    true,
                    "",
                    "/work/proj"},
        SandboxCase{"AbsoluteIncludeOutsideTheRootRejected",
                    {"-c", "a.cu", "-o", "a.o", "-I/home/other/include"},
                    false,
                    "/home/other/include",
                    "/work/proj"},
        SandboxCase{"AbsoluteIncludeAllowedWhileTheRootIsUnknown",
                    {"-c", "a.cu", "-o", "a.o", "-I/home/me/include"},
                    true},
        SandboxCase{"EtcIncludeRejectedEvenWithoutRoot",
                    {"-c", "a.cu", "-o", "a.o", "-I/etc"},
                    false,
                    "-I '/etc'"},
        SandboxCase{"ShadowPreIncludeRejected",
                    {"-c", "a.cu", "-o", "a.o", "-include", "/etc/shadow"},
                    false,
                    "/etc/shadow"},
        SandboxCase{
            "SshFolderRejected", {"-c", "a.cu", "-o", "a.o", "-I/home/me/.ssh"}, false, ".ssh"},
        SandboxCase{"IncludeListCheckedPieceByPiece",
                    {"-c", "a.cu", "-o", "a.o", "-Iinclude,/proc/self"},
                    false,
                    "/proc/self"},
        SandboxCase{"AbsoluteOutputRejected", {"-c", "a.cu", "-o", "/tmp/a.o"}, false, "/tmp/a.o"},
        SandboxCase{"OutputEscapeRejected", {"-c", "a.cu", "-o", "../a.o"}, false, "../a.o"},
        SandboxCase{"AbsoluteSourceRejected", {"-c", "/etc/a.cu", "-o", "a.o"}, false, "/etc/a.cu"},
        SandboxCase{"SourceEscapeRejected", {"-c", "../a.cu", "-o", "a.o"}, false, "../a.cu"},
        SandboxCase{"SourceEscapeThroughSubfolder",
                    {"-c", "src/../../a.cu", "-o", "a.o"},
                    false,
                    "src/../../a.cu"},
        SandboxCase{"SourceEscapeFromWorkingDirectory",
                    {"-c", "../../a.cu", "-o", "a.o"},
                    false,
                    "../../a.cu",
                    "/work/proj",
                    "build"},
        SandboxCase{
            "IncludeEscapeRejected", {"-c", "a.cu", "-o", "a.o", "-I../inc"}, false, "../inc"},
        SandboxCase{"IncludeSeparateEscapeRejected",
                    {"-c", "a.cu", "-o", "a.o", "-I", "inc/../../x"},
                    false,
                    "inc/../../x"},
        SandboxCase{"PreIncludeEscapeRejected",
                    {"-c", "a.cu", "-o", "a.o", "--pre-include=../x.h"},
                    false,
                    "../x.h"},
        SandboxCase{"PluginRejected",
                    {"-c", "a.cu", "-o", "a.o", "-Xcompiler=-fplugin=x"},
                    false,
                    "-fplugin=x"},
        SandboxCase{"PluginInListRejected",
                    {"-c", "a.cu", "-o", "a.o", "-Xcompiler", "-fPIC,-fplugin=x.so"},
                    false,
                    "-fplugin=x.so"},
        // The shell nvcc hands -Xcompiler to takes one pair of quotes around
        // inert text away (PyTorch's cpp_extension writes '-fPIC'); quotes
        // do not hide what is inside them.
        SandboxCase{"QuotedInertPieceAccepted",
                    {"-c", "a.cu", "-o", "a.o", "--compiler-options", "'-fPIC'"},
                    true},
        SandboxCase{"QuotedPluginRejected",
                    {"-c", "a.cu", "-o", "a.o", "-Xcompiler", "'-fplugin=x.so'"},
                    false,
                    "-fplugin=x.so"},
        SandboxCase{"QuotedMetacharacterRejected",
                    {"-c", "a.cu", "-o", "a.o", "-Xcompiler", "'-fPIC;id'"},
                    false,
                    "';'"},
        SandboxCase{"HalfQuotedRejected",
                    {"-c", "a.cu", "-o", "a.o", "-Xcompiler", "'-fPIC"},
                    false,
                    "'''"},
        SandboxCase{"RepeatedCompileIsOneAction", {"-c", "-c", "a.cu", "-o", "a.o"}, true},
        SandboxCase{"HostToolPathRejected",
                    {"-c", "a.cu", "-o", "a.o", "--compiler-options=-B/tmp/evil"},
                    false,
                    "-B/tmp/evil"},
        SandboxCase{"HostOutputRejected",
                    {"-c", "a.cu", "-o", "a.o", "-Xcompiler", "-o,/tmp/x"},
                    false,
                    "-o"},
        SandboxCase{"NoOutputRejected", {"-c", "a.cu"}, false, "-o"},
        SandboxCase{"NoActionRejected", {"a.cu", "-o", "a.o"}, false, "exactly one thing"},
        SandboxCase{
            "TwoActionsRejected", {"-c", "-ptx", "a.cu", "-o", "a.o"}, false, "-c and -ptx"},
        SandboxCase{"CubinIsAnAction", {"-cubin", "a.cu", "-o", "a.cubin"}, true},
        SandboxCase{"TwoSourcesRejected", {"-c", "a.cu", "b.cu", "-o", "a.o"}, false, "one source"},
        SandboxCase{
            "DependencyFlagsRejected", {"-c", "a.cu", "-o", "a.o", "-MD"}, false, "dependency"},
        SandboxCase{"ForbiddenOptionRejected",
                    {"-c", "a.cu", "-o", "a.o", "-ccbin", "gcc"},
                    false,
                    "-ccbin"}),
    [](const ::testing::TestParamInfo<SandboxCase>& info) { return info.param.name; });

// A unit's files never land among the toolchain's on a worker: an input
// named usr/bin/gcc under the root "/", or a root of /usr/bin, would be the
// compile's gcc. Beside them (pip's /usr/local/lib) is fine.
TEST(ValidateCompileUnitTest, FilesAmongTheToolchainsAreRefused) {
  auto unit = [](const std::string& root, const std::string& cwd,
                 const std::vector<std::string>& inputs) {
    v1::CompileUnit unit;
    unit.set_name("u");
    unit.set_workspace_root(root);
    unit.set_working_directory(cwd);
    for (const char* argument : {"-c", "a.cu", "-o", "a.o"}) unit.add_arguments(argument);
    unit.add_output_paths("a.o");
    for (const std::string& path : inputs) unit.add_inputs()->set_path(path);
    return unit;
  };
  struct Case {
    v1::CompileUnit unit;
    bool ok;
  };
  for (const Case& c : std::vector<Case>{
           {unit("/", "work", {"work/a.cu", "usr/bin/gcc"}), false},
           {unit("/usr/bin", "", {"a.cu"}), false},
           {unit("/", "usr/lib/x", {"usr/lib/x/a.cu"}), false},
           {unit("/usr/local/cuda-13.0", "", {"a.cu"}), false},
           {unit("/opt/cuda-12.8", "", {"a.cu"}), false},  // the worker's own toolkit
           {unit("/", "lib64", {"lib64/a.cu"}), false},
           {unit("/usr/local/lib/python3.11/site-packages", "", {"a.cu", "torch/include/t.h"}),
            true},
           {unit("/", "work", {"work/a.cu", "root/.pyenv/include/p.h"}), true},
       }) {
    absl::Status status = ValidateCompileUnit(c.unit, SystemIncludePrefixes("/opt/cuda-12.8"));
    EXPECT_EQ(status.ok(), c.ok) << c.unit.workspace_root() << " " << c.unit.working_directory()
                                 << ": " << status;
  }
}

// A build's units share most inputs; their paths are checked once per
// root (CheckedUnitParts), with the same verdicts as one by one.
TEST(ValidateCompileUnitTest, PathsCheckedOnceGiveTheSameVerdicts) {
  auto unit = [](const std::string& root, const std::vector<std::string>& inputs,
                 const std::string& output = "a.o") {
    v1::CompileUnit unit;
    unit.set_name("u");
    unit.set_workspace_root(root);
    for (const std::string& argument :
         {std::string("-c"), std::string("a.cu"), std::string("-o"), output}) {
      unit.add_arguments(argument);
    }
    unit.add_output_paths(output);
    for (const std::string& path : inputs) unit.add_inputs()->set_path(path);
    return unit;
  };
  const std::vector<std::string> prefixes = SystemIncludePrefixes("/opt/cuda-12.8");
  std::vector<v1::CompileUnit> units = {
      unit("/", {"a.cu", "usr/include/stdio.h"}),     // among the system's headers
      unit("/src", {"a.cu", "usr/include/stdio.h"}),  // the same path, elsewhere: fine
      unit("/src", {"a.cu", "include/cute/tensor.hpp"}),
      unit("/src", {"a.cu", "include/cute/tensor.hpp", "a.cu"}),                     // twice
      unit("/src", {"a.cu", "include/cute/tensor.hpp"}, "include/cute/tensor.hpp"),  // output
      unit("/src", {"a.cu", "../etc/x.h"}),
      unit("/src", {"a.cu", "include/../../x.h"}),
  };
  std::vector<bool> alone;
  for (const v1::CompileUnit& u : units) alone.push_back(ValidateCompileUnit(u, prefixes).ok());
  EXPECT_EQ(alone, std::vector<bool>({false, true, true, false, false, false, false}));
  for (bool reversed : {false, true}) {
    CheckedUnitParts checked;
    for (size_t k = 0; k < units.size(); ++k) {
      size_t i = reversed ? units.size() - 1 - k : k;
      // Twice each: the second time every good path is already known.
      for (int pass = 0; pass < 2; ++pass) {
        EXPECT_EQ(ValidateCompileUnit(units[i], prefixes, &checked).ok(), alone[i])
            << "unit " << i << (reversed ? " (reversed)" : "");
      }
    }
    EXPECT_EQ(checked.input_paths["/src"].count("include/cute/tensor.hpp"), 1u);
    EXPECT_EQ(checked.input_paths["/"].count("usr/include/stdio.h"), 0u);
  }
}

// The folders a build's flags name are checked once per set of flags, with
// its root and working directory: the same -I climbs out from one folder
// and stays inside from a deeper one, and each unit keeps its verdict in
// any order; a unit's own source and output are checked every time.
TEST(ValidateCompileUnitTest, FlagSetsCheckedOnceGiveTheSameVerdicts) {
  auto unit = [](const std::string& root, const std::string& folder,
                 const std::vector<std::string>& flags, const std::string& source = "a.cu",
                 const std::string& output = "a.o") {
    v1::CompileUnit unit;
    unit.set_name("u");
    unit.set_workspace_root(root);
    unit.set_working_directory(folder);
    for (const std::string& flag : flags) unit.add_arguments(flag);
    for (const std::string& argument : {std::string("-c"), source, std::string("-o"), output}) {
      unit.add_arguments(argument);
    }
    unit.add_output_paths(output);
    unit.add_inputs()->set_path(folder.empty() ? source : folder + "/" + source);
    return unit;
  };
  const std::vector<std::string> prefixes = SystemIncludePrefixes("/opt/cuda-12.8");
  const std::vector<std::string> cutlass = {"-I../../include", "-O3", "-isystem",
                                            "/usr/local/cuda/include"};
  std::vector<v1::CompileUnit> units = {
      unit("/src", "tools/gen", cutlass),                          // inside
      unit("/src", "gen", cutlass),                                // climbs out of /src
      unit("/src", "tools/gen", cutlass, "b.cu", "b.o"),           // another unit, same flags
      unit("/src", "tools/gen", cutlass, "../../../x.cu"),         // its source leaves
      unit("/src", "tools/gen", cutlass, "b.cu", "../../../b.o"),  // its output leaves
      unit("/other", "tools/gen", {"-I/src/include", "-O3"}),      // outside this root
      unit("/src", "tools/gen", {"-I/src/include", "-O3"}),        // inside this one
      unit("/src", "tools/gen", {"-I/etc", "-O3"}),                // host-private
      unit("/src", "tools/gen", {"-I/src/include", "-O2"}),        // -O2: same folders
  };
  std::vector<bool> alone;
  for (const v1::CompileUnit& u : units) alone.push_back(ValidateCompileUnit(u, prefixes).ok());
  EXPECT_EQ(alone, std::vector<bool>({true, false, true, false, false, false, true, false, true}));
  for (bool reversed : {false, true}) {
    CheckedUnitParts checked;
    for (size_t k = 0; k < units.size(); ++k) {
      size_t i = reversed ? units.size() - 1 - k : k;
      for (int pass = 0; pass < 2; ++pass) {
        NvccCommand parsed;
        absl::Status verdict = ValidateCompileUnit(units[i], prefixes, &checked, &parsed);
        EXPECT_EQ(verdict.ok(), alone[i])
            << "unit " << i << (reversed ? " (reversed)" : "") << ": " << verdict;
        if (verdict.ok()) {
          EXPECT_EQ(parsed.output, units[i].output_paths(0));
        }
      }
    }
    // Two accepted sets: cutlass's from /src/tools/gen, and -I/src/include
    // there (with -O3 and -O2 alike: -O names no file).
    EXPECT_EQ(checked.path_flags.size(), 2u);
  }
}

TEST(IsHostPrivatePathTest, HostStateAndCredentialsButNotSourceTrees) {
  for (const char* path : {"/etc", "/etc/shadow", "/proc/self/environ", "/sys/kernel", "/dev/sda",
                           "/run/secrets/x", "/var/log/syslog", "/home/me/.ssh/id_rsa",
                           "/root/.aws/credentials", "/work/a/../../etc/passwd"}) {
    EXPECT_TRUE(IsHostPrivatePath(path)) << path;
  }
  for (const char* path : {"/work/fa/csrc/x.cu", "/root/.pyenv/versions/3.11.7/include/x.h",
                           "/var/lib/jenkins/workspace/x.cu", "/etcetera/x.h", "/usr/include/x.h",
                           "/home/me/.local/lib/python3.11/site-packages/torch/include/x.h"}) {
    EXPECT_FALSE(IsHostPrivatePath(path)) << path;
  }
}

struct GencodeCase {
  std::string name;
  Args archs;
  Args flags;
};

void PrintTo(const GencodeCase& c, std::ostream* os) { *os << c.name; }

class GencodeFlagsTest : public ::testing::TestWithParam<GencodeCase> {};

TEST_P(GencodeFlagsTest, Expands) {
  absl::StatusOr<Args> flags = GencodeFlags(GetParam().archs);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_THAT(*flags, ElementsAreArray(GetParam().flags));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GencodeFlagsTest,
    ::testing::Values(
        GencodeCase{"Sass", {"sm_100"}, {"-gencode", "arch=compute_100,code=sm_100"}},
        GencodeCase{"ArchSpecific", {"sm_100a"}, {"-gencode", "arch=compute_100a,code=sm_100a"}},
        GencodeCase{"FamilySpecific", {"sm_100f"}, {"-gencode", "arch=compute_100f,code=sm_100f"}},
        GencodeCase{"Ptx", {"compute_100"}, {"-gencode", "arch=compute_100,code=compute_100"}},
        GencodeCase{
            "Several",
            {"sm_80", "sm_90a"},
            {"-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90a,code=sm_90a"}},
        GencodeCase{"None", {}, {}}),
    [](const ::testing::TestParamInfo<GencodeCase>& info) { return info.param.name; });

class GencodeFlagsRejectsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GencodeFlagsRejectsTest, InvalidArgumentNamingTheArch) {
  absl::StatusOr<Args> flags = GencodeFlags({"sm_90", GetParam()});
  ASSERT_FALSE(flags.ok()) << GetParam() << " accepted as " << absl::StrJoin(*flags, " ");
  EXPECT_EQ(flags.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(flags.status().message(), HasSubstr("'" + GetParam() + "'"));
}

// Signs and whitespace in the number are refused too ("sm_-90", "sm_ 90").
INSTANTIATE_TEST_SUITE_P(NotArchs, GencodeFlagsRejectsTest,
                         ::testing::Values("gfx90a", "90", "sm_", "sm_abc", "compute_", "SM_90",
                                           "sm_9x0", "sm_-90", "sm_+90", "sm_ 90"));

TEST(SplitByArchitectureTest, OnePartPerGencodeWithTheWholesArchList) {
  absl::StatusOr<std::vector<ArchitecturePart>> parts = SplitByArchitecture(
      {"-O3", "-gencode", "arch=compute_100a,code=sm_100a", "--threads", "4",
       "-gencode=arch=compute_90,code=[sm_90,compute_90]", "-c", "k.cu", "-o", "obj/k.o"});
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].label, "sm_100a");
  EXPECT_EQ((*parts)[0].output, "obj/k.sm_100a.o");
  // Virtual architectures ascending, times ten, the comma escaped for nvcc.
  EXPECT_THAT((*parts)[0].arguments,
              ElementsAre("-O3", "-gencode", "arch=compute_100a,code=sm_100a", "--threads", "4",
                          "-U__CUDA_ARCH_LIST__", "-D__CUDA_ARCH_LIST__=900\\,1000", "-c", "k.cu",
                          "-o", "obj/k.sm_100a.o"));
  EXPECT_EQ((*parts)[1].label, "sm_90+compute_90");
  EXPECT_THAT(
      (*parts)[1].arguments,
      ElementsAre("-O3", "--threads", "4", "-gencode=arch=compute_90,code=[sm_90,compute_90]",
                  "-U__CUDA_ARCH_LIST__", "-D__CUDA_ARCH_LIST__=900\\,1000", "-c", "k.cu", "-o",
                  "obj/k.sm_90+compute_90.o"));
  for (const ArchitecturePart& part : *parts) {
    EXPECT_TRUE(ValidateCompileArguments(part.arguments, {}).ok()) << part.label;
  }
}

struct UnsplittableCase {
  std::string name;
  std::vector<std::string> arguments;
  std::string why;
};

class SplitByArchitectureRefusesTest : public ::testing::TestWithParam<UnsplittableCase> {};

TEST_P(SplitByArchitectureRefusesTest, SaysWhy) {
  absl::StatusOr<std::vector<ArchitecturePart>> parts = SplitByArchitecture(GetParam().arguments);
  ASSERT_FALSE(parts.ok());
  EXPECT_EQ(parts.status().code(), absl::StatusCode::kFailedPrecondition) << parts.status();
  EXPECT_THAT(parts.status().message(), HasSubstr(GetParam().why));
}

const char* const kTwo[] = {"-gencode", "arch=compute_90,code=sm_90", "-gencode",
                            "arch=compute_100,code=sm_100"};
std::vector<std::string> TwoTargets(std::vector<std::string> more) {
  std::vector<std::string> args(std::begin(kTwo), std::end(kTwo));
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SplitByArchitectureRefusesTest,
    ::testing::Values(
        UnsplittableCase{"OneTarget",
                         {"-gencode", "arch=compute_90,code=sm_90", "-c", "k.cu", "-o", "k.o"},
                         "1 -gencode target"},
        UnsplittableCase{"ArchFlag", TwoTargets({"-arch", "sm_80", "-c", "k.cu", "-o", "k.o"}),
                         "only -gencode targets"},
        UnsplittableCase{"Rdc", TwoTargets({"-rdc", "true", "-c", "k.cu", "-o", "k.o"}),
                         "linked later"},
        UnsplittableCase{"DeviceC", TwoTargets({"-dc", "k.cu", "-o", "k.o"}), "only a compile"},
        UnsplittableCase{"Lto",
                         {"-gencode", "arch=compute_90,code=lto_90", "-gencode",
                          "arch=compute_100,code=sm_100", "-c", "k.cu", "-o", "k.o"},
                         "LTO"},
        UnsplittableCase{"NoCompile", TwoTargets({"k.cu", "-o", "k"}), "only a compile"},
        UnsplittableCase{"OwnArchList",
                         TwoTargets({"-D__CUDA_ARCH_LIST__=900", "-c", "k.cu", "-o", "k.o"}),
                         "__CUDA_ARCH_LIST__ itself"}),
    [](const ::testing::TestParamInfo<UnsplittableCase>& info) { return info.param.name; });

// The argument model refuses a -gencode value it does not read before any
// split is considered (nvcc would refuse it too).
TEST(SplitByArchitectureTest, MalformedGencodeIsRefusedByTheArgumentModel) {
  absl::StatusOr<std::vector<ArchitecturePart>> parts = SplitByArchitecture(
      {"-gencode", "sm_90", "-gencode", "arch=compute_100,code=sm_100", "-c", "k.cu", "-o", "k.o"});
  EXPECT_EQ(parts.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parts.status().message(), HasSubstr("-gencode 'sm_90'"));
}

}  // namespace
}  // namespace distcc_cuda
