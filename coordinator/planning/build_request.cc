// SPDX-License-Identifier: Apache-2.0
#include "coordinator/planning/build_request.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/nvcc/instantiation.h"
#include "coordinator/planning/build_inputs.h"
#include "coordinator/planning/request_cost.h"

namespace distcc_cuda::coordinator {

absl::Status CheckBuildLimits(const v1::SubmitBuildRequest& request, const BuildLimits& limits,
                              const BuildInputs* inputs) {
  auto over = [](const char* what, int64_t asked, int64_t limit, const char* flag,
                 const char* hint) {
    return absl::ResourceExhaustedError(absl::StrCat("the build asks for ", asked, " ", what,
                                                     "; this coordinator allows ", limit, " (",
                                                     flag, "); ", hint));
  };
  int64_t points = 0;
  for (const v1::InstantiationSet& set : request.instantiation_sets()) {
    points = std::min<int64_t>(points + GridPoints(set), std::numeric_limits<int64_t>::max() / 2);
  }
  if (points > limits.max_grid_points) {
    return over("instantiation grid points", points, limits.max_grid_points, "--max-grid-points",
                "build fewer axis values at once, or ask the operator to raise the limit");
  }
  int64_t units = request.units_size() + points;
  if (units > limits.max_units) {
    return over("compile units", units, limits.max_units, "--max-units-per-build",
                "split the build, or ask the operator to raise the limit");
  }
  std::map<std::string, int64_t> sizes;  // distinct inputs by digest
  auto check_arguments =
      [&](const std::string& owner,
          const google::protobuf::RepeatedPtrField<std::string>& arguments,
          const google::protobuf::RepeatedPtrField<v1::InputFile>& inputs) -> absl::Status {
    if (arguments.size() > limits.max_arguments_per_unit) {
      return over(absl::StrCat("arguments in ", owner).c_str(), arguments.size(),
                  limits.max_arguments_per_unit, "--max-arguments-per-unit", "pass fewer options");
    }
    for (const std::string& argument : arguments) {
      if (static_cast<int64_t>(argument.size()) > limits.max_argument_bytes) {
        return over(absl::StrCat("bytes in one argument of ", owner).c_str(), argument.size(),
                    limits.max_argument_bytes, "--max-argument-length", "shorten it");
      }
    }
    if (inputs.size() > limits.max_inputs_per_unit) {
      return over(absl::StrCat("input files in ", owner).c_str(), inputs.size(),
                  limits.max_inputs_per_unit, "--max-inputs-per-unit",
                  "include fewer headers, or ask the operator to raise the limit");
    }
    for (const v1::InputFile& input : inputs) {
      sizes[input.digest().hash()] = std::max<int64_t>(0, input.digest().size_bytes());
    }
    return absl::OkStatus();
  };
  for (const v1::CompileUnit& unit : request.units()) {
    RETURN_IF_ERROR(check_arguments(absl::StrCat("unit ", unit.name().substr(0, 200)),
                                    unit.arguments(), unit.inputs()));
  }
  for (const v1::InstantiationSet& set : request.instantiation_sets()) {
    RETURN_IF_ERROR(check_arguments(absl::StrCat("instantiation set ", set.name().substr(0, 200)),
                                    set.arguments(), set.inputs()));
  }
  if (inputs != nullptr) {
    for (const auto& [hash, size] : inputs->file_sizes()) sizes[hash] = std::max<int64_t>(0, size);
  }
  int64_t bytes = 0;
  for (const auto& [hash, size] : sizes) {
    bytes = std::min<int64_t>(bytes + size, std::numeric_limits<int64_t>::max() / 2);
  }
  if (bytes > limits.max_input_bytes) {
    return over("bytes of input files", bytes, limits.max_input_bytes, "--max-build-input-size",
                "the build reads more than the operator expects; check what the scan found");
  }
  return absl::OkStatus();
}

absl::Status RefuseCarriedBytes(const v1::SubmitBuildRequest& request) {
  auto refuse = [](absl::string_view what, int index, int input) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " ", index, "'s input ", input,
        " carries its bytes (InputFile.content), which only the coordinator sets; upload the "
        "file to the content store and send its digest"));
  };
  for (int i = 0; i < request.units_size(); ++i) {
    for (int k = 0; k < request.units(i).inputs_size(); ++k) {
      if (request.units(i).inputs(k).has_content()) return refuse("unit", i, k);
    }
  }
  for (int i = 0; i < request.instantiation_sets_size(); ++i) {
    for (int k = 0; k < request.instantiation_sets(i).inputs_size(); ++k) {
      if (request.instantiation_sets(i).inputs(k).has_content()) {
        return refuse("instantiation set", i, k);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::SubmitBuildRequest> ReadBuildPlan(const v1::SubmitBuildRequest& request,
                                                     const CasStore& cas,
                                                     const BuildLimits& limits) {
  if (!request.has_plan()) {
    RETURN_IF_ERROR(RefuseCarriedBytes(request));
    return request;
  }
  if (request.units_size() > 0 || request.instantiation_sets_size() > 0) {
    return absl::InvalidArgumentError(
        "the build gives both a plan blob and units of its own; send one or the other");
  }
  const Digest digest = FromProto(request.plan());
  RETURN_IF_ERROR(ValidateDigest(digest));
  if (digest.size_bytes > limits.max_plan_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the build's plan is ", digest.size_bytes, " bytes; this coordinator reads at most ",
        limits.max_plan_bytes,
        " (--max-build-plan-size); split the build, or ask the operator to raise the limit"));
  }
  ASSIGN_OR_RETURN(std::string bytes,
                   ReadNamedBlob(cas, digest,
                                 absl::StrCat("the build's plan ", digest.ToString(),
                                              " is not in the content store; upload it before "
                                              "submitting")));
  RETURN_IF_ERROR(CheckParseCost(bytes, *v1::BuildPlan::descriptor(), &limits,
                                 absl::StrCat("the build's plan ", digest.ToString())));
  v1::BuildPlan plan;
  if (!plan.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the build's plan ", digest.ToString(), " is not a BuildPlan message"));
  }
  v1::SubmitBuildRequest read = request;
  read.clear_plan();
  read.mutable_units()->Swap(plan.mutable_units());
  read.mutable_instantiation_sets()->Swap(plan.mutable_instantiation_sets());
  RETURN_IF_ERROR(RefuseCarriedBytes(read));
  return read;
}

}  // namespace distcc_cuda::coordinator
