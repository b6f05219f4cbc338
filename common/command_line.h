// SPDX-License-Identifier: Apache-2.0
// Lets people write flags with dashes (--state-dir) as the README does, while
// abseil's flag names use underscores (state_dir).
#pragma once

#include <string>
#include <vector>

namespace distcc_cuda {

// Returns argv with each "--flag-name[=value]" rewritten to
// "--flag_name[=value]"; values, positional arguments and everything after a
// bare "--" are left alone. The strings live in `storage`.
std::vector<char*> NormalizeFlagNames(int argc, char** argv, std::vector<std::string>& storage);

// Parses the command line with abseil after NormalizeFlagNames, with --help
// listing the flags defined in the program's main.cc. Returns the positional
// arguments (argv[0] first).
std::vector<std::string> ParseFlags(int argc, char** argv);

}  // namespace distcc_cuda
