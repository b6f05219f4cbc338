// SPDX-License-Identifier: Apache-2.0
#include "common/base/config_file.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/marshalling.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "toml++/toml.h"

namespace distcc_cuda {
namespace {

constexpr std::array<std::string_view, 3> kProgramTables = {"client", "worker", "coordinator"};

std::string Where(const std::string& path, const toml::source_region& region) {
  if (region.begin.line == 0) return path;
  return absl::StrCat(path, ":", region.begin.line, ":", region.begin.column);
}

// The text abseil would be given for `node` on a command line.
std::optional<std::string> FlagText(const toml::node& node) {
  if (auto text = node.value_exact<std::string>()) return *text;
  if (auto number = node.value_exact<int64_t>()) return absl::StrCat(*number);
  if (auto flag = node.value_exact<bool>()) return std::string(*flag ? "true" : "false");
  return std::nullopt;
}

// Whether `text` parses as a T; sets `error` to abseil's reason, if any.
template <typename T>
bool ParsesAs(absl::string_view text, std::string* error) {
  T value;
  return absl::ParseFlag(text, &value, error);
}

// Checks `text` against the flag's type now, so that a bad value is reported
// at its place in the file rather than by abseil as if it were typed on the
// command line. Types not listed here are left to abseil.
template <typename... T>
bool FlagAccepts(const absl::CommandLineFlag& flag, absl::string_view text, std::string* error) {
  bool ok = true;
  ((flag.IsOfType<T>() && (ok = ParsesAs<T>(text, error))), ...);
  return ok;
}

// abseil's own flags (--flagfile, --help, ...) steer the command line itself;
// they are not settings.
bool IsSetting(const absl::CommandLineFlag& flag) {
  return !flag.IsRetired() && !absl::StrContains(flag.Filename(), "absl/flags/");
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ConfigFileArguments(const std::string& path,
                                                             const std::string& table,
                                                             const std::string& program) {
  ASSIGN_OR_RETURN(std::string content, ReadFile(path));
  return ConfigFileArgumentsFromText(content, path, table, program);
}

absl::StatusOr<std::vector<std::string>> ConfigFileArgumentsFromText(const std::string& text,
                                                                     const std::string& path,
                                                                     const std::string& table,
                                                                     const std::string& program) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& error) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(path, error.source()), ": ", std::string(error.description())));
  }
  const toml::table* own = nullptr;
  for (const auto& [key, node] : root) {
    const std::string name(key.str());
    bool known =
        std::find(kProgramTables.begin(), kProgramTables.end(), name) != kProgramTables.end();
    if (!node.is_table()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(path, key.source()), ": '", name,
                       "' is outside any table; put it under [client], [worker] or [coordinator]"));
    }
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(path, key.source()), ": unknown table [", name,
                       "]; the tables are [client], [worker] and [coordinator]"));
    }
    if (name == table) own = node.as_table();
  }
  std::vector<std::string> arguments;
  if (own == nullptr) return arguments;
  std::map<std::string, const toml::key*> seen;  // flag name -> its first key
  for (const auto& [key, node] : *own) {
    const std::string written(key.str());
    std::string name = written;
    std::replace(name.begin(), name.end(), '-', '_');
    if (name == "config") {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(path, key.source()), ": [", table,
                       "] cannot name another config file; use --config or $DISTCC_CUDA_CONFIG"));
    }
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr || !IsSetting(*flag)) {
      return absl::InvalidArgumentError(absl::StrCat(Where(path, key.source()), ": [", table,
                                                     "] has no setting '", written, "'; see ",
                                                     program, " --help"));
    }
    auto [first, inserted] = seen.emplace(name, &key);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(path, key.source()), ": [", table, "] sets '", written, "' again (first as '",
          std::string(first->second->str()), "' at ", Where(path, first->second->source()), ")"));
    }
    std::optional<std::string> text = FlagText(node);
    if (!text) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(path, node.source()), ": [", table, "] '", written,
                       "' must be a string, an integer or a boolean"));
    }
    std::string error;
    if (!FlagAccepts<bool, int32_t, int64_t, uint32_t, uint64_t, double>(*flag, *text, &error)) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(path, node.source()), ": [", table, "] '", written, "' cannot be '", *text, "'",
          error.empty() ? "" : absl::StrCat(" (", error, ")"), "; see ", program, " --help"));
    }
    arguments.push_back(absl::StrCat("--", name, "=", *text));
  }
  return arguments;
}

}  // namespace distcc_cuda
