// SPDX-License-Identifier: Apache-2.0
#include "client/text/coordinator_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace distcc_cuda::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kEscape[] = "\x1b]0;owned\x07\x1b[2J";
constexpr char kEscaped[] = "\\x1b]0;owned\\x07\\x1b[2J";

// A hostile or buggy coordinator's words reach the terminal written out;
// nvcc's own output is the unit's, and passes byte for byte.
TEST(CoordinatorTextTest, EveryPrintedFieldOfAnEventIsMadeSafeButNvccsOutput) {
  v1::BuildEvent accepted;
  accepted.mutable_accepted()->set_build_id(kEscape);
  accepted.mutable_accepted()->add_unit_names(kEscape);
  accepted.mutable_accepted()->add_notes(std::string("regrouped") + kEscape);
  MakePrintable(accepted);
  EXPECT_EQ(accepted.accepted().build_id(), kEscaped);
  EXPECT_EQ(accepted.accepted().unit_names(0), kEscaped);
  EXPECT_EQ(accepted.accepted().notes(0), std::string("regrouped") + kEscaped);

  v1::BuildEvent added;
  added.mutable_units_added()->add_unit_names(kEscape);
  added.mutable_units_added()->add_notes(std::string("regrouped") + kEscape);
  MakePrintable(added);
  EXPECT_EQ(added.units_added().unit_names(0), kEscaped);
  EXPECT_EQ(added.units_added().notes(0), std::string("regrouped") + kEscaped);

  v1::BuildEvent finished;
  v1::BuildEvent::UnitFinished* done = finished.mutable_unit_finished();
  done->set_unit_name(kEscape);
  done->set_prediction_source(kEscape);
  done->mutable_result()->set_worker_name(kEscape);
  done->mutable_result()->set_error_message(std::string("line one\n") + kEscape);
  done->mutable_result()->set_stderr_text("\x1b[1;31merror\x1b[0m: expected ';'\n");
  MakePrintable(finished);
  EXPECT_EQ(finished.unit_finished().unit_name(), kEscaped);
  EXPECT_EQ(finished.unit_finished().prediction_source(), kEscaped);
  EXPECT_EQ(finished.unit_finished().result().worker_name(), kEscaped);
  EXPECT_EQ(finished.unit_finished().result().error_message(),
            std::string("line one\n") + kEscaped);
  EXPECT_EQ(finished.unit_finished().result().stderr_text(),
            "\x1b[1;31merror\x1b[0m: expected ';'\n");

  v1::BuildEvent split;
  split.mutable_unit_split()->set_unit_name(kEscape);
  split.mutable_unit_split()->add_into(kEscape);
  split.mutable_unit_split()->set_reason(kEscape);
  MakePrintable(split);
  EXPECT_EQ(split.unit_split().into(0), kEscaped);
  EXPECT_EQ(split.unit_split().reason(), kEscaped);

  v1::BuildEvent requeued;
  requeued.mutable_unit_requeued()->set_reason(kEscape);
  MakePrintable(requeued);
  EXPECT_EQ(requeued.unit_requeued().reason(), kEscaped);

  v1::BuildEvent end;
  end.mutable_finished()->set_message(kEscape);
  end.mutable_finished()->add_workers_used(kEscape);
  MakePrintable(end);
  EXPECT_EQ(end.finished().message(), kEscaped);
  EXPECT_EQ(end.finished().workers_used(0), kEscaped);
}

TEST(CoordinatorTextTest, EveryPrintedFieldOfAClusterStatusIsMadeSafe) {
  v1::ClusterStatus status;
  v1::WorkerStatus* worker = status.add_workers();
  worker->set_name(kEscape);
  worker->set_memory_mechanism(kEscape);
  worker->set_sandbox(kEscape);
  worker->mutable_toolchain()->set_host_compiler(kEscape);
  worker->mutable_toolchain()->set_nvcc_build(kEscape);
  v1::RunningUnit* running = status.add_running();
  running->set_unit_name(kEscape);
  running->set_worker_name(kEscape);
  MakePrintable(status);
  const std::string text = status.DebugString();
  EXPECT_THAT(text, Not(HasSubstr("\x1b")));
  EXPECT_EQ(status.workers(0).name(), kEscaped);
  EXPECT_EQ(status.workers(0).sandbox(), kEscaped);
  EXPECT_EQ(status.workers(0).toolchain().host_compiler(), kEscaped);
  EXPECT_EQ(status.running(0).unit_name(), kEscaped);
}

}  // namespace
}  // namespace distcc_cuda::client
