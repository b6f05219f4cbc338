// SPDX-License-Identifier: Apache-2.0
#include "coordinator/build_planner.h"

#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/instantiation.h"
#include "common/nvcc_args.h"
#include "common/status.h"
#include "coordinator/result_cache.h"

namespace distcc_cuda::coordinator {
namespace {

absl::Status CheckUnit(const v1::CompileUnit& unit, const CasStore& cas) {
  RETURN_IF_ERROR(ValidateCompileUnit(unit));
  for (const auto& input : unit.inputs()) {
    Digest digest = FromProto(input.digest());
    RETURN_IF_ERROR(ValidateDigest(digest));
    if (!cas.Contains(digest)) {
      return absl::FailedPreconditionError(
          absl::StrCat("unit ", unit.name(), ": input ", input.path(), " (", digest.ToString(),
                       ") is not in the content store; upload it before submitting"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<PlannedUnit>> PlanBuild(const v1::SubmitBuildRequest& request,
                                                   CasStore& cas, const PeakHistory* history) {
  std::vector<v1::CompileUnit> units(request.units().begin(), request.units().end());
  // Similar units: those of one instantiation set, or ordinary units
  // compiled in the same folder.
  std::vector<std::string> families;
  for (const v1::CompileUnit& unit : units) {
    families.push_back(absl::StrCat("folder:", unit.working_directory()));
  }
  for (const v1::InstantiationSet& set : request.instantiation_sets()) {
    ASSIGN_OR_RETURN(std::vector<GeneratedUnit> generated, ExpandInstantiationSet(set));
    for (GeneratedUnit& point : generated) {
      ASSIGN_OR_RETURN(Digest source, cas.PutBytes(point.source_text));
      v1::CompileUnit unit;
      unit.set_name(point.name);
      unit.set_working_directory(set.directory());
      std::string source_name = point.name + ".cu";
      std::string object_name = point.name + ".o";
      for (const auto& argument : set.arguments()) unit.add_arguments(argument);
      for (const char* argument : {"-c"}) unit.add_arguments(argument);
      unit.add_arguments(source_name);
      unit.add_arguments("-o");
      unit.add_arguments(object_name);
      unit.add_output_paths(object_name);
      *unit.mutable_inputs() = set.inputs();
      std::string source_path =
          set.directory().empty() ? source_name
                                  : (std::filesystem::path(set.directory()) / source_name).string();
      for (const auto& input : set.inputs()) {
        if (input.path() == source_path) {
          return absl::InvalidArgumentError(
              absl::StrCat(set.manifest_location(), ": generated unit ", source_path,
                           " would replace an input file of the same name; rename the unit "
                           "template"));
        }
      }
      auto* input = unit.add_inputs();
      input->set_path(source_path);
      *input->mutable_digest() = ToProto(source);
      units.push_back(std::move(unit));
      families.push_back(absl::StrCat("set:", set.name()));
    }
  }
  std::set<std::string> names;
  std::vector<PlannedUnit> planned;
  const std::string& toolchain = request.toolchain().digest();
  for (size_t i = 0; i < units.size(); ++i) {
    v1::CompileUnit& unit = units[i];
    RETURN_IF_ERROR(CheckUnit(unit, cas));
    if (!names.insert(unit.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two units are named '", unit.name(), "'; unit names must be unique"));
    }
    PlannedUnit plan;
    plan.action_digest = ActionDigest(toolchain, unit);
    plan.identity = UnitIdentity(toolchain, unit);
    plan.family = UnitFamily(toolchain, unit, families[i]);
    int parallel = ParallelCompilations(
        std::vector<std::string>(unit.arguments().begin(), unit.arguments().end()));
    plan.demand = history != nullptr ? history->Predict(plan.identity, plan.family, parallel)
                                     : UnitDemand{PredictionDefaults().peak_bytes * parallel,
                                                  PredictionDefaults().wall, "default"};
    plan.unit = std::move(unit);
    planned.push_back(std::move(plan));
  }
  return planned;
}

}  // namespace distcc_cuda::coordinator
