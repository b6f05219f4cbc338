// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/instantiation.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"

namespace distcc_cuda {
namespace {

// Walks `text`, calling `literal` for plain text and `placeholder` for names.
template <typename Literal, typename Placeholder>
absl::Status Scan(absl::string_view text, Literal literal, Placeholder placeholder) {
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == '{' && i + 1 < text.size() && text[i + 1] == '{') {
      literal("{");
      i += 2;
    } else if (c == '}' && i + 1 < text.size() && text[i + 1] == '}') {
      literal("}");
      i += 2;
    } else if (c == '{') {
      size_t close = text.find('}', i);
      if (close == absl::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat("unclosed '{' at offset ", i, " in \"", text,
                                                       "\" (write {{ for a literal brace)"));
      }
      absl::string_view name = text.substr(i + 1, close - i - 1);
      if (name.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("empty placeholder {} in \"", text, "\""));
      }
      RETURN_IF_ERROR(placeholder(name));
      i = close + 1;
    } else if (c == '}') {
      return absl::InvalidArgumentError(absl::StrCat("unmatched '}' at offset ", i, " in \"", text,
                                                     "\" (write }} for a literal brace)"));
    } else {
      size_t next = text.find_first_of("{}", i);
      if (next == absl::string_view::npos) next = text.size();
      literal(text.substr(i, next - i));
      i = next;
    }
  }
  return absl::OkStatus();
}

std::string AxisNames(const v1::InstantiationSet& set) {
  std::vector<std::string> names;
  for (const auto& axis : set.axes()) names.push_back(axis.name());
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

// "FILE:LINE: instantiation set 'NAME'", or without the location if unknown.
std::string SetLocation(const v1::InstantiationSet& set) {
  std::string name = absl::StrCat("instantiation set '", set.name(), "'");
  return set.manifest_location().empty() ? name : absl::StrCat(set.manifest_location(), ": ", name);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> Placeholders(absl::string_view text) {
  std::vector<std::string> names;
  RETURN_IF_ERROR(Scan(
      text, [](absl::string_view) {},
      [&](absl::string_view name) {
        names.emplace_back(name);
        return absl::OkStatus();
      }));
  return names;
}

absl::StatusOr<std::string> RenderTemplate(absl::string_view text,
                                           const std::map<std::string, std::string>& values) {
  std::string out;
  RETURN_IF_ERROR(Scan(
      text, [&](absl::string_view piece) { out.append(piece.data(), piece.size()); },
      [&](absl::string_view name) {
        auto it = values.find(std::string(name));
        if (it == values.end()) {
          std::vector<std::string> known;
          for (const auto& [key, value] : values) known.push_back(key);
          return absl::InvalidArgumentError(absl::StrCat(
              "placeholder {", name,
              "} has no axis (axes: ", known.empty() ? "none" : absl::StrJoin(known, ", "), ")"));
        }
        out.append(it->second);
        return absl::OkStatus();
      }));
  return out;
}

absl::Status ValidateInstantiationSet(const v1::InstantiationSet& set) {
  std::string where = SetLocation(set);
  if (set.name().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has no name; add name = \"...\""));
  }
  if (set.axes().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has no axes; add an [instantiations.axes] table"));
  }
  std::set<std::string> axes;
  for (const auto& axis : set.axes()) {
    if (!axes.insert(axis.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": axis '", axis.name(), "' appears twice"));
    }
    if (axis.values().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": axis '", axis.name(), "' has no values"));
    }
  }
  for (const std::string* text : {&set.text_template(), &set.unit_name_template()}) {
    absl::StatusOr<std::vector<std::string>> names = Placeholders(*text);
    if (!names.ok()) return Annotate(names.status(), where);
    for (const std::string& name : *names) {
      if (!axes.count(name)) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": placeholder {", name,
                                                       "} has no axis (axes: ", AxisNames(set),
                                                       "); add ", name, " = [...] under its axes"));
      }
    }
  }
  if (set.text_template().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has no instantiation text; add text = \"...\""));
  }
  return absl::OkStatus();
}

namespace {

// The #include lines every generated unit of `set` starts with.
std::string Includes(const v1::InstantiationSet& set) {
  std::string includes;
  for (const std::string& header : set.headers()) {
    absl::StrAppend(&includes, "#include \"", header, "\"\n");
  }
  return includes;
}

}  // namespace

int64_t GridPoints(const v1::InstantiationSet& set) {
  constexpr int64_t kSaturated = int64_t{1} << 62;
  if (set.axes_size() == 0) return 0;
  int64_t points = 1;
  for (const v1::InstantiationAxis& axis : set.axes()) {
    int64_t values = axis.values_size();
    if (values == 0) return 0;
    points = points > kSaturated / values ? kSaturated : points * values;
  }
  return points;
}

absl::StatusOr<std::vector<GeneratedUnit>> ExpandInstantiationSet(const v1::InstantiationSet& set) {
  RETURN_IF_ERROR(ValidateInstantiationSet(set));
  std::string includes = Includes(set);
  std::string name_template = set.unit_name_template();
  if (name_template.empty()) {
    name_template = set.name();
    for (const auto& axis : set.axes()) {
      absl::StrAppend(&name_template, "_{", axis.name(), "}");
    }
  }
  std::vector<GeneratedUnit> units;
  std::set<std::string> names;
  std::vector<int> index(set.axes_size(), 0);
  while (true) {
    GeneratedUnit unit;
    for (int a = 0; a < set.axes_size(); ++a) {
      unit.axis_values[set.axes(a).name()] = set.axes(a).values(index[a]);
    }
    ASSIGN_OR_RETURN(unit.name, RenderTemplate(name_template, unit.axis_values));
    ASSIGN_OR_RETURN(std::string text, RenderTemplate(set.text_template(), unit.axis_values));
    unit.instantiation_text = absl::StrCat(text, text.empty() || text.back() == '\n' ? "" : "\n");
    unit.source_text = absl::StrCat("// Generated by distcc-cuda from instantiation set '",
                                    set.name(), "'.\n", includes, unit.instantiation_text);
    if (!names.insert(unit.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(SetLocation(set), ": two grid points are both named '", unit.name,
                       "'; put every axis in the unit name template"));
    }
    units.push_back(std::move(unit));
    int a = set.axes_size() - 1;
    while (a >= 0 && ++index[a] == set.axes(a).values_size()) index[a--] = 0;
    if (a < 0) break;
  }
  return units;
}

std::vector<GeneratedUnit> GroupInstantiations(const v1::InstantiationSet& set,
                                               std::vector<GeneratedUnit> points, int per_unit) {
  if (per_unit <= 1 || points.size() <= 1) return points;
  size_t groups = (points.size() + per_unit - 1) / per_unit;
  std::string includes = Includes(set);
  std::vector<GeneratedUnit> units;
  size_t next = 0;
  for (size_t k = 0; k < groups; ++k) {
    // Even sizes: the first (size % groups) groups take one more.
    size_t size = points.size() / groups + (k < points.size() % groups ? 1 : 0);
    GeneratedUnit unit;
    unit.name = absl::StrCat(set.name(), "_", k + 1, "of", groups);
    unit.instantiations = 0;
    std::vector<std::string> names;
    for (size_t i = next; i < next + size; ++i) {
      names.push_back(points[i].name);
      unit.instantiation_text += points[i].instantiation_text;
      ++unit.instantiations;
      unit.members.push_back(points[i]);
    }
    next += size;
    unit.source_text =
        absl::StrCat("// Generated by distcc-cuda from instantiation set '", set.name(),
                     "': ", absl::StrJoin(names, ", "), ".\n", includes, unit.instantiation_text);
    units.push_back(std::move(unit));
  }
  return units;
}

}  // namespace distcc_cuda
