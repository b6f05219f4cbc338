// SPDX-License-Identifier: Apache-2.0
#include "client/text/coordinator_text.h"

#include <string>

#include "common/base/terminal_text.h"

namespace distcc_cuda::client {
namespace {

void Clean(std::string* text, bool keep_newlines = false) {
  *text = TerminalSafe(*text, keep_newlines);
}

void Clean(google::protobuf::RepeatedPtrField<std::string>* texts) {
  for (std::string& text : *texts) Clean(&text);
}

void Clean(v1::ToolchainFingerprint* toolchain) {
  for (std::string* text :
       {toolchain->mutable_nvcc_release(), toolchain->mutable_nvcc_build(),
        toolchain->mutable_nvcc_version(), toolchain->mutable_nvcc_path(),
        toolchain->mutable_host_compiler(), toolchain->mutable_digest(),
        toolchain->mutable_nvcc_sha256(), toolchain->mutable_cicc_sha256(),
        toolchain->mutable_ptxas_sha256(), toolchain->mutable_cuda_version_header()}) {
    Clean(text);
  }
}

}  // namespace

void MakePrintable(v1::BuildEvent& event) {
  switch (event.event_case()) {
    case v1::BuildEvent::kAccepted:
      Clean(event.mutable_accepted()->mutable_build_id());
      Clean(event.mutable_accepted()->mutable_unit_names());
      Clean(event.mutable_accepted()->mutable_notes());
      break;
    case v1::BuildEvent::kUnitsAdded:
      Clean(event.mutable_units_added()->mutable_unit_names());
      Clean(event.mutable_units_added()->mutable_notes());
      break;
    case v1::BuildEvent::kUnitStarted:
      Clean(event.mutable_unit_started()->mutable_unit_name());
      Clean(event.mutable_unit_started()->mutable_worker_name());
      break;
    case v1::BuildEvent::kUnitFinished: {
      v1::BuildEvent::UnitFinished* done = event.mutable_unit_finished();
      Clean(done->mutable_unit_name());
      Clean(done->mutable_prediction_source());
      v1::TaskResult* result = done->mutable_result();
      Clean(result->mutable_worker_name());
      Clean(result->mutable_producer());
      Clean(result->mutable_error_message(), /*keep_newlines=*/true);
      Clean(result->mutable_toolchain_digest());
      break;
    }
    case v1::BuildEvent::kUnitRequeued:
      Clean(event.mutable_unit_requeued()->mutable_unit_name());
      Clean(event.mutable_unit_requeued()->mutable_reason());
      break;
    case v1::BuildEvent::kUnitSplit:
      Clean(event.mutable_unit_split()->mutable_unit_name());
      Clean(event.mutable_unit_split()->mutable_into());
      Clean(event.mutable_unit_split()->mutable_reason());
      break;
    case v1::BuildEvent::kFinished:
      Clean(event.mutable_finished()->mutable_workers_used());
      Clean(event.mutable_finished()->mutable_message(), /*keep_newlines=*/true);
      break;
    case v1::BuildEvent::EVENT_NOT_SET:
      break;
  }
}

void MakePrintable(v1::ClusterStatus& status) {
  for (v1::WorkerStatus& worker : *status.mutable_workers()) {
    Clean(worker.mutable_name());
    Clean(worker.mutable_memory_mechanism());
    Clean(worker.mutable_sandbox());
    Clean(worker.mutable_toolkit_source());
    Clean(worker.mutable_toolchain());
    for (v1::ToolchainFingerprint& more : *worker.mutable_more_toolchains()) Clean(&more);
  }
  for (v1::RunningUnit& unit : *status.mutable_running()) {
    Clean(unit.mutable_unit_name());
    Clean(unit.mutable_worker_name());
    Clean(unit.mutable_prediction_source());
  }
  for (v1::BuildRecord& build : *status.mutable_builds()) {
    Clean(build.mutable_build_id());
    Clean(build.mutable_name());
    Clean(build.mutable_outcome());
    for (std::string& worker : *build.mutable_workers_used()) Clean(&worker);
  }
  for (v1::RevokedWorker& revoked : *status.mutable_revoked_workers()) {
    Clean(revoked.mutable_name());
    Clean(revoked.mutable_reason());
  }
}

}  // namespace distcc_cuda::client
