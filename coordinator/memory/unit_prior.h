// SPDX-License-Identifier: Apache-2.0
// What a unit costs before this coordinator has measured anything like it:
// a table of measured units (coordinator/memory/data/unit_priors.csv, compiled
// in), each row a kind of unit known by a header its closure holds (the
// marker: flash_bwd_launch_template.h, CUTLASS's GEMM collective builder),
// a word of its source's file name ("split") and a size the file name
// carries (the 128 of hdim128), with the peak and wall time one compilation
// (one target, --threads 1) took where it was measured. A unit between two
// measured sizes is interpolated, one beyond them takes the nearest.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace distcc_cuda::coordinator {

struct PriorRow {
  std::string marker;      // the end of an input's path: "flash_fwd_launch_template.h"
  std::string name_word;   // "" or a word the source's file name holds: "split"
  std::string size_word;   // "" or the word a size follows in the file name: "hdim"
  int size = 0;            // the measured unit's size (0 with no size_word)
  int64_t peak_bytes = 0;  // one compilation's peak, the whole process tree
  absl::Duration wall;
  std::string measured;  // where and how, for people
};

// One compilation's cost and the row it came from.
struct PriorCost {
  int64_t peak_bytes = 0;
  absl::Duration wall;
  std::string measured;
};

class UnitPriors {
 public:
  // The rows of a CSV of columns marker,name_word,size_word,size,peak_mib,
  // wall_s,measured ('#' lines are comments). INVALID_ARGUMENT naming the
  // line for one that does not parse.
  static absl::StatusOr<UnitPriors> Parse(absl::string_view csv);
  // coordinator/memory/data/unit_priors.csv, as built in.
  static const UnitPriors& Builtin();

  // The table's markers that end one of `paths` (a unit's inputs, relative
  // or absolute), sorted, each once.
  std::vector<std::string> MarkersIn(const std::vector<std::string>& paths) const;

  // The cost of one compilation of a unit whose closure holds `markers`
  // and whose source is `source`: of the rows whose marker it holds, those
  // whose name word its file name holds (else those without one), the
  // dearest marker's; sized by its file name. nullopt when no row applies.
  std::optional<PriorCost> CostOf(const std::vector<std::string>& markers,
                                  absl::string_view source) const;

  const std::vector<PriorRow>& rows() const { return rows_; }

 private:
  std::vector<PriorRow> rows_;
};

}  // namespace distcc_cuda::coordinator
