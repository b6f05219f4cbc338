// SPDX-License-Identifier: Apache-2.0
// A launcher call the coordinator refuses: only inputs it says are missing
// are uploaded; a toolchain no worker has ends the call at once, before
// anything is uploaded (issue 31, step 5).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/launcher/launcher.h"
#include "client/launcher/remote_compile.h"
#include "common/base/files.h"
#include "common/store/cas_client.h"
#include "common/store/digest.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"
#include "worker/worker.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

class LauncherRefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::NewTempDir("launcher-refusal-");
    coordinator::CoordinatorOptions options;
    options.state_dir = root_ + "/coordinator";
    auto started = coordinator::Coordinator::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(*started);
    worker::WorkerOptions worker;
    worker.coordinator_address = coordinator_->address();
    worker.name = "worker-130";
    worker.slots = 1;
    worker.memory_cap_bytes = int64_t{4} << 30;
    worker.nvcc_path = testing::FakeNvccPath();  // release 13.0
    worker.work_dir = root_ + "/worker";
    auto joined = worker::Worker::Start(worker);
    ASSERT_TRUE(joined.ok()) << joined.status();
    worker_ = std::move(*joined);
    source_ = "// a source only this test has: " + root_ + "\nvoid k() {}\n";
    ASSERT_TRUE(WriteFileAtomically(root_ + "/src/k.cu", source_).ok());
    channel_ = grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials());
  }

  // Compiles src/k.cu with `nvcc` through the launcher's remote path.
  absl::StatusOr<client::RemoteCompileResult> Compile(const std::string& nvcc) {
    client::LauncherCall call{nvcc, {"-O2", "-c", "k.cu", "-o", "k.o"}, root_ + "/src"};
    client::LauncherDecision decision = client::DecideWhereToCompile(call.arguments);
    EXPECT_TRUE(decision.remote) << decision.local_reason;
    client::RemoteCompiler compiler(channel_, coordinator_->address(), 1, "", {}, root_ + "/state");
    return compiler.Compile(call, decision.plan, nullptr);
  }

  // Whether the coordinator's store holds the source's bytes.
  bool StoreHasSource() {
    CasClient cas(v1::ContentStore::NewStub(channel_));
    absl::StatusOr<std::vector<Digest>> missing = cas.FindMissing({DigestOf(source_)});
    EXPECT_TRUE(missing.ok()) << missing.status();
    return missing.ok() && missing->empty();
  }

  std::string root_;
  std::string source_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::unique_ptr<worker::Worker> worker_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(LauncherRefusalTest, AToolchainNoWorkerHasUploadsNothing) {
  const std::string nvcc128 = testing::FakeNvccWithRelease(root_, "12.8");
  absl::StatusOr<client::RemoteCompileResult> compiled = Compile(nvcc128);
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kFailedPrecondition) << compiled.status();
  EXPECT_THAT(compiled.status().message(),
              HasSubstr("no connected worker has the build's toolchain nvcc 12.8"));
  EXPECT_THAT(compiled.status().message(), HasSubstr("worker-130: nvcc 13.0"));
  EXPECT_FALSE(StoreHasSource()) << "the inputs were uploaded for nothing";
}

TEST_F(LauncherRefusalTest, MissingInputsAreUploadedAndTheUnitCompiles) {
  ASSERT_FALSE(StoreHasSource());
  absl::StatusOr<client::RemoteCompileResult> compiled = Compile(testing::FakeNvccPath());
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(compiled->exit_code, 0) << compiled->stderr_text;
  EXPECT_EQ(compiled->worker, "worker-130");
  EXPECT_TRUE(StoreHasSource());
  EXPECT_TRUE(std::filesystem::exists(root_ + "/src/k.o"));
}

}  // namespace
}  // namespace distcc_cuda
