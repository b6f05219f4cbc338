// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/canonical_paths.h"

#include <filesystem>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace distcc_cuda {
namespace {

// A path's new text, given the path (from the canonical prefix to the end
// of its piece).
using Place = std::function<std::string(absl::string_view path)>;

// Whether `lead`, what stands before a path in its piece of an argument,
// makes that path an input path: nothing, or an option that takes its
// value joined.
bool PathFollows(absl::string_view lead) {
  for (absl::string_view option :
       {"", "-I", "-isystem", "-iquote", "-idirafter", "-include", "-imacros"}) {
    if (lead == option) return true;
  }
  return false;
}

// `argument` with each path that starts at `prefix` (a whole folder name)
// in one of its pieces replaced by `place`'s text. A long option
// (--include-path=A,B) and an -X option (-Xcompiler=-IA,-isystem,B) are
// pieces after their first '=' and at each ','; any other argument is one
// piece.
std::string PlaceIn(const std::string& argument, absl::string_view prefix, const Place& place,
                    bool& named) {
  const bool listed = absl::StartsWith(argument, "--") || absl::StartsWith(argument, "-X");
  std::string out;
  size_t piece = 0;  // where the current piece starts
  bool after_equals = false;
  size_t i = 0;
  while (i < argument.size()) {
    const size_t end = listed ? std::min(argument.find(',', i), argument.size()) : argument.size();
    const bool at_path = absl::string_view(argument).substr(i, prefix.size()) == prefix &&
                         (i + prefix.size() == end || argument[i + prefix.size()] == '/') &&
                         PathFollows(absl::string_view(argument).substr(piece, i - piece));
    if (at_path) {
      out += place(absl::string_view(argument).substr(i, end - i));
      i = end;
      named = true;
      continue;
    }
    const char c = argument[i++];
    out += c;
    if (listed && (c == ',' || (c == '=' && !after_equals))) {
      after_equals = after_equals || c == '=';
      piece = i;
    }
  }
  return out;
}

std::vector<std::string> PlaceAll(const std::vector<std::string>& arguments,
                                  absl::string_view prefix, const Place& place, bool* named) {
  bool any = false;
  std::vector<std::string> placed;
  placed.reserve(arguments.size());
  for (const std::string& argument : arguments) {
    placed.push_back(PlaceIn(argument, prefix, place, any));
  }
  if (named != nullptr) *named = any;
  return placed;
}

std::string WithoutTrailingSlash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

std::vector<std::string> PlaceToolkitPaths(const std::vector<std::string>& arguments,
                                           const std::string& toolkit_root, bool* named) {
  const std::string root = WithoutTrailingSlash(toolkit_root);
  const absl::string_view canonical = kCanonicalToolkitRoot;
  return PlaceAll(
      arguments, canonical,
      [&](absl::string_view path) { return absl::StrCat(root, path.substr(canonical.size())); },
      named);
}

std::vector<std::string> ArgumentsInToolkit(const v1::CompileUnit& unit,
                                            const std::string& toolkit_root) {
  const std::vector<std::string> arguments(unit.arguments().begin(), unit.arguments().end());
  if (toolkit_root.empty()) return arguments;
  bool named = false;
  std::vector<std::string> placed = PlaceToolkitPaths(arguments, toolkit_root, &named);
  if (named && unit.compiler() == v1::UNIT_COMPILER_HOST_CXX) {
    placed.push_back(absl::StrCat("-ffile-prefix-map=", WithoutTrailingSlash(toolkit_root), "=",
                                  kCanonicalToolkitRoot));
  }
  return placed;
}

std::vector<std::string> CanonicalPathsRelativeTo(const std::vector<std::string>& arguments,
                                                  const std::string& working_directory) {
  const std::filesystem::path base =
      std::filesystem::path("/" + working_directory).lexically_normal();
  return PlaceAll(
      arguments, kCanonicalArea,
      [&](absl::string_view path) {
        std::string relative =
            std::filesystem::path(std::string(path)).lexically_normal().lexically_relative(base);
        return relative.empty() ? std::string(path) : relative;
      },
      nullptr);
}

}  // namespace distcc_cuda
