// SPDX-License-Identifier: Apache-2.0
// How two results of one unit are compared, and the scheduler's part of a
// cross-check: which results it samples, who made them, and where their
// second compile may run.
#include "coordinator/scheduler/cross_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "absl/strings/str_cat.h"

namespace distcc_cuda::coordinator {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

TEST(CrossCheckTest, TemporaryFileNamesAreBlankedAndNothingElse) {
  EXPECT_EQ(WithoutTemporaryNames("a tmpxft_00000fbd_00000000-6_k.cudafe1.cpp b"),
            "a tmpxft_00000000_00000000-6_k.cudafe1.cpp b");
  EXPECT_EQ(WithoutTemporaryNames("tmpxft_0000zzzz_00000000 tmpxft_12"),
            "tmpxft_0000zzzz_00000000 tmpxft_12");
  EXPECT_EQ(WithoutTemporaryNames("tmpxft_tmpxft_0000abcd_00000001"),
            "tmpxft_tmpxft_00000000_00000000");
}

class CompareTest : public ::testing::Test {
 protected:
  v1::TaskResult Compiled(const std::string& object, const std::string& producer) {
    Digest digest = DigestOf(object);
    blobs_[digest.ToString()] = object;
    v1::TaskResult result;
    result.set_outcome(v1::TASK_COMPLETED);
    result.set_producer(producer);
    result.set_worker_name(producer);
    auto* output = result.add_outputs();
    output->set_path("k.o");
    *output->mutable_digest() = ToProto(digest);
    return result;
  }
  Agreement Compare(const v1::TaskResult& a, const v1::TaskResult& b) {
    return CompareResults(a, b, [this](const Digest& digest) -> absl::StatusOr<std::string> {
      auto it = blobs_.find(digest.ToString());
      if (it == blobs_.end()) return absl::NotFoundError("not in the store");
      return it->second;
    });
  }
  std::map<std::string, std::string> blobs_;
};

TEST_F(CompareTest, ObjectsThatDifferOnlyInNvccsTemporaryNamesAgree) {
  EXPECT_TRUE(Compare(Compiled("ELF same", "a"), Compiled("ELF same", "b")).same);
  EXPECT_TRUE(Compare(Compiled("ELF tmpxft_00000fbd_00000000-6_k", "a"),
                      Compiled("ELF tmpxft_00001234_00000000-6_k", "b"))
                  .same);
  Agreement forged = Compare(Compiled("ELF honest", "a"), Compiled("ELF forged", "b"));
  EXPECT_FALSE(forged.same);
  EXPECT_THAT(forged.detail, HasSubstr("k.o differs"));
}

TEST_F(CompareTest, AFailedCompileIsAnOpinionToo) {
  v1::TaskResult failed;
  failed.set_outcome(v1::TASK_COMPLETED);
  failed.set_exit_code(2);
  failed.set_producer("b");
  EXPECT_TRUE(Compare(failed, failed).same);
  Agreement split = Compare(Compiled("ELF", "a"), failed);
  EXPECT_FALSE(split.same);
  EXPECT_THAT(split.detail, HasSubstr("failed to compile it"));
}

TEST_F(CompareTest, AnObjectThatCannotBeReadDoesNotAgree) {
  v1::TaskResult a = Compiled("ELF one", "a");
  v1::TaskResult b = Compiled("ELF two", "b");
  blobs_.clear();
  Agreement unread = Compare(a, b);
  EXPECT_FALSE(unread.same);
  EXPECT_THAT(unread.detail, HasSubstr("cannot read k.o"));
}

// The scheduler's side: a sampled result leaves with its producer as the
// coordinator knows it, and its second compile never runs there.
class SchedulerCrossCheckTest : public ::testing::Test {
 protected:
  SchedulerCrossCheckTest()
      : scheduler_(
            [] {
              SchedulerOptions options;
              options.cross_check_rate = 1.0;
              return options;
            }(),
            [this](const std::string& action, const v1::TaskResult& result) {
              recorded_.emplace_back(action, result.producer());
            }) {
    scheduler_.SetCrossCheck(
        [this](CrossCheckCandidate candidate) { candidates_.push_back(std::move(candidate)); });
  }

  std::string AddWorker(const std::string& name, const std::string& peer) {
    v1::RegisterWorkerRequest request;
    request.set_name(name);
    request.mutable_toolchain()->set_digest("toolchain");
    request.set_memory_cap_bytes(int64_t{8} << 30);
    request.set_slots(1);
    absl::StatusOr<std::string> id = scheduler_.RegisterWorker(request, kStart, {peer, true});
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  }

  std::optional<v1::Task> LeaseNow(const std::string& worker, const std::string& peer) {
    std::optional<v1::Task> got;
    EXPECT_TRUE(scheduler_
                    .RequestLease(worker, kStart, [&](std::optional<v1::Task> task) { got = task; },
                                  kStart, {peer, true})
                    .ok());
    return got;
  }

  absl::Status Report(const std::string& worker, const std::string& peer, const v1::Task& task) {
    v1::ReportResultRequest request;
    request.set_worker_id(worker);
    request.set_task_id(task.task_id());
    v1::TaskResult* result = request.mutable_result();
    result->set_outcome(v1::TASK_COMPLETED);
    result->set_toolchain_digest("toolchain");
    result->set_producer("someone-else");  // never believed
    auto* output = result->add_outputs();
    output->set_path(task.unit().output_paths(0));
    *output->mutable_digest() = ToProto(DigestOf("object"));
    return scheduler_.ReportResult(request, kStart, {peer, true});
  }

  PlannedUnit Unit(const std::string& name) {
    PlannedUnit unit;
    unit.unit.set_name(name);
    unit.unit.add_output_paths(name + ".o");
    unit.action_digest = "action-" + name;
    unit.identity = name;
    unit.family = "family";
    unit.demand.peak_bytes = 100 << 20;
    unit.demand.wall = absl::Seconds(1);
    return unit;
  }

  absl::StatusOr<std::string> Submit(std::vector<PlannedUnit> units) {
    v1::ToolchainFingerprint toolchain;
    toolchain.set_digest("toolchain");
    return scheduler_.SubmitBuild(
        "test", toolchain, std::move(units), {}, [](const v1::BuildEvent&) {}, kStart);
  }

  std::vector<std::pair<std::string, std::string>> recorded_;  // action, producer
  std::vector<CrossCheckCandidate> candidates_;
  BuildScheduler scheduler_;
};

TEST_F(SchedulerCrossCheckTest, ASecondCompileRunsOnAnotherIdentityAndIsNotCached) {
  std::string a = AddWorker("a", "gpu-a");
  std::string a2 = AddWorker("a2", "gpu-a");  // a second worker of the same certificate
  std::string b = AddWorker("b", "gpu-b");
  ASSERT_TRUE(Submit({Unit("k")}).ok());
  std::optional<v1::Task> task = LeaseNow(a, "gpu-a");
  ASSERT_TRUE(task);
  ASSERT_TRUE(Report(a, "gpu-a", *task).ok());
  ASSERT_EQ(recorded_.size(), 1u);
  EXPECT_EQ(recorded_[0].second, "gpu-a") << "the producer is the certificate, not the report";
  ASSERT_EQ(candidates_.size(), 1u);
  CrossCheckCandidate check = candidates_[0];
  EXPECT_EQ(check.result.producer(), "gpu-a");
  EXPECT_EQ(check.toolchain_digest, "toolchain");
  EXPECT_FALSE(check.unit.cacheable);
  EXPECT_EQ(check.unit.unit.output_paths(0), "k.o") << "the whole unit";
  EXPECT_EQ(scheduler_.PeersWith("toolchain", check.unit.avoid_peers), 1);

  ASSERT_TRUE(Submit({check.unit}).ok());
  EXPECT_FALSE(LeaseNow(a2, "gpu-a")) << "never where it ran first";
  std::optional<v1::Task> second = LeaseNow(b, "gpu-b");
  ASSERT_TRUE(second);
  ASSERT_TRUE(Report(b, "gpu-b", *second).ok());
  EXPECT_EQ(recorded_.size(), 1u) << "a check's compile is not cached";
  EXPECT_EQ(candidates_.size(), 1u) << "nor checked again";
}

TEST_F(SchedulerCrossCheckTest, DroppingAnIdentityDropsAllItsWorkersAndRequeuesTheirUnits) {
  std::string a = AddWorker("a", "gpu-a");
  std::string a2 = AddWorker("a2", "gpu-a");
  std::string b = AddWorker("b", "gpu-b");
  ASSERT_TRUE(Submit({Unit("k")}).ok());
  ASSERT_TRUE(LeaseNow(a, "gpu-a"));
  EXPECT_EQ(scheduler_.DropWorkersOf("gpu-a", "was revoked", kStart), 2);
  v1::ClusterStatus status = scheduler_.Status(kStart);
  ASSERT_EQ(status.workers_size(), 1);
  EXPECT_EQ(status.workers(0).name(), "b");
  EXPECT_TRUE(LeaseNow(b, "gpu-b")) << "its unit runs elsewhere";
  EXPECT_EQ(scheduler_.DropWorkersOf("gpu-a", "was revoked", kStart), 0);
}

}  // namespace
}  // namespace distcc_cuda::coordinator
