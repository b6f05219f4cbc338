// SPDX-License-Identifier: Apache-2.0
#include "common/command_line.h"

#include <algorithm>

#include "absl/flags/parse.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace distcc_cuda {

std::vector<char*> NormalizeFlagNames(int argc, char** argv, std::vector<std::string>& storage) {
  storage.assign(argv, argv + argc);
  bool rest_positional = false;
  for (size_t i = 1; i < storage.size(); ++i) {
    std::string& arg = storage[i];
    if (rest_positional) continue;
    if (arg == "--") {
      rest_positional = true;
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') continue;
    size_t start = arg.find_first_not_of('-');
    size_t end = std::min(arg.find('='), arg.size());
    if (start == std::string::npos || start >= end) continue;
    std::replace(arg.begin() + start, arg.begin() + end, '-', '_');
  }
  std::vector<char*> out;
  for (std::string& arg : storage) out.push_back(arg.data());
  return out;
}

std::vector<std::string> ParseFlags(int argc, char** argv) {
  absl::FlagsUsageConfig config;
  auto in_main = [](absl::string_view file) { return absl::EndsWith(file, "/main.cc"); };
  config.contains_help_flags = in_main;
  config.contains_helpshort_flags = in_main;
  absl::SetFlagsUsageConfig(config);
  std::vector<std::string> storage;
  std::vector<char*> args = NormalizeFlagNames(argc, argv, storage);
  std::vector<char*> positional = absl::ParseCommandLine(args.size(), args.data());
  return std::vector<std::string>(positional.begin(), positional.end());
}

}  // namespace distcc_cuda
