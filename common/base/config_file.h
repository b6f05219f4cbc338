// SPDX-License-Identifier: Apache-2.0
// The config file: a TOML file with one table per program ([client], [worker],
// [coordinator]) whose keys are that program's flag names, so settings need
// not be repeated on every command line.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace distcc_cuda {

// Reads the TOML file at `path` and returns the settings of its `table` as
// "--flag_name=value" arguments, ready to go before the real command line
// (abseil keeps the last value given, so the command line wins). Keys may use
// dashes or underscores; values are strings, integers or booleans. Other
// programs' tables are checked only for being known; `program` names the
// binary in hints ("see PROGRAM --help").
// Errors: NOT_FOUND (or another read error) naming `path`; INVALID_ARGUMENT
// with "path:line:col: ..." for malformed TOML, a key outside every table, an
// unknown table, a key that is not a flag of this binary (or is `config`), a
// key set twice, or a value the flag cannot take.
absl::StatusOr<std::vector<std::string>> ConfigFileArguments(const std::string& path,
                                                             const std::string& table,
                                                             const std::string& program);

// Same as ConfigFileArguments on the file's `text`; `path` names it in
// messages.
absl::StatusOr<std::vector<std::string>> ConfigFileArgumentsFromText(const std::string& text,
                                                                     const std::string& path,
                                                                     const std::string& table,
                                                                     const std::string& program);

}  // namespace distcc_cuda
