// SPDX-License-Identifier: Apache-2.0
// Kernel instantiation sets: a template of instantiation text with
// {placeholders} and the axes of a grid, expanded into one generated compile
// unit per grid point.
#pragma once

#include <cstdint>
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
  std::string source_text;  // #include lines plus the rendered instantiation(s)
  std::map<std::string, std::string> axis_values;  // of a single grid point
  std::string instantiation_text;                  // the rendered text alone
  int instantiations = 1;                          // grid points compiled in this unit
  std::vector<GeneratedUnit> members;              // of a group: its grid points
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

// How many points the set's grid has: the product of its axes' sizes,
// saturating at 2^62 (so a hostile set cannot overflow it). Computed
// without expanding anything.
int64_t GridPoints(const v1::InstantiationSet& set);

// Expands the grid (the first axis varies slowest) into generated units.
// INVALID_ARGUMENT as ValidateInstantiationSet, or when two points render to
// the same unit name.
absl::StatusOr<std::vector<GeneratedUnit>> ExpandInstantiationSet(const v1::InstantiationSet& set);

// Joins consecutive grid points into units of at most `per_unit`
// instantiations each, sized as evenly as possible: one source with the
// headers' #include lines once, then every point's text. A group is named
// "<set>_<k>of<n>" and keeps its points in `members`. With `per_unit` <= 1 the
// points are returned unchanged.
std::vector<GeneratedUnit> GroupInstantiations(const v1::InstantiationSet& set,
                                               std::vector<GeneratedUnit> points, int per_unit);

}  // namespace distcc_cuda
