// SPDX-License-Identifier: Apache-2.0
// The config file: ConfigFileArgumentsFromText for each program's table.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "common/base/config_file.h"
#include "fuzz/fuzz_check.h"

// ConfigFileArguments checks keys against the flags linked into the program;
// these stand for the real programs' settings, one of each type it checks.
ABSL_FLAG(std::string, coordinator, "", "HOST:PORT");
ABSL_FLAG(std::string, require_nvcc, "", "nvcc release");
ABSL_FLAG(std::string, memory_cap, "", "memory cap");
ABSL_FLAG(std::string, listen, "", "HOST:PORT");
ABSL_FLAG(std::string, state_dir, "", "folder");
ABSL_FLAG(int32_t, slots, 0, "an int32 setting");
ABSL_FLAG(int64_t, max_bytes, 0, "an int64 setting");
ABSL_FLAG(uint32_t, port, 0, "a uint32 setting");
ABSL_FLAG(uint64_t, cache_bytes, 0, "a uint64 setting");
ABSL_FLAG(double, load_factor, 1.0, "a double setting");
ABSL_FLAG(bool, verbose, false, "a bool setting");

namespace distcc_cuda::fuzz {
namespace {

void CheckArguments(const std::vector<std::string>& arguments) {
  std::set<std::string> names;
  for (const std::string& argument : arguments) {
    const size_t equals = argument.find('=');
    Check(argument.rfind("--", 0) == 0 && equals != std::string::npos,
          "a setting is not of the form --name=value");
    const std::string name = argument.substr(2, equals - 2);
    Check(name.find('-') == std::string::npos, "a flag name keeps a dash");
    Check(names.insert(name).second, "a setting is given twice");
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    Check(flag != nullptr && name != "config", "a setting names no flag of the program");
    // What abseil will do with it on the command line: it must take it.
    std::string error;
    Check(flag->ParseFrom(argument.substr(equals + 1), &error), "abseil refuses a setting");
  }
}

void TestOneInput(const std::string& text) {
  for (const char* table : {"client", "worker", "coordinator"}) {
    absl::StatusOr<std::vector<std::string>> arguments =
        ConfigFileArgumentsFromText(text, "config.toml", table, "distcc-cuda-fuzz");
    if (arguments.ok()) CheckArguments(*arguments);
  }
}

}  // namespace
}  // namespace distcc_cuda::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  distcc_cuda::fuzz::TestOneInput(distcc_cuda::fuzz::InputText(data, size));
  return 0;
}
