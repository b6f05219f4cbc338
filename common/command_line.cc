// SPDX-License-Identifier: Apache-2.0
#include "common/command_line.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/config_file.h"

// Every program has it, so it lives here rather than in each main.cc.
// ParseFlags reads its value from the arguments before abseil parses them (the
// file's settings must go in first); defining it lets abseil accept it and
// --help list it.
ABSL_FLAG(std::string, config, "",
          "TOML file whose table for this program ([client], [worker] or [coordinator]) holds "
          "settings named like its flags, e.g. memory-cap = \"32GiB\"; flags given here win "
          "(default: $DISTCC_CUDA_CONFIG, else none)");

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

std::optional<std::string> ConfigFlagValue(const std::vector<std::string>& args) {
  std::optional<std::string> value;
  for (size_t i = 1; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--")) {
      if (!absl::ConsumePrefix(&arg, "-")) continue;
    }
    if (arg == "config") {
      // abseil takes the next argument as the value, whatever it looks like.
      if (i + 1 < args.size()) value = args[++i];
    } else if (absl::ConsumePrefix(&arg, "config=")) {
      value = std::string(arg);
    }
  }
  return value;
}

absl::StatusOr<std::vector<std::string>> WithConfigFileArguments(
    std::vector<std::string> args, absl::string_view config_from_environment,
    const std::string& table, const std::string& program) {
  std::optional<std::string> from_flag = ConfigFlagValue(args);
  std::string path = from_flag ? *from_flag : std::string(config_from_environment);
  if (path.empty()) return args;
  absl::StatusOr<std::vector<std::string>> settings = ConfigFileArguments(path, table, program);
  if (!settings.ok()) {
    if (from_flag || absl::IsInvalidArgument(settings.status())) return settings.status();
    // A file nobody named on this command line: say where its name came from.
    return absl::Status(settings.status().code(), absl::StrCat(settings.status().message(),
                                                               " (named by $DISTCC_CUDA_CONFIG)"));
  }
  args.insert(args.begin() + std::min<size_t>(1, args.size()), settings->begin(), settings->end());
  return args;
}

std::vector<std::string> ParseFlags(int argc, char** argv, const std::string& table) {
  absl::FlagsUsageConfig config;
  auto listed = [](absl::string_view file) {
    return absl::EndsWith(file, "/main.cc") || absl::EndsWith(file, "/common/command_line.cc");
  };
  config.contains_help_flags = listed;
  config.contains_helpshort_flags = listed;
  absl::SetFlagsUsageConfig(config);
  std::vector<std::string> storage;
  NormalizeFlagNames(argc, argv, storage);
  std::string program = storage.empty() ? table : storage[0];
  program = program.substr(program.find_last_of('/') + 1);
  // Read here, at the edge, and handed down: nothing below reads the
  // environment.
  const char* from_environment = std::getenv("DISTCC_CUDA_CONFIG");
  absl::StatusOr<std::vector<std::string>> args = WithConfigFileArguments(
      std::move(storage), from_environment ? from_environment : "", table, program);
  if (!args.ok()) {
    std::cerr << program << ": " << args.status().message() << "\n";
    std::exit(2);
  }
  std::vector<char*> pointers;
  for (std::string& arg : *args) pointers.push_back(arg.data());
  std::vector<char*> positional = absl::ParseCommandLine(pointers.size(), pointers.data());
  return std::vector<std::string>(positional.begin(), positional.end());
}

}  // namespace distcc_cuda
