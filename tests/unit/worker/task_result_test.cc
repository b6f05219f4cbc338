// SPDX-License-Identifier: Apache-2.0
// The stages of a worker's task that need neither the network nor a
// compile: how a run becomes its result, and its outputs collected from a
// real task folder.
#include "worker/task_result.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "common/base/files.h"
#include "common/base/status.h"
#include "common/store/digest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::worker {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

ProcessResult Exited(int code) {
  ProcessResult run;
  run.exit_code = code;
  run.wall_time = absl::Seconds(3);
  run.user_cpu_time = absl::Seconds(2);
  run.system_cpu_time = absl::Milliseconds(500);
  run.peak_rss_bytes = 300 * kMiB;
  return run;
}

const RunLimits kLimits{64, 1024 * kMiB, 4096 * kMiB};

TEST(ResultOfRunTest, ACompileThatExitedZeroIsCompletedWithItsTimesAndTheLargerPeak) {
  v1::TaskResult result = ResultOfRun(Exited(0), TaskMemoryUsage{500 * kMiB, false}, kLimits);
  EXPECT_EQ(result.outcome(), v1::TASK_COMPLETED);
  EXPECT_EQ(result.exit_code(), 0);
  EXPECT_EQ(result.wall_time_ms(), 3000);
  EXPECT_EQ(result.cpu_time_ms(), 2500);
  EXPECT_EQ(result.peak_memory_bytes(), 500 * kMiB) << "the cap's peak, above rusage's";
  EXPECT_EQ(result.error_message(), "");
  EXPECT_EQ(result.outputs_size(), 0) << "CollectOutputs adds them";
  // rusage's single process can be the larger (a watchdog between samples).
  EXPECT_EQ(ResultOfRun(Exited(0), TaskMemoryUsage{0, false}, kLimits).peak_memory_bytes(),
            300 * kMiB);
}

TEST(ResultOfRunTest, ACompileErrorKeepsNvccsExitCodeAndSaysHowItEnded) {
  ProcessResult run = Exited(2);
  run.stderr_text = "k.cu(3): error: identifier \"x\" is undefined\n";
  v1::TaskResult result = ResultOfRun(run, TaskMemoryUsage{}, kLimits);
  EXPECT_EQ(result.outcome(), v1::TASK_COMPLETED);
  EXPECT_EQ(result.exit_code(), 2);
  EXPECT_EQ(result.error_message(), "exit code 2");
  EXPECT_EQ(result.stderr_text(), run.stderr_text);
}

TEST(ResultOfRunTest, ATimeoutIsTimedOut) {
  ProcessResult run = Exited(-1);
  run.term_signal = 9;
  run.timed_out = true;
  v1::TaskResult result = ResultOfRun(run, TaskMemoryUsage{}, kLimits);
  EXPECT_EQ(result.outcome(), v1::TASK_TIMED_OUT);
  EXPECT_THAT(result.error_message(), HasSubstr("timed out"));
}

TEST(ResultOfRunTest, AMemoryKillNamesThePeakTheReservationAndTheCap) {
  ProcessResult run = Exited(-1);
  run.term_signal = 9;
  v1::TaskResult result = ResultOfRun(run, TaskMemoryUsage{1536 * kMiB, true}, kLimits);
  EXPECT_EQ(result.outcome(), v1::TASK_KILLED_FOR_MEMORY);
  EXPECT_EQ(result.error_message(), "killed for memory at 1.5 GiB (reserved 1.0 GiB, cap 4.0 GiB)");
}

TEST(ResultOfRunTest, OutputThatReachedTheLimitIsCutWithALineSayingSo) {
  ProcessResult run = Exited(1);
  run.stdout_text = std::string(64, 'o');  // RunProcess kept only the limit
  run.stderr_text = "short\n";
  run.output_truncated = true;
  v1::TaskResult result = ResultOfRun(run, TaskMemoryUsage{}, kLimits);
  EXPECT_EQ(result.stdout_text(),
            std::string(64, 'o') +
                "\n[distcc-cuda: output cut at 64 B; the worker's --max-output limit]\n");
  EXPECT_EQ(result.stderr_text(), "short\n") << "the other stream was not cut";
}

TEST(SandboxNeverBuiltTest, OnlyBwrapsOwnFailureMeansNvccNeverRan) {
  ProcessResult run = Exited(1);
  run.stderr_text = "bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n";
  EXPECT_EQ(SandboxNeverBuilt(run),
            "the sandbox could not be built: bwrap: Can't mount proc on /newroot/proc: "
            "Operation not permitted");
  run.stderr_text = "k.cu(1): error: bwrap: is not a type\n";
  EXPECT_EQ(SandboxNeverBuilt(run), std::nullopt) << "nvcc's own error";
}

// A task folder laid out as the worker does (TaskTree::Prepare), in which
// the compile "wrote" its outputs.
class CollectOutputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = testing::NewTempDir("task-");
    unit_.set_working_directory("kernels");
    v1::InputFile* input = unit_.add_inputs();
    input->set_path("kernels/k.cu");
    input->set_content("__global__ void K() {}\n");
    *input->mutable_digest() = ToProto(DigestOf(input->content()));
    unit_.add_output_paths("k.o");
    unit_.add_output_paths("k.d");
    absl::StatusOr<TaskTree> tree =
        TaskTree::Prepare(unit_, folder_, nullptr, [](const v1::InputFile&, const std::string&) {
          return absl::InternalError("nothing is stored");
        });
    ASSERT_TRUE(tree.ok()) << tree.status();
    tree_.emplace(*std::move(tree));
  }

  std::string folder_;
  v1::CompileUnit unit_;
  std::optional<TaskTree> tree_;
};

TEST_F(CollectOutputsTest, EachOutputIsCopiedOutPrivatelyAndAddedWithItsDigest) {
  ASSERT_TRUE(WriteFileAtomically(tree_->working_directory() + "/k.o", "object").ok());
  ASSERT_TRUE(WriteFileAtomically(tree_->working_directory() + "/k.d", "k.o: k.cu\n").ok());
  v1::TaskResult result;
  absl::StatusOr<CollectedOutputs> collected = CollectOutputs(*tree_, unit_, folder_, result);
  ASSERT_TRUE(collected.ok()) << collected.status();
  EXPECT_EQ(collected->refused, "");
  ASSERT_EQ(result.outputs_size(), 2);
  EXPECT_EQ(result.outputs(0).path(), "k.o");
  EXPECT_EQ(FromProto(result.outputs(0).digest()), DigestOf("object"));
  EXPECT_EQ(FromProto(result.outputs(1).digest()), DigestOf("k.o: k.cu\n"));
  ASSERT_EQ(collected->uploads.size(), 2u);
  EXPECT_EQ(*ReadFile(collected->uploads[1].path), "k.o: k.cu\n");
  EXPECT_EQ(collected->uploads[0].digest, DigestOf("object"));
  struct stat info;
  ASSERT_EQ(stat((folder_ + "/outputs").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u) << "out of the compile's reach";
}

TEST_F(CollectOutputsTest, AnOutputThatIsALinkOrMissingIsRefusedNotFollowed) {
  ASSERT_TRUE(WriteFileAtomically(tree_->working_directory() + "/k.o", "object").ok());
  std::filesystem::create_symlink("/etc/passwd", tree_->working_directory() + "/k.d");
  v1::TaskResult result;
  absl::StatusOr<CollectedOutputs> collected = CollectOutputs(*tree_, unit_, folder_, result);
  ASSERT_TRUE(collected.ok()) << collected.status();
  EXPECT_THAT(collected->refused,
              HasSubstr("nvcc exited 0 but its output k.d is not a file the compile wrote"));
  EXPECT_EQ(collected->uploads.size(), 1u) << "nothing of the link";
  std::filesystem::remove(tree_->working_directory() + "/k.d");
  std::filesystem::remove_all(folder_ + "/outputs");  // a task collects once
  v1::TaskResult again;
  collected = CollectOutputs(*tree_, unit_, folder_, again);
  ASSERT_TRUE(collected.ok()) << collected.status();
  EXPECT_THAT(collected->refused, HasSubstr("its output k.d is not a file"));
}

}  // namespace
}  // namespace distcc_cuda::worker
