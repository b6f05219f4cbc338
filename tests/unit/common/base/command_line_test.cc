// SPDX-License-Identifier: Apache-2.0
#include "common/base/command_line.h"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distcc_cuda {
namespace {

using ::testing::ElementsAreArray;

// Runs NormalizeFlagNames over `args` the way main() would and returns the
// resulting argv as strings.
std::vector<std::string> Normalize(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  std::vector<std::string> storage;
  std::vector<char*> out = NormalizeFlagNames(static_cast<int>(argv.size()), argv.data(), storage);
  return std::vector<std::string>(out.begin(), out.end());
}

struct NormalizeCase {
  std::string name;
  std::vector<std::string> in;
  std::vector<std::string> out;
};

void PrintTo(const NormalizeCase& c, std::ostream* os) { *os << c.name; }

class NormalizeFlagNamesTest : public ::testing::TestWithParam<NormalizeCase> {};

TEST_P(NormalizeFlagNamesTest, RewritesOnlyFlagNames) {
  EXPECT_THAT(Normalize(GetParam().in), ElementsAreArray(GetParam().out));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, NormalizeFlagNamesTest,
    ::testing::Values(
        NormalizeCase{"DashedName", {"prog", "--state-dir"}, {"prog", "--state_dir"}},
        NormalizeCase{
            "ManyDashes", {"prog", "--max-memory-per-job"}, {"prog", "--max_memory_per_job"}},
        NormalizeCase{"ValueAfterEqualsKept",
                      {"prog", "--state-dir=/var/my-dir"},
                      {"prog", "--state_dir=/var/my-dir"}},
        NormalizeCase{"SeparateValueKept",
                      {"prog", "--state-dir", "/var/my-dir"},
                      {"prog", "--state_dir", "/var/my-dir"}},
        NormalizeCase{"SingleDashFlag", {"prog", "-log-level=2"}, {"prog", "-log_level=2"}},
        NormalizeCase{"UnderscoresUnchanged", {"prog", "--state_dir=x"}, {"prog", "--state_dir=x"}},
        NormalizeCase{"PositionalUnchanged",
                      {"prog", "my-file.cu", "build-dir"},
                      {"prog", "my-file.cu", "build-dir"}},
        NormalizeCase{"ProgramNameUnchanged", {"distcc-cuda", "--a-b"}, {"distcc-cuda", "--a_b"}},
        NormalizeCase{"EverythingAfterBareDoubleDashUnchanged",
                      {"prog", "--a-b", "--", "--c-d", "-e-f"},
                      {"prog", "--a_b", "--", "--c-d", "-e-f"}},
        NormalizeCase{"LoneDashUnchanged", {"prog", "-"}, {"prog", "-"}},
        NormalizeCase{"OnlyDashesUnchanged", {"prog", "---"}, {"prog", "---"}},
        NormalizeCase{"NoNameBeforeEqualsUnchanged", {"prog", "--=a-b"}, {"prog", "--=a-b"}},
        NormalizeCase{"EmptyArgumentUnchanged", {"prog", ""}, {"prog", ""}},
        NormalizeCase{"OnlyProgram", {"prog"}, {"prog"}}),
    [](const ::testing::TestParamInfo<NormalizeCase>& info) { return info.param.name; });

TEST(NormalizeFlagNamesTest, ReturnedPointersLiveInStorage) {
  std::string prog = "prog";
  std::string flag = "--state-dir=x";
  char* argv[] = {prog.data(), flag.data()};
  std::vector<std::string> storage;
  std::vector<char*> out = NormalizeFlagNames(2, argv, storage);
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(storage.size(), 2u);
  EXPECT_EQ(out[0], storage[0].data());
  EXPECT_EQ(out[1], storage[1].data());
  // The caller's argv is left as it was.
  EXPECT_EQ(flag, "--state-dir=x");
}

struct ConfigFlagCase {
  std::string name;
  std::vector<std::string> args;
  std::optional<std::string> value;
};

void PrintTo(const ConfigFlagCase& c, std::ostream* os) { *os << c.name; }

class ConfigFlagValueTest : public ::testing::TestWithParam<ConfigFlagCase> {};

TEST_P(ConfigFlagValueTest, FindsTheConfigFlag) {
  EXPECT_EQ(ConfigFlagValue(GetParam().args), GetParam().value);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConfigFlagValueTest,
    ::testing::Values(
        ConfigFlagCase{"None", {"prog", "--slots=2", "a.toml"}, std::nullopt},
        ConfigFlagCase{"OnlyProgram", {"prog"}, std::nullopt},
        ConfigFlagCase{"WithEquals", {"prog", "--config=a.toml"}, "a.toml"},
        ConfigFlagCase{"SeparateValue", {"prog", "--config", "a.toml", "b"}, "a.toml"},
        ConfigFlagCase{"OneDash", {"prog", "-config=a.toml"}, "a.toml"},
        ConfigFlagCase{"OneDashSeparateValue", {"prog", "-config", "a.toml"}, "a.toml"},
        ConfigFlagCase{"Empty", {"prog", "--config="}, ""},
        ConfigFlagCase{"LastWins", {"prog", "--config=a.toml", "--config", "b.toml"}, "b.toml"},
        ConfigFlagCase{"ValueThatLooksLikeAFlag", {"prog", "--config", "--config=x"}, "--config=x"},
        ConfigFlagCase{"MissingValue", {"prog", "--config"}, std::nullopt},
        ConfigFlagCase{"ProgramNameIgnored", {"--config=a.toml"}, std::nullopt},
        ConfigFlagCase{
            "OtherFlagWithThePrefix", {"prog", "--configure=a", "--config_x=b"}, std::nullopt},
        ConfigFlagCase{"PositionalIgnored", {"prog", "config=a.toml", "config"}, std::nullopt},
        ConfigFlagCase{"AfterBareDoubleDashIgnored",
                       {"prog", "--config=a.toml", "--", "--config=b.toml"},
                       "a.toml"}),
    [](const ::testing::TestParamInfo<ConfigFlagCase>& info) { return info.param.name; });

}  // namespace
}  // namespace distcc_cuda
