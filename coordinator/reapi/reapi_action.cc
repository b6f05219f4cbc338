// SPDX-License-Identifier: Apache-2.0
#include "coordinator/reapi/reapi_action.h"

#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/byte_size.h"
#include "common/base/status.h"
#include "common/reapi/input_root.h"
#include "coordinator/planning/request_cost.h"
#include "distcc_cuda/v1/cas.pb.h"

namespace distcc_cuda::coordinator {
namespace {

std::string Describe(const v1::ToolchainFingerprint& toolchain) {
  return absl::StrCat("nvcc ", toolchain.nvcc_release(), " (", toolchain.digest().substr(0, 12),
                      ")");
}

}  // namespace

absl::Status ReadMessageBlob(const CasStore& cas, const reapi::Digest& digest,
                             absl::string_view what, google::protobuf::Message& message) {
  RETURN_IF_ERROR(CheckMessageDigest(digest, what));
  absl::StatusOr<std::string> bytes = cas.Get(FromReapi(digest));
  if (absl::IsNotFound(bytes.status())) {
    return MissingBlobsError(absl::StrCat("the store lacks ", what, " (", BlobSubject(digest),
                                          "): upload it and execute again"),
                             {BlobSubject(digest)});
  }
  if (!bytes.ok()) return bytes.status();
  return ParseRequest(*bytes, nullptr, absl::StrCat(what, " (", BlobSubject(digest), ")"), message);
}

absl::StatusOr<Digest> ConvertInputRoot(CasStore& cas, const reapi::Digest& root,
                                        const BuildLimits& limits, CasPin& pin) {
  auto read = [&cas](const reapi::Digest& digest, reapi::Directory& folder) {
    return ReadMessageBlob(cas, digest, "a folder of the input root", folder);
  };
  return ::distcc_cuda::ConvertInputRoot(root, read, cas, limits.max_inputs_per_unit,
                                         "--max-inputs-per-unit of distcc-cuda-coordinator", pin);
}

absl::StatusOr<v1::ToolchainFingerprint> ChooseToolchain(
    const reapi::Platform& platform, const std::vector<v1::ToolchainFingerprint>& served) {
  std::map<std::string, v1::ToolchainFingerprint> distinct;  // by digest
  for (const v1::ToolchainFingerprint& toolchain : served) distinct[toolchain.digest()] = toolchain;
  std::vector<std::string> names;
  for (const auto& [digest, toolchain] : distinct) names.push_back(Describe(toolchain));
  if (distinct.empty()) {
    return PreconditionError(
        "no distcc-cuda worker is connected to this coordinator, so no compile can run; start "
        "one (distcc-cuda-worker --coordinator ADDRESS) and execute again",
        kToolchainUnserved, {"toolchain"});
  }
  std::optional<std::string> asked = PlatformProperty(platform, kToolchainProperty);
  if (!asked.has_value()) {
    if (distinct.size() == 1) return distinct.begin()->second;
    return PreconditionError(
        absl::StrCat("the workers have ", distinct.size(), " toolchains (",
                     absl::StrJoin(names, ", "),
                     "); say which the action needs with the platform "
                     "property '",
                     kToolchainProperty,
                     "' (a digest's first 12 hex digits or an nvcc release; Bazel: "
                     "--remote_default_exec_properties=toolchain=VALUE)"),
        kToolchainUnserved, {"toolchain"});
  }
  const std::string& value = *asked;
  for (const auto& [digest, toolchain] : distinct) {
    if (ToolchainMatches(toolchain, value)) return toolchain;
  }
  return PreconditionError(
      absl::StrCat("no connected worker has the toolchain '", absl::CHexEscape(value.substr(0, 80)),
                   "' that the action asks for; the workers have ", absl::StrJoin(names, ", ")),
      kToolchainUnserved, {"toolchain"});
}

absl::StatusOr<v1::SubmitBuildRequest> UnitBuildOf(const reapi::Command& command,
                                                   const Digest& input_root,
                                                   const v1::ToolchainFingerprint& toolchain) {
  v1::SubmitBuildRequest request;
  ASSIGN_OR_RETURN(*request.add_units(), UnitOfCommand(command, input_root));
  request.set_build_name(request.units(0).name());
  *request.mutable_toolchain() = toolchain;
  // The parts of a split unit are merged by distcc-cuda's client, which a
  // REAPI client is not.
  request.set_architecture_split(v1::ARCHITECTURE_SPLIT_NEVER);
  return request;
}

absl::StatusOr<reapi::ActionResult> ActionResultOf(const v1::TaskResult& result,
                                                   const v1::CompileUnit& unit, CasStore& cas) {
  return ::distcc_cuda::ActionResultOf(
      result, unit, 0, [&cas](const std::string& text) { return cas.PutBytes(text); });
}

absl::StatusOr<reapi::ExecuteResponse> ExecuteResponseOf(const v1::TaskResult& result,
                                                         const v1::CompileUnit& unit, bool cached,
                                                         CasStore& cas) {
  reapi::ExecuteResponse response;
  response.set_cached_result(cached);
  const absl::StatusCode code = StatusCodeOfOutcome(result.outcome());
  if (code != absl::StatusCode::kOk) {
    response.mutable_status()->set_code(static_cast<int>(code));
    response.mutable_status()->set_message(
        absl::StrCat(unit.name(), " did not run to the end: ", result.error_message()));
    return response;
  }
  ASSIGN_OR_RETURN(*response.mutable_result(), ActionResultOf(result, unit, cas));
  if (result.outcome() == v1::TASK_KILLED_FOR_MEMORY) response.set_message(result.error_message());
  return response;
}

}  // namespace distcc_cuda::coordinator
