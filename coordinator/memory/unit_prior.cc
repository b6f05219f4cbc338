// SPDX-License-Identifier: Apache-2.0
#include "coordinator/memory/unit_prior.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "coordinator/memory/unit_priors_data.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::coordinator {
namespace {

// The file name of `path`.
absl::string_view FileName(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// The number right after `word` in `name` ("hdim" in "flash_fwd_hdim96_fp16"
// is 96); nullopt without one.
std::optional<int> SizeIn(absl::string_view name, absl::string_view word) {
  for (size_t at = name.find(word); at != absl::string_view::npos; at = name.find(word, at + 1)) {
    size_t begin = at + word.size(), end = begin;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    int size = 0;
    if (end > begin && absl::SimpleAtoi(name.substr(begin, end - begin), &size)) return size;
  }
  return std::nullopt;
}

// `rows` (one marker and name word, sorted by size) at `size`: between two
// measured sizes linearly, beyond them the nearest.
PriorCost Interpolate(const std::vector<const PriorRow*>& rows, std::optional<int> size) {
  auto cost = [](const PriorRow& row) { return PriorCost{row.peak_bytes, row.wall, row.measured}; };
  if (!size.has_value() || rows.size() == 1) {
    // No size to go by: the dearest of them.
    const PriorRow* dearest = *std::max_element(
        rows.begin(), rows.end(),
        [](const PriorRow* a, const PriorRow* b) { return a->peak_bytes < b->peak_bytes; });
    return cost(*dearest);
  }
  if (*size <= rows.front()->size) return cost(*rows.front());
  if (*size >= rows.back()->size) return cost(*rows.back());
  for (size_t i = 1; i < rows.size(); ++i) {
    const PriorRow& low = *rows[i - 1];
    const PriorRow& high = *rows[i];
    if (*size > high.size) continue;
    const double t = static_cast<double>(*size - low.size) / std::max(1, high.size - low.size);
    return PriorCost{static_cast<int64_t>(low.peak_bytes + t * (high.peak_bytes - low.peak_bytes)),
                     low.wall + t * (high.wall - low.wall),
                     absl::StrCat(low.measured, "; ", high.measured)};
  }
  return cost(*rows.back());
}

}  // namespace

absl::StatusOr<UnitPriors> UnitPriors::Parse(absl::string_view csv) {
  UnitPriors priors;
  int line_number = 0;
  bool header = true;
  for (absl::string_view line : absl::StrSplit(csv, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (header) {  // the column names
      header = false;
      continue;
    }
    std::vector<std::string> fields = absl::StrSplit(line, absl::MaxSplits(',', 6));
    PriorRow row;
    double peak_mib = 0, wall_s = 0;
    if (fields.size() != 7 || fields[0].empty() ||
        (!fields[3].empty() && !absl::SimpleAtoi(fields[3], &row.size)) ||
        !absl::SimpleAtod(fields[4], &peak_mib) || !absl::SimpleAtod(fields[5], &wall_s) ||
        peak_mib <= 0 || wall_s <= 0 || fields[2].empty() != (row.size == 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("unit priors, line ", line_number,
                       ": not marker,name_word,size_word,size,peak_mib,wall_s,measured"));
    }
    row.marker = fields[0];
    row.name_word = fields[1];
    row.size_word = fields[2];
    row.peak_bytes = static_cast<int64_t>(peak_mib * (1 << 20));
    row.wall = absl::Seconds(wall_s);
    row.measured = fields[6];
    priors.rows_.push_back(std::move(row));
  }
  return priors;
}

const UnitPriors& UnitPriors::Builtin() {
  static const UnitPriors* builtin = [] {
    absl::StatusOr<UnitPriors> parsed = Parse(kUnitPriorsCsv);
    if (!parsed.ok()) {
      // The build's own data: a test parses it, so this is never reached.
      spdlog::error("{}", parsed.status().ToString());
      return new UnitPriors();
    }
    return new UnitPriors(*std::move(parsed));
  }();
  return *builtin;
}

std::vector<std::string> UnitPriors::MarkersIn(const std::vector<std::string>& paths) const {
  std::vector<std::string> markers;
  for (const PriorRow& row : rows_) {
    if (std::find(markers.begin(), markers.end(), row.marker) != markers.end()) continue;
    for (const std::string& path : paths) {
      const bool ends =
          absl::EndsWith(path, row.marker) &&
          (path.size() == row.marker.size() || path[path.size() - row.marker.size() - 1] == '/');
      if (ends) {
        markers.push_back(row.marker);
        break;
      }
    }
  }
  std::sort(markers.begin(), markers.end());
  return markers;
}

std::optional<PriorCost> UnitPriors::CostOf(const std::vector<std::string>& markers,
                                            absl::string_view source) const {
  const absl::string_view name = FileName(source);
  // Per marker, the rows of the name word the file name holds, else those
  // of none.
  std::map<std::pair<std::string, std::string>, std::vector<const PriorRow*>> groups;
  for (const PriorRow& row : rows_) {
    if (!std::binary_search(markers.begin(), markers.end(), row.marker)) continue;
    if (!row.name_word.empty() && !absl::StrContains(name, row.name_word)) continue;
    groups[{row.marker, row.name_word}].push_back(&row);
  }
  std::optional<PriorCost> dearest;
  for (auto& [key, rows] : groups) {
    const auto& [marker, word] = key;
    if (word.empty()) {
      bool worded = std::any_of(groups.begin(), groups.end(), [&](const auto& other) {
        return other.first.first == marker && !other.first.second.empty();
      });
      if (worded) continue;  // a row of its word is closer
    }
    std::sort(rows.begin(), rows.end(),
              [](const PriorRow* a, const PriorRow* b) { return a->size < b->size; });
    const std::string& size_word = rows.front()->size_word;
    PriorCost cost = Interpolate(rows, size_word.empty() ? std::nullopt : SizeIn(name, size_word));
    if (!dearest || cost.peak_bytes > dearest->peak_bytes) dearest = std::move(cost);
  }
  return dearest;
}

}  // namespace distcc_cuda::coordinator
