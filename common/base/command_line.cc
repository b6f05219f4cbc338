// SPDX-License-Identifier: Apache-2.0
#include "common/base/command_line.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/config_file.h"
#include "common/base/version.h"

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

namespace {

// Levenshtein distance, for "did you mean".
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

bool IsListed(const absl::CommandLineFlag& flag) {
  absl::string_view file = flag.Filename();
  return absl::EndsWith(file, "main.cc") || absl::EndsWith(file, "command_line.cc");
}

}  // namespace

absl::Status CheckFlagsBeforeParsing(const std::vector<std::string>& args,
                                     const std::string& program) {
  absl::flat_hash_map<absl::string_view, absl::CommandLineFlag*> flags = absl::GetAllFlags();
  for (size_t i = 1; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) continue;
    if (arg.empty()) continue;
    absl::string_view name = arg.substr(0, arg.find('='));
    const bool has_value = arg.find('=') != absl::string_view::npos;
    if (name == "help" || name == "helpfull" || name == "h") {
      std::cout << program << ": " << absl::ProgramUsageMessage() << "\nFlags:\n";
      std::vector<std::pair<std::string, std::string>> listed;
      for (const auto& [flag_name, flag] : flags) {
        if (!IsListed(*flag)) continue;
        std::string shown(flag_name);
        std::replace(shown.begin(), shown.end(), '_', '-');
        listed.emplace_back(
            shown, absl::StrCat(flag->Help(), " (default: \"", flag->DefaultValue(), "\")"));
      }
      std::sort(listed.begin(), listed.end());
      for (const auto& [shown, help] : listed) {
        std::cout << (shown.size() == 1 ? "  -" : "  --") << shown << "  " << help << "\n";
      }
      return absl::CancelledError("help printed");
    }
    if (name == "version") {
      std::cout << VersionLine(program) << "\n";
      return absl::CancelledError("version printed");
    }
    absl::string_view bare = name;
    const bool negated = absl::ConsumePrefix(&bare, "no");
    auto found = flags.find(name);
    if (found == flags.end() && negated) found = flags.find(bare);
    if (found == flags.end()) {
      std::string closest;
      size_t best = std::string::npos;
      for (const auto& [flag_name, flag] : flags) {
        if (!IsListed(*flag)) continue;
        size_t distance = EditDistance(name, flag_name);
        if (distance < best) best = distance, closest = std::string(flag_name);
      }
      std::replace(closest.begin(), closest.end(), '_', '-');
      std::string given(name);
      std::replace(given.begin(), given.end(), '_', '-');
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", given,
                       best <= std::max<size_t>(2, given.size() / 3)
                           ? absl::StrCat("; did you mean --", closest, "?")
                           : "",
                       " (--help lists them)"));
    }
    const bool boolean = found->second->IsOfType<bool>();
    if (!boolean && !has_value && i + 1 >= args.size()) {
      std::string given(name);
      std::replace(given.begin(), given.end(), '_', '-');
      return absl::InvalidArgumentError(
          absl::StrCat("--", given, " needs a value (--", given, "=VALUE or --", given, " VALUE)"));
    }
    if (!boolean && !has_value) ++i;  // its value
  }
  return absl::OkStatus();
}

std::vector<std::string> ParseFlags(int argc, char** argv, const std::string& table) {
  absl::FlagsUsageConfig config;
  auto listed = [](absl::string_view file) {
    return absl::EndsWith(file, "/main.cc") || absl::EndsWith(file, "/common/base/command_line.cc");
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
  absl::Status usable = CheckFlagsBeforeParsing(*args, program);
  if (absl::IsCancelled(usable)) std::exit(0);  // --help or --version was printed
  if (!usable.ok()) {
    std::cerr << program << ": " << usable.message() << "\n";
    std::exit(2);
  }
  std::vector<char*> pointers;
  for (std::string& arg : *args) pointers.push_back(arg.data());
  std::vector<char*> positional = absl::ParseCommandLine(pointers.size(), pointers.data());
  return std::vector<std::string>(positional.begin(), positional.end());
}

}  // namespace distcc_cuda
