// SPDX-License-Identifier: Apache-2.0
// The coordinator's Remote Execution API, spoken to as Bazel speaks it
// (issue 33): blobs in through the CAS and ByteStream, an Action executed on
// a real worker (the fake nvcc), its result served from the action cache,
// and what may not run refused with a status that says why.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "build/bazel/remote/execution/v2/remote_execution.grpc.pb.h"
#include "common/base/files.h"
#include "common/store/digest.h"
#include "common/transport/certificates.h"
#include "common/transport/tls_credentials.h"
#include "coordinator/coordinator.h"
#include "distcc_cuda/v1/build.grpc.pb.h"
#include "distcc_cuda/v1/rpc_status.pb.h"
#include "gmock/gmock.h"
#include "google/bytestream/bytestream.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/test_certificates.h"
#include "tests/support/test_paths.h"
#include "worker/worker.h"

namespace distcc_cuda {
namespace {

namespace reapi = ::build::bazel::remote::execution::v2;
using ::testing::HasSubstr;

reapi::Digest DigestFor(const std::string& bytes) {
  Digest digest = DigestOf(bytes);
  reapi::Digest out;
  out.set_hash(digest.hash);
  out.set_size_bytes(digest.size_bytes);
  return out;
}

class ReapiServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::NewTempDir("reapi-");
    coordinator::CoordinatorOptions options;
    options.state_dir = root_ + "/coordinator";
    options.reapi_listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    auto started = coordinator::Coordinator::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(*started);
    ASSERT_NE(coordinator_->reapi_port(), 0);
    worker::WorkerOptions worker;
    worker.coordinator_address = coordinator_->address();
    worker.name = "reapi-worker";
    worker.slots = 1;
    worker.memory_cap_bytes = int64_t{512} << 20;
    worker.nvcc_path = testing::FakeNvccPath();
    worker.work_dir = root_ + "/worker";
    auto joined = worker::Worker::Start(worker);
    ASSERT_TRUE(joined.ok()) << joined.status();
    worker_ = std::move(*joined);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", coordinator_->reapi_port()),
                                   grpc::InsecureChannelCredentials());
  }

  // Stores `bytes` through BatchUpdateBlobs, as a client does small blobs.
  reapi::Digest Upload(const std::string& bytes) {
    reapi::BatchUpdateBlobsRequest request;
    auto* blob = request.add_requests();
    *blob->mutable_digest() = DigestFor(bytes);
    blob->set_data(bytes);
    reapi::BatchUpdateBlobsResponse response;
    grpc::ClientContext context;
    grpc::Status status = reapi::ContentAddressableStorage::NewStub(channel_)->BatchUpdateBlobs(
        &context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.responses_size(), 1);
    if (response.responses_size() == 1) {
      EXPECT_EQ(response.responses(0).status().code(), 0);
    }
    return DigestFor(bytes);
  }

  // An Action that compiles `source` (uploaded unless `upload_source` is
  // false) as k.cu into out/k.o with `argv`, all but the source uploaded.
  reapi::Digest CompileAction(const std::string& source, std::vector<std::string> argv = {},
                              bool upload_source = true, const std::string& memory = "") {
    if (argv.empty()) argv = {"/usr/local/cuda/bin/nvcc", "-c", "k.cu", "-o", "out/k.o"};
    reapi::Directory root;
    auto* file = root.add_files();
    file->set_name("k.cu");
    *file->mutable_digest() = upload_source ? Upload(source) : DigestFor(source);
    reapi::Command command;
    for (const std::string& argument : argv) command.add_arguments(argument);
    command.add_output_files("out/k.o");
    auto* path = command.add_environment_variables();
    path->set_name("PATH");
    path->set_value("/usr/bin:/bin");
    reapi::Action action;
    if (!memory.empty()) {
      auto* property = action.mutable_platform()->add_properties();
      property->set_name("memory");
      property->set_value(memory);
    }
    *action.mutable_command_digest() = Upload(command.SerializeAsString());
    *action.mutable_input_root_digest() = Upload(root.SerializeAsString());
    return Upload(action.SerializeAsString());
  }

  // Executes `action` and returns the last operation of the stream, whose
  // response (if done) is in `response`.
  google::longrunning::Operation Execute(const reapi::Digest& action,
                                         reapi::ExecuteResponse* response,
                                         bool skip_cache_lookup = false) {
    reapi::ExecuteRequest request;
    *request.mutable_action_digest() = action;
    request.set_skip_cache_lookup(skip_cache_lookup);
    grpc::ClientContext context;
    auto stream = reapi::Execution::NewStub(channel_)->Execute(&context, request);
    google::longrunning::Operation operation, last;
    while (stream->Read(&operation)) last = operation;
    grpc::Status status = stream->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(last.done());
    EXPECT_TRUE(last.response().UnpackTo(response));
    return last;
  }

  std::string ReadBlob(const reapi::Digest& digest) {
    google::bytestream::ReadRequest request;
    request.set_resource_name(absl::StrCat("main/blobs/", digest.hash(), "/", digest.size_bytes()));
    grpc::ClientContext context;
    auto stream = google::bytestream::ByteStream::NewStub(channel_)->Read(&context, request);
    std::string bytes;
    google::bytestream::ReadResponse chunk;
    while (stream->Read(&chunk)) bytes += chunk.data();
    grpc::Status status = stream->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    return bytes;
  }

  // The coordinator's own status.
  v1::ClusterStatus Status() {
    v1::ClusterStatus status;
    grpc::ClientContext context;
    auto channel = grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials());
    EXPECT_TRUE(v1::BuildService::NewStub(channel)
                    ->GetClusterStatus(&context, v1::GetClusterStatusRequest(), &status)
                    .ok());
    return status;
  }

  // The builds the coordinator has run or runs.
  int BuildsSeen() { return Status().builds_size(); }

  // The coordinator's metrics, scraped.
  testing::ScrapedMetrics Metrics() {
    absl::StatusOr<std::string> text = testing::HttpGet(coordinator_->metrics_url() + "/metrics");
    EXPECT_TRUE(text.ok()) << text.status();
    absl::StatusOr<testing::ScrapedMetrics> parsed =
        testing::ParsePrometheusText(text.value_or(""));
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    return parsed.value_or(testing::ScrapedMetrics{});
  }

  std::string root_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::unique_ptr<worker::Worker> worker_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(ReapiServiceTest, CapabilitiesSayWhatBazelChecks) {
  reapi::ServerCapabilities capabilities;
  grpc::ClientContext context;
  ASSERT_TRUE(reapi::Capabilities::NewStub(channel_)
                  ->GetCapabilities(&context, reapi::GetCapabilitiesRequest(), &capabilities)
                  .ok());
  EXPECT_TRUE(capabilities.execution_capabilities().exec_enabled());
  EXPECT_EQ(capabilities.execution_capabilities().digest_function(), reapi::DigestFunction::SHA256);
  EXPECT_THAT(capabilities.cache_capabilities().digest_functions(),
              ::testing::ElementsAre(reapi::DigestFunction::SHA256));
  EXPECT_FALSE(
      capabilities.cache_capabilities().action_cache_update_capabilities().update_enabled());
  EXPECT_EQ(capabilities.low_api_version().major(), 2);
  EXPECT_EQ(capabilities.high_api_version().major(), 2);
}

TEST_F(ReapiServiceTest, AnActionRunsOnAWorkerAndIsThenACacheHit) {
  const std::string source = "// reapi: compiled once\n__global__ void k() {}\n";
  reapi::Digest action = CompileAction(source);
  reapi::ExecuteResponse response;
  Execute(action, &response);
  ASSERT_EQ(response.status().code(), 0) << response.status().message();
  EXPECT_FALSE(response.cached_result());
  ASSERT_EQ(response.result().output_files_size(), 1);
  EXPECT_EQ(response.result().exit_code(), 0);
  EXPECT_EQ(response.result().output_files(0).path(), "out/k.o");
  EXPECT_EQ(response.result().execution_metadata().worker(), "reapi-worker");
  // The object is the fake nvcc's, with the source it compiled inside.
  std::string object = ReadBlob(response.result().output_files(0).digest());
  EXPECT_THAT(object, HasSubstr("reapi: compiled once"));
  EXPECT_EQ(DigestFor(object).hash(), response.result().output_files(0).digest().hash());

  reapi::GetActionResultRequest lookup;
  *lookup.mutable_action_digest() = action;
  reapi::ActionResult cached;
  grpc::ClientContext context;
  grpc::Status found =
      reapi::ActionCache::NewStub(channel_)->GetActionResult(&context, lookup, &cached);
  ASSERT_TRUE(found.ok()) << found.error_message();
  EXPECT_EQ(cached.output_files(0).digest().hash(),
            response.result().output_files(0).digest().hash());

  reapi::ExecuteResponse again;
  Execute(action, &again);
  EXPECT_TRUE(again.cached_result());
  EXPECT_EQ(again.result().output_files(0).digest().hash(),
            response.result().output_files(0).digest().hash());
  EXPECT_EQ(BuildsSeen(), 1);  // the second Execute compiled nothing
  testing::ScrapedMetrics metrics = Metrics();
  const std::string executions = "distcc_cuda_reapi_executions_total";
  EXPECT_EQ(metrics.Sum(executions, "outcome=\"compiled\""), 1);
  EXPECT_EQ(metrics.Sum(executions, "outcome=\"cached\""), 1);
  EXPECT_EQ(metrics.Sum("distcc_cuda_reapi_action_cache_lookups_total", "result=\"hit\""), 1);
}

TEST_F(ReapiServiceTest, SkipCacheLookupCompilesAgain) {
  reapi::Digest action = CompileAction("// reapi: compiled twice\n");
  reapi::ExecuteResponse first, second;
  Execute(action, &first);
  Execute(action, &second, /*skip_cache_lookup=*/true);
  EXPECT_FALSE(second.cached_result());
  EXPECT_EQ(second.result().exit_code(), 0);
  EXPECT_EQ(BuildsSeen(), 2);
}

TEST_F(ReapiServiceTest, AMalformedActionDigestIsRefusedAtOnce) {
  reapi::ExecuteRequest request;
  request.mutable_action_digest()->set_hash("not-a-digest");
  grpc::ClientContext context;
  auto stream = reapi::Execution::NewStub(channel_)->Execute(&context, request);
  google::longrunning::Operation operation;
  EXPECT_FALSE(stream->Read(&operation));
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("the action's digest"));
}

TEST_F(ReapiServiceTest, ClientsDoNotWriteTheActionCache) {
  reapi::UpdateActionResultRequest update;
  *update.mutable_action_digest() = DigestFor("an action");
  reapi::ActionResult result;
  grpc::ClientContext context;
  grpc::Status status =
      reapi::ActionCache::NewStub(channel_)->UpdateActionResult(&context, update, &result);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  reapi::GetActionResultRequest lookup;
  *lookup.mutable_action_digest() = DigestFor("an action");
  grpc::ClientContext lookup_context;
  EXPECT_EQ(reapi::ActionCache::NewStub(channel_)
                ->GetActionResult(&lookup_context, lookup, &result)
                .error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(ReapiServiceTest, AMissingInputIsNamedSoTheClientUploadsIt) {
  const std::string source = "// reapi: never uploaded\n";
  reapi::Digest action = CompileAction(source, {}, /*upload_source=*/false);
  reapi::ExecuteResponse response;
  Execute(action, &response);
  ASSERT_EQ(response.status().code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_EQ(response.status().details_size(), 1);
  // google.rpc.PreconditionFailure, field for field (rpc_status.proto).
  EXPECT_EQ(response.status().details(0).type_url(),
            "type.googleapis.com/google.rpc.PreconditionFailure");
  v1::PreconditionFailure failure;
  ASSERT_TRUE(failure.ParseFromString(response.status().details(0).value()));
  ASSERT_GE(failure.violations_size(), 1);
  EXPECT_EQ(failure.violations(0).type(), "MISSING");
  reapi::Digest missing = DigestFor(source);
  EXPECT_EQ(failure.violations(0).subject(),
            absl::StrCat("blobs/", missing.hash(), "/", missing.size_bytes()));
}

TEST_F(ReapiServiceTest, AHostileCommandIsRefusedAndNothingRuns) {
  const std::string source = "// reapi: hostile\n";
  reapi::ExecuteResponse plugin;
  Execute(CompileAction(
              source, {"nvcc", "-Xcompiler=-fplugin=/tmp/evil.so", "-c", "k.cu", "-o", "out/k.o"}),
          &plugin);
  EXPECT_EQ(plugin.status().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(plugin.status().message(), HasSubstr("-fplugin"));
  reapi::ExecuteResponse shell;
  Execute(CompileAction(source, {"/bin/sh", "-c", "nvcc -c k.cu -o out/k.o"}), &shell);
  EXPECT_EQ(shell.status().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(shell.status().message(), HasSubstr("/bin/sh"));
  EXPECT_EQ(BuildsSeen(), 0);
  EXPECT_EQ(Metrics().Sum("distcc_cuda_reapi_executions_total", "outcome=\"refused\""), 2);
}

TEST_F(ReapiServiceTest, AMemoryPropertyIsTheFirstPrediction) {
  reapi::Digest action =
      CompileAction("// reapi: hinted\n// FAKE_SLEEP_MS=1500\n", {}, true, "300MiB");
  std::thread execute([&] {
    reapi::ExecuteResponse response;
    Execute(action, &response);
    EXPECT_EQ(response.result().exit_code(), 0);
  });
  // While it runs, the scheduler shows what it holds for it.
  v1::ClusterStatus status;
  for (int i = 0; i < 500 && status.running_size() == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    status = Status();
  }
  execute.join();
  ASSERT_EQ(status.running_size(), 1);
  EXPECT_EQ(status.running(0).predicted_peak_bytes(), int64_t{300} << 20);
  EXPECT_EQ(status.running(0).prediction_source(), "the action's platform");

  reapi::ExecuteResponse refused;
  Execute(CompileAction("// reapi: bad hint\n", {}, true, "lots"), &refused);
  EXPECT_EQ(refused.status().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.status().message(), HasSubstr("'memory' is 'lots'"));
}

TEST_F(ReapiServiceTest, WaitExecutionFollowsAnOperationItsCallerLeft) {
  reapi::Digest action = CompileAction("// reapi: slow\n// FAKE_SLEEP_MS=1500\n");
  reapi::ExecuteRequest request;
  *request.mutable_action_digest() = action;
  std::string name;
  {
    grpc::ClientContext context;
    auto stream = reapi::Execution::NewStub(channel_)->Execute(&context, request);
    google::longrunning::Operation first;
    ASSERT_TRUE(stream->Read(&first));
    EXPECT_FALSE(first.done());
    name = first.name();
    context.TryCancel();
    while (stream->Read(&first)) {
    }
    stream->Finish();
  }
  ASSERT_THAT(name, HasSubstr("operations/"));
  reapi::WaitExecutionRequest wait;
  wait.set_name(name);
  grpc::ClientContext context;
  auto stream = reapi::Execution::NewStub(channel_)->WaitExecution(&context, wait);
  google::longrunning::Operation operation, last;
  while (stream->Read(&operation)) last = operation;
  ASSERT_TRUE(stream->Finish().ok());
  ASSERT_TRUE(last.done());
  reapi::ExecuteResponse response;
  ASSERT_TRUE(last.response().UnpackTo(&response));
  EXPECT_EQ(response.result().exit_code(), 0);
  EXPECT_EQ(response.result().output_files_size(), 1);

  wait.set_name("operations/never-started");
  grpc::ClientContext unknown_context;
  auto unknown = reapi::Execution::NewStub(channel_)->WaitExecution(&unknown_context, wait);
  while (unknown->Read(&operation)) {
  }
  EXPECT_EQ(unknown->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ReapiServiceTest, AMemoryKillComesBackAsExit137AndIsNotCached) {
  reapi::Digest action = CompileAction("// reapi: too big\n// FAKE_TOUCH_MIB=900\n");
  reapi::ExecuteResponse response;
  Execute(action, &response);
  ASSERT_EQ(response.status().code(), 0) << response.status().message();
  EXPECT_EQ(response.result().exit_code(), 137);
  ASSERT_TRUE(response.result().has_stderr_digest());
  EXPECT_THAT(ReadBlob(response.result().stderr_digest()), HasSubstr("killed for memory"));
  reapi::GetActionResultRequest lookup;
  *lookup.mutable_action_digest() = action;
  reapi::ActionResult cached;
  grpc::ClientContext context;
  EXPECT_EQ(reapi::ActionCache::NewStub(channel_)
                ->GetActionResult(&context, lookup, &cached)
                .error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// Under mutual TLS the REAPI address takes the coordinator's roles: a
// client certificate may use it, a worker's may not, and a caller with no
// certificate does not get through the handshake.
TEST(ReapiTlsTest, OnlyAClientCertificateMayUseTheRemoteExecutionApi) {
  CertificateAuthority ca = *NewCertificateAuthority("reapi-tls");
  coordinator::CoordinatorOptions options;
  options.state_dir = testing::NewTempDir("reapi-tls-") + "/coordinator";
  options.tls = testing::MaterialForTest(ca, PeerRole::kCoordinator, "coordinator", {"127.0.0.1"});
  options.reapi_listen = "127.0.0.1:0";
  auto started = coordinator::Coordinator::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*started)->reapi_port());
  auto capabilities = [&](const std::optional<TlsMaterial>& tls) {
    reapi::ServerCapabilities response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return reapi::Capabilities::NewStub(OpenChannel(address, tls))
        ->GetCapabilities(&context, reapi::GetCapabilitiesRequest(), &response);
  };
  grpc::Status client = capabilities(testing::MaterialForTest(ca, PeerRole::kClient, "alice"));
  EXPECT_TRUE(client.ok()) << client.error_message();
  grpc::Status worker = capabilities(testing::MaterialForTest(ca, PeerRole::kWorker, "gpu-1"));
  EXPECT_EQ(worker.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  grpc::Status none = capabilities(std::nullopt);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(ReapiListenTest, AReachableAddressWithoutTlsIsRefused) {
  coordinator::CoordinatorOptions options;
  options.state_dir = testing::NewTempDir("reapi-listen-") + "/coordinator";
  options.reapi_listen = "0.0.0.0:0";
  auto started = coordinator::Coordinator::Start(options);
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(started.status().message(), HasSubstr("--tls-ca"));
}

}  // namespace
}  // namespace distcc_cuda
