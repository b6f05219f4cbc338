// SPDX-License-Identifier: Apache-2.0
// Kernel instantiation sets: a template of instantiation text with
// {placeholders} and the axes of a grid, expanded into one generated compile
// unit per grid point.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda {

// One point of an instantiation grid turned into source text.
struct GeneratedUnit {
  std::string name;         // the rendered unit name template
  std::string source_text;  // #include lines plus the rendered instantiation
  std::map<std::string, std::string> axis_values;
};

// Returns the placeholder names in `text`, in order of appearance. "{{" and
// "}}" are literal braces. INVALID_ARGUMENT for an unclosed or empty brace.
absl::StatusOr<std::vector<std::string>> Placeholders(absl::string_view text);

// Replaces each {name} in `text` with values.at(name). INVALID_ARGUMENT
// naming the placeholder and the known axes if a name has no value.
absl::StatusOr<std::string> RenderTemplate(absl::string_view text,
                                           const std::map<std::string, std::string>& values);

// Checks a set without expanding it: a name, at least one axis, each axis
// named once with at least one value, every placeholder of the text and of
// the unit name template backed by an axis. Messages start with the set's
// manifest location.
absl::Status ValidateInstantiationSet(const v1::InstantiationSet& set);

// Expands the grid (the first axis varies slowest) into generated units.
// INVALID_ARGUMENT as ValidateInstantiationSet, or when two points render to
// the same unit name.
absl::StatusOr<std::vector<GeneratedUnit>> ExpandInstantiationSet(const v1::InstantiationSet& set);

}  // namespace distcc_cuda
