// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/build_book.h"

#include <utility>

namespace distcc_cuda::coordinator {

namespace {

// What the scheduler reads of a unit it holds: its name, outputs and
// architecture part.
v1::CompileUnit CompactUnit(const v1::CompileUnit& unit) {
  v1::CompileUnit compact;
  compact.set_name(unit.name());
  *compact.mutable_output_paths() = unit.output_paths();
  if (unit.has_architecture_part()) {
    *compact.mutable_architecture_part() = unit.architecture_part();
  }
  return compact;
}

}  // namespace

UnitState HoldUnit(PlannedUnit planned, bool cached) {
  UnitState held;
  // A cached unit is finished at once, its whole unit in its event.
  if (!cached) {
    held.unit_bytes = planned.unit.SerializeAsString();
    planned.unit = CompactUnit(planned.unit);
  }
  held.planned = std::move(planned);
  return held;
}

std::vector<UnitState> HoldUnits(std::vector<PlannedUnit> units,
                                 const std::map<int, v1::TaskResult>& cached) {
  std::vector<UnitState> held;
  held.reserve(units.size());
  for (size_t i = 0; i < units.size(); ++i) {
    held.push_back(HoldUnit(std::move(units[i]), cached.count(i) != 0));
  }
  return held;
}

v1::CompileUnit WholeUnit(const UnitState& unit) {
  if (unit.unit_bytes.empty()) return unit.planned.unit;
  v1::CompileUnit whole;
  // Its own serialization, made by HoldUnit: it parses.
  whole.ParseFromString(unit.unit_bytes);
  return whole;
}

void ForgetAllButWhatIsRead(UnitState& unit) {
  std::string().swap(unit.unit_bytes);
  unit.planned.unit = CompactUnit(unit.planned.unit);
  unit.planned.split = nullptr;
}

}  // namespace distcc_cuda::coordinator
