// SPDX-License-Identifier: Apache-2.0
// Bazel against the coordinator's Remote Execution API (issue 33): Debian's
// Bazel 4.2.3 builds tests/e2e/bazel_workspace with --remote_executor
// pointed at a real coordinator with a real-nvcc worker. The nvcc action
// runs on the worker, a second build is an action-cache hit, and an action
// whose arguments the model refuses runs nowhere.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/bazel_client.h"
#include "tests/support/loopback_cluster.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class BazelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string nvcc = testing::RealNvccPath();
    if (nvcc.empty()) GTEST_SKIP() << "needs the real nvcc at /usr/local/cuda/bin/nvcc";
    if (!fs::exists(testing::kBazel))
      GTEST_SKIP() << "needs Bazel 4 (apt-get install bazel-bootstrap)";
    root_ = testing::NewTempDir("bazel-");
    auto cluster = testing::LoopbackCluster::Start(root_, nvcc, {{"bazel-w", 2}},
                                                   {"--reapi-listen", "127.0.0.1:0"});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    const std::string said = "(Bazel: --remote_executor=grpc://";
    absl::StatusOr<std::string> line = cluster_->coordinator().WaitForLog(said, absl::Seconds(20));
    ASSERT_TRUE(line.ok()) << line.status();
    std::string address = line->substr(line->find(said) + said.size());
    reapi_ = address.substr(0, address.find(')'));
    workspace_ = root_ + "/workspace";
    fs::copy(testing::SourceDir() + "/tests/e2e/bazel_workspace", workspace_,
             fs::copy_options::recursive);
  }

  // `bazel build TARGET` with remote execution on the coordinator, in a
  // Bazel of its own (--batch: no server left behind) under root_.
  ProcessResult Build(const std::string& target) {
    ProcessSpec spec;
    spec.argv = testing::BazelRemoteBuild(root_, "grpc://" + reapi_,
                                          // Accepted and ignored: a coordinator is one instance.
                                          "e2e");
    spec.argv.push_back(target);
    spec.working_directory = workspace_;
    spec.timeout = absl::Minutes(5);
    absl::StatusOr<ProcessResult> ran = RunProcess(spec);
    EXPECT_TRUE(ran.ok()) << ran.status();
    return ran.ok() ? *ran : ProcessResult{};
  }

  std::string Object(const std::string& name) const { return testing::BazelOutput(root_, name); }

  std::string root_;
  std::unique_ptr<testing::LoopbackCluster> cluster_;
  std::string reapi_;
  std::string workspace_;
};

TEST_F(BazelTest, TheNvccActionRunsOnAWorkerAndThenHitsTheCache) {
  ProcessResult first = Build("//:kernel");
  ASSERT_EQ(first.exit_code, 0) << first.stderr_text;
  EXPECT_THAT(first.stderr_text, HasSubstr("1 remote."));
  ASSERT_TRUE(fs::exists(Object("kernel.o")));
  ProcessSpec inspect;
  inspect.argv = {testing::BinaryPath("distcc-cuda"), "inspect", Object("kernel.o")};
  ProcessResult fatbinary = RunProcess(inspect).value_or(ProcessResult{});
  EXPECT_THAT(fatbinary.stdout_text, HasSubstr("sm_100 cubin\n")) << fatbinary.stderr_text;
  EXPECT_THAT(cluster_->coordinator().Log(), HasSubstr("('kernel.o'): 1 units, 0 cached"));

  // Bazel's own outputs gone: the result comes from the coordinator's cache.
  fs::remove_all(root_ + "/bazel-base/execroot/distcc_cuda_bazel_e2e/bazel-out");
  fs::remove_all(root_ + "/bazel-base/action_cache");
  ProcessResult second = Build("//:kernel");
  ASSERT_EQ(second.exit_code, 0) << second.stderr_text;
  EXPECT_THAT(second.stderr_text, HasSubstr("1 remote cache hit"));
  EXPECT_TRUE(fs::exists(Object("kernel.o")));
}

TEST_F(BazelTest, AnActionTheArgumentModelRefusesRunsNowhere) {
  ProcessResult hostile = Build("//:hostile");
  EXPECT_NE(hostile.exit_code, 0);
  EXPECT_THAT(hostile.stderr_text, HasSubstr("-fplugin=/tmp/evil.so' is not allowed on a worker"));
  EXPECT_FALSE(fs::exists(Object("hostile.o")));
  EXPECT_THAT(cluster_->coordinator().Log(), Not(HasSubstr("hostile.o'")));
}

}  // namespace
}  // namespace distcc_cuda
