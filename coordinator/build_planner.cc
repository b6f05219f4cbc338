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
                                                   CasStore& cas) {
  std::vector<v1::CompileUnit> units(request.units().begin(), request.units().end());
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
    }
  }
  std::set<std::string> names;
  std::vector<PlannedUnit> planned;
  for (v1::CompileUnit& unit : units) {
    RETURN_IF_ERROR(CheckUnit(unit, cas));
    if (!names.insert(unit.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two units are named '", unit.name(), "'; unit names must be unique"));
    }
    std::string action = ActionDigest(request.toolchain().digest(), unit);
    planned.push_back(PlannedUnit{std::move(unit), std::move(action)});
  }
  return planned;
}

}  // namespace distcc_cuda::coordinator
