// SPDX-License-Identifier: Apache-2.0
// Lets people write flags with dashes (--state-dir) as the README does, while
// abseil's flag names use underscores (state_dir), and reads the settings of
// the config file (--config FILE, else $DISTCC_CUDA_CONFIG) before the flags.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distcc_cuda {

// Returns argv with each "--flag-name[=value]" rewritten to
// "--flag_name[=value]"; values, positional arguments and everything after a
// bare "--" are left alone. The strings live in `storage`.
std::vector<char*> NormalizeFlagNames(int argc, char** argv, std::vector<std::string>& storage);

// Returns the value of the last --config (as "--config=FILE", "--config FILE"
// or with one dash) in `args` (argv[0] first, names normalized) before a bare
// "--", or nullopt if there is none.
std::optional<std::string> ConfigFlagValue(const std::vector<std::string>& args);

// Returns `args` (argv[0] first, names normalized) with the settings of
// `table` in the config file inserted right after argv[0], so that the
// command line wins over the file. The file is the one --config names, else
// `config_from_environment` ($DISTCC_CUDA_CONFIG); an empty name means no
// file, so `--config=` turns off the environment's file. Errors are those of
// ConfigFileArguments (`program` names the binary in hints).
absl::StatusOr<std::vector<std::string>> WithConfigFileArguments(
    std::vector<std::string> args, absl::string_view config_from_environment,
    const std::string& table, const std::string& program);

// Checks the arguments (after NormalizeFlagNames) before abseil parses them,
// so that mistakes exit with status 2 and a hint, not abseil's status 1:
// INVALID_ARGUMENT for an unknown flag (naming the closest real one) or a
// flag other than a boolean without its value. For --help (or -h,
// --helpfull) prints the usage and every flag of the program and returns
// CANCELLED; for --version prints VersionLine(program) and returns
// CANCELLED.
absl::Status CheckFlagsBeforeParsing(const std::vector<std::string>& args,
                                     const std::string& program);

// Parses the command line with abseil after NormalizeFlagNames and
// WithConfigFileArguments (the program's `table` of the config file: "client",
// "worker" or "coordinator"), with --help listing the flags defined in the
// program's main.cc and --config (exit 0). A config file that cannot be
// read or used, an unknown flag or a missing value prints "PROGRAM: ERROR"
// to stderr and exits with status 2. Returns the
// positional arguments (argv[0] first).
std::vector<std::string> ParseFlags(int argc, char** argv, const std::string& table);

}  // namespace distcc_cuda
