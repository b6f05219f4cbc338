// SPDX-License-Identifier: Apache-2.0
// The client side of another Remote Execution API engine (engine_channel.h,
// execution_client.h) against a scripted Capabilities and Execution service
// on loopback: the headers every call carries, the capability check, and
// an Execute followed to its end through a broken stream, an error and a
// cancel.
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/base/cancellation.h"
#include "common/reapi/engine_channel.h"
#include "common/reapi/execution_client.h"
#include "common/store/digest.h"
#include "gmock/gmock.h"
#include "google/longrunning/operations.pb.h"
#include "gtest/gtest.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;
using Operation = google::longrunning::Operation;
using Metadata = std::multimap<std::string, std::string>;

Metadata MetadataOf(const grpc::ServerContext& context) {
  Metadata metadata;
  for (const auto& [key, value] : context.client_metadata()) {
    metadata.emplace(std::string(key.data(), key.size()), std::string(value.data(), value.size()));
  }
  return metadata;
}

class ScriptedCapabilities final : public reapi::Capabilities::Service {
 public:
  grpc::Status GetCapabilities(grpc::ServerContext* context,
                               const reapi::GetCapabilitiesRequest* request,
                               reapi::ServerCapabilities* answer) override {
    absl::MutexLock lock(&mu_);
    metadata_ = MetadataOf(*context);
    instance_ = request->instance_name();
    if (!refusal_.ok()) return refusal_;
    answer->mutable_execution_capabilities()->set_exec_enabled(exec_enabled_);
    answer->mutable_execution_capabilities()->set_digest_function(digest_function_);
    for (reapi::DigestFunction::Value function : digest_functions_) {
      answer->mutable_execution_capabilities()->add_digest_functions(function);
    }
    return grpc::Status::OK;
  }

  void Answer(bool exec_enabled, reapi::DigestFunction::Value digest_function) {
    absl::MutexLock lock(&mu_);
    exec_enabled_ = exec_enabled;
    digest_function_ = digest_function;
  }
  // REAPI 2.3: the functions it executes with, `digest_function` among them.
  void AnswerFunctions(std::vector<reapi::DigestFunction::Value> functions) {
    absl::MutexLock lock(&mu_);
    digest_functions_ = std::move(functions);
  }
  void Refuse(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    refusal_ = std::move(status);
  }
  Metadata metadata() {
    absl::MutexLock lock(&mu_);
    return metadata_;
  }
  std::string instance() {
    absl::MutexLock lock(&mu_);
    return instance_;
  }

 private:
  absl::Mutex mu_;
  bool exec_enabled_ ABSL_GUARDED_BY(mu_) = true;
  reapi::DigestFunction::Value digest_function_ ABSL_GUARDED_BY(mu_) =
      reapi::DigestFunction::SHA256;
  std::vector<reapi::DigestFunction::Value> digest_functions_ ABSL_GUARDED_BY(mu_);
  grpc::Status refusal_ ABSL_GUARDED_BY(mu_);
  Metadata metadata_ ABSL_GUARDED_BY(mu_);
  std::string instance_ ABSL_GUARDED_BY(mu_);
};

// What the scripted Execute does with its one call.
enum class Script {
  kDone,           // a done Operation carrying `response_`
  kBreakThenWait,  // a named Operation not done, then UNAVAILABLE; WaitExecution answers
  kError,          // a done Operation carrying `error_`
  kRefuse,         // the call fails at once with `error_`
  kBlock,          // a named Operation not done, then waits until the client cancels
};

class ScriptedExecution final : public reapi::Execution::Service {
 public:
  grpc::Status Execute(grpc::ServerContext* context, const reapi::ExecuteRequest* request,
                       grpc::ServerWriter<Operation>* writer) override {
    Script script;
    {
      absl::MutexLock lock(&mu_);
      ++executes_;
      execute_metadata_ = MetadataOf(*context);
      last_request_ = *request;
      script = script_;
    }
    Operation operation;
    operation.set_name("operations/exec-1");
    switch (script) {
      case Script::kDone:
        return WriteDone(writer);
      case Script::kBreakThenWait:
        operation.set_done(false);
        writer->Write(operation);
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the engine restarted");
      case Script::kError: {
        absl::MutexLock lock(&mu_);
        operation.set_done(true);
        operation.mutable_error()->set_code(error_.error_code());
        operation.mutable_error()->set_message(error_.error_message());
        writer->Write(operation);
        return grpc::Status::OK;
      }
      case Script::kRefuse: {
        absl::MutexLock lock(&mu_);
        return error_;
      }
      case Script::kBlock: {
        operation.set_done(false);
        writer->Write(operation);
        const absl::Time give_up = absl::Now() + absl::Seconds(10);
        while (!context->IsCancelled() && absl::Now() < give_up)
          absl::SleepFor(absl::Milliseconds(10));
        absl::MutexLock lock(&mu_);
        saw_cancel_ = context->IsCancelled();
        blocked_done_ = true;
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the test gave up waiting");
      }
    }
    return grpc::Status(grpc::StatusCode::INTERNAL, "no script");
  }

  grpc::Status WaitExecution(grpc::ServerContext* context,
                             const reapi::WaitExecutionRequest* request,
                             grpc::ServerWriter<Operation>* writer) override {
    {
      absl::MutexLock lock(&mu_);
      waited_.push_back(request->name());
      wait_metadata_ = MetadataOf(*context);
    }
    return WriteDone(writer);
  }

  void Run(Script script) {
    absl::MutexLock lock(&mu_);
    script_ = script;
  }
  void Fail(grpc::Status error) {
    absl::MutexLock lock(&mu_);
    error_ = std::move(error);
  }
  void Respond(reapi::ExecuteResponse response) {
    absl::MutexLock lock(&mu_);
    response_ = std::move(response);
  }
  int executes() {
    absl::MutexLock lock(&mu_);
    return executes_;
  }
  std::vector<std::string> waited() {
    absl::MutexLock lock(&mu_);
    return waited_;
  }
  reapi::ExecuteRequest last_request() {
    absl::MutexLock lock(&mu_);
    return last_request_;
  }
  Metadata execute_metadata() {
    absl::MutexLock lock(&mu_);
    return execute_metadata_;
  }
  Metadata wait_metadata() {
    absl::MutexLock lock(&mu_);
    return wait_metadata_;
  }
  // Waits (at most 10 s) for a blocked Execute to end; whether it ended
  // because the client cancelled it.
  bool AwaitBlockedCancelled() {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return blocked_done_; };
    mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10));
    return saw_cancel_;
  }

 private:
  grpc::Status WriteDone(grpc::ServerWriter<Operation>* writer) {
    Operation operation;
    operation.set_name("operations/exec-1");
    operation.set_done(true);
    {
      absl::MutexLock lock(&mu_);
      operation.mutable_response()->PackFrom(response_);
    }
    writer->Write(operation);
    return grpc::Status::OK;
  }

  absl::Mutex mu_;
  Script script_ ABSL_GUARDED_BY(mu_) = Script::kDone;
  grpc::Status error_ ABSL_GUARDED_BY(mu_);
  reapi::ExecuteResponse response_ ABSL_GUARDED_BY(mu_);
  int executes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> waited_ ABSL_GUARDED_BY(mu_);
  reapi::ExecuteRequest last_request_ ABSL_GUARDED_BY(mu_);
  Metadata execute_metadata_ ABSL_GUARDED_BY(mu_);
  Metadata wait_metadata_ ABSL_GUARDED_BY(mu_);
  bool saw_cancel_ ABSL_GUARDED_BY(mu_) = false;
  bool blocked_done_ ABSL_GUARDED_BY(mu_) = false;
};

class EngineClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&capabilities_);
    builder.RegisterService(&execution_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);
    engine_.host_port = absl::StrCat("127.0.0.1:", port);
    channel_ = OpenEngineChannel(engine_, std::nullopt,
                                 {{"x-buildbuddy-api-key", "SECRET"}, {"x-tenant", "team-a"}});
    action_.set_hash(DigestOf("an action").hash);
    action_.set_size_bytes(DigestOf("an action").size_bytes);
    reapi::ExecuteResponse response;
    response.mutable_result()->set_exit_code(0);
    response.mutable_result()->set_stdout_raw("compiled");
    response.set_cached_result(true);
    execution_.Respond(response);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  }

  ScriptedCapabilities capabilities_;
  ScriptedExecution execution_;
  std::unique_ptr<grpc::Server> server_;  // after the services: shut down first
  EngineAddress engine_;
  std::shared_ptr<grpc::Channel> channel_;
  reapi::Digest action_;
};

TEST_F(EngineClientTest, HeadersArriveWithEveryCall) {
  ASSERT_TRUE(CheckEngineExecutes(channel_, "main", engine_.Url(), absl::Seconds(10)).ok());
  Metadata metadata = capabilities_.metadata();
  EXPECT_EQ(metadata.count("x-buildbuddy-api-key"), 1u);
  EXPECT_EQ(metadata.find("x-buildbuddy-api-key")->second, "SECRET");
  EXPECT_EQ(metadata.count("x-tenant"), 1u);
  EXPECT_EQ(metadata.find("x-tenant")->second, "team-a");
  EXPECT_EQ(capabilities_.instance(), "main");

  // The Execute stream and the WaitExecution after a break carry them too.
  execution_.Run(Script::kBreakThenWait);
  ReapiExecutionClient client(channel_, "main");
  CancelToken cancel;
  ASSERT_TRUE(client.Execute(action_, cancel).ok());
  for (const Metadata& call : {execution_.execute_metadata(), execution_.wait_metadata()}) {
    ASSERT_EQ(call.count("x-buildbuddy-api-key"), 1u);
    EXPECT_EQ(call.find("x-buildbuddy-api-key")->second, "SECRET");
    ASSERT_EQ(call.count("x-tenant"), 1u);
    EXPECT_EQ(call.find("x-tenant")->second, "team-a");
  }
}

TEST_F(EngineClientTest, NoHeadersGivenNoneSent) {
  auto plain = OpenEngineChannel(engine_, std::nullopt, {});
  ASSERT_TRUE(CheckEngineExecutes(plain, "", engine_.Url(), absl::Seconds(10)).ok());
  EXPECT_EQ(capabilities_.metadata().count("x-buildbuddy-api-key"), 0u);
  EXPECT_EQ(capabilities_.metadata().count("x-tenant"), 0u);
}

TEST_F(EngineClientTest, CheckPassesForAnEngineThatExecutesWithSha256) {
  capabilities_.Answer(true, reapi::DigestFunction::SHA256);
  EXPECT_TRUE(CheckEngineExecutes(channel_, "main", engine_.Url(), absl::Seconds(10)).ok());
}

TEST_F(EngineClientTest, CheckRefusesACacheOnlyEngine) {
  capabilities_.Answer(false, reapi::DigestFunction::SHA256);
  absl::Status status = CheckEngineExecutes(channel_, "main", engine_.Url(), absl::Seconds(10));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("exec_enabled"));
  EXPECT_THAT(status.message(), HasSubstr(engine_.Url()));
  EXPECT_THAT(status.message(), HasSubstr("'main'"));
}

TEST_F(EngineClientTest, CheckRefusesAnotherDigestFunction) {
  capabilities_.Answer(true, reapi::DigestFunction::BLAKE3);
  absl::Status status = CheckEngineExecutes(channel_, "main", engine_.Url(), absl::Seconds(10));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("SHA-256"));
}

// REAPI 2.3 engines list every function they take in digest_functions;
// the legacy digest_function names one of them, not necessarily SHA-256:
// the list is read first.
TEST_F(EngineClientTest, CheckReadsTheListOfDigestFunctions) {
  capabilities_.Answer(true, reapi::DigestFunction::BLAKE3);
  capabilities_.AnswerFunctions({reapi::DigestFunction::BLAKE3, reapi::DigestFunction::SHA256});
  absl::Status status = CheckEngineExecutes(channel_, "main", engine_.Url(), absl::Seconds(10));
  EXPECT_TRUE(status.ok()) << status;
}

TEST_F(EngineClientTest, CheckReturnsTheEngineRefusal) {
  capabilities_.Refuse(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no API key"));
  absl::Status status = CheckEngineExecutes(channel_, "main", engine_.Url(), absl::Seconds(10));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
  EXPECT_THAT(status.message(), HasSubstr("no API key"));
}

TEST_F(EngineClientTest, CheckSaysUnavailableForAPortNothingListensOn) {
  // A port bound but not listening: refused, and no one else can take it.
  int socket_fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(socket_fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ASSERT_EQ(bind(socket_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(socket_fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  EngineAddress nowhere{absl::StrCat("127.0.0.1:", ntohs(address.sin_port)), false};

  const absl::Time start = absl::Now();
  absl::Status status = CheckEngineExecutes(OpenEngineChannel(nowhere, std::nullopt, {}), "",
                                            nowhere.Url(), absl::Milliseconds(500));
  const absl::Duration took = absl::Now() - start;
  close(socket_fd);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr(nowhere.Url()));
  EXPECT_THAT(status.message(), HasSubstr("500ms"));
  EXPECT_LT(took, absl::Seconds(5));
}

TEST_F(EngineClientTest, ExecuteReturnsTheResponseOfADoneOperation) {
  execution_.Run(Script::kDone);
  ReapiExecutionClient client(channel_, "main");
  CancelToken cancel;
  absl::StatusOr<reapi::ExecuteResponse> response = client.Execute(action_, cancel);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->result().exit_code(), 0);
  EXPECT_EQ(response->result().stdout_raw(), "compiled");
  EXPECT_TRUE(response->cached_result());
  EXPECT_EQ(execution_.last_request().instance_name(), "main");
  EXPECT_EQ(execution_.last_request().action_digest().hash(), action_.hash());
  EXPECT_EQ(execution_.last_request().action_digest().size_bytes(), action_.size_bytes());
  EXPECT_TRUE(execution_.waited().empty());
}

TEST_F(EngineClientTest, ExecuteReturnsACompileFailureAsAResponse) {
  reapi::ExecuteResponse failed;
  failed.mutable_result()->set_exit_code(2);
  failed.mutable_result()->set_stderr_raw("k.cu(3): error: expected a ';'");
  execution_.Respond(failed);
  ReapiExecutionClient client(channel_, "main");
  CancelToken cancel;
  absl::StatusOr<reapi::ExecuteResponse> response = client.Execute(action_, cancel);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->result().exit_code(), 2);
  EXPECT_THAT(response->result().stderr_raw(), HasSubstr("expected a ';'"));
}

TEST_F(EngineClientTest, ExecuteFollowsABrokenStreamWithWaitExecution) {
  execution_.Run(Script::kBreakThenWait);
  ReapiExecutionClient client(channel_, "main");
  CancelToken cancel;
  const absl::Time start = absl::Now();
  absl::StatusOr<reapi::ExecuteResponse> response = client.Execute(action_, cancel);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->result().exit_code(), 0);
  EXPECT_EQ(response->result().stdout_raw(), "compiled");
  EXPECT_THAT(execution_.waited(), ::testing::ElementsAre("operations/exec-1"));
  EXPECT_EQ(execution_.executes(), 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST_F(EngineClientTest, ExecuteReturnsTheErrorOfADoneOperation) {
  execution_.Run(Script::kError);
  execution_.Fail(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "missing blobs/abc/1"));
  ReapiExecutionClient client(channel_, "main");
  CancelToken cancel;
  absl::StatusOr<reapi::ExecuteResponse> response = client.Execute(action_, cancel);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(response.status().message(), HasSubstr("missing blobs/abc/1"));
  EXPECT_TRUE(execution_.waited().empty());
}

// An engine's done Operation whose `error` is set but says OK (code 0) is
// not a result: it comes back as an error (an OK status in a StatusOr would
// abort the client).
TEST_F(EngineClientTest, ExecuteRefusesADoneOperationWhoseErrorSaysOk) {
  execution_.Run(Script::kError);
  execution_.Fail(grpc::Status(grpc::StatusCode::OK, ""));
  ReapiExecutionClient client(channel_, "main");
  CancelToken cancel;
  absl::StatusOr<reapi::ExecuteResponse> response = client.Execute(action_, cancel);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(response.status().message(), HasSubstr("says OK"));
}

TEST_F(EngineClientTest, ExecuteReturnsARefusedCallWithoutWaiting) {
  execution_.Run(Script::kRefuse);
  execution_.Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no such action"));
  ReapiExecutionClient client(channel_, "main");
  CancelToken cancel;
  absl::StatusOr<reapi::ExecuteResponse> response = client.Execute(action_, cancel);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(response.status().message(), HasSubstr("no such action"));
  EXPECT_TRUE(execution_.waited().empty());
}

TEST_F(EngineClientTest, ExecuteEndsCancelledWhenItsTokenIs) {
  execution_.Run(Script::kBlock);
  ReapiExecutionClient client(channel_, "main");
  CancelToken cancel;
  std::thread canceller([&cancel] {
    absl::SleepFor(absl::Milliseconds(200));
    cancel.Cancel("the build was interrupted");
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<reapi::ExecuteResponse> response = client.Execute(action_, cancel);
  const absl::Duration took = absl::Now() - start;
  canceller.join();
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kCancelled) << response.status();
  EXPECT_THAT(response.status().message(), HasSubstr("the build was interrupted"));
  EXPECT_LT(took, absl::Seconds(5));
  // The engine saw the call cancelled, and was not asked to wait for it.
  EXPECT_TRUE(execution_.AwaitBlockedCancelled());
  EXPECT_TRUE(execution_.waited().empty());
}

TEST_F(EngineClientTest, ExecuteCancelledBeforeItStarts) {
  execution_.Run(Script::kDone);
  ReapiExecutionClient client(channel_, "main");
  CancelToken cancel;
  cancel.Cancel("stopped early");
  absl::StatusOr<reapi::ExecuteResponse> response = client.Execute(action_, cancel);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kCancelled) << response.status();
}

}  // namespace
}  // namespace distcc_cuda
