// SPDX-License-Identifier: Apache-2.0
// Mutual TLS with roles: a real coordinator on 127.0.0.1:0 with a certificate
// from a test CA, called by peers holding certificates of each role, of
// another CA, or none. Also the refusal to serve a reachable address in the
// clear.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <sstream>

#include "client/commands.h"
#include "client/stages/build_command.h"
#include "common/base/files.h"
#include "common/transport/certificates.h"
#include "common/transport/tls_credentials.h"
#include "coordinator/coordinator.h"
#include "distcc_cuda/v1/build.grpc.pb.h"
#include "distcc_cuda/v1/cas.grpc.pb.h"
#include "distcc_cuda/v1/worker.grpc.pb.h"
#include "tests/support/test_certificates.h"
#include "tests/support/test_paths.h"
#include "worker/worker.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(10);
}

v1::RegisterWorkerRequest Registration(const std::string& name) {
  v1::RegisterWorkerRequest request;
  request.set_name(name);
  request.mutable_toolchain()->set_digest("toolchain-digest-for-tls-test");
  request.set_memory_cap_bytes(int64_t{1} << 30);
  request.set_slots(1);
  request.set_reads_input_trees(true);
  return request;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::NewTempDir("tls-");
    ca_ = Must(NewCertificateAuthority("tls-test"));
    coordinator_tls_ = Material(PeerRole::kCoordinator, "coordinator", {"127.0.0.1"});
    client_ = Material(PeerRole::kClient, "alice");
    worker_ = Material(PeerRole::kWorker, "gpu-1");
    coordinator::CoordinatorOptions options;
    options.state_dir = root_ + "/coordinator";
    options.tls = coordinator_tls_;
    auto started = coordinator::Coordinator::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(*started);
    address_ = coordinator_->address();
  }

  template <typename T>
  static T Must(absl::StatusOr<T> value) {
    EXPECT_TRUE(value.ok()) << value.status();
    return value.ok() ? *std::move(value) : T{};
  }

  TlsMaterial Material(PeerRole role, const std::string& name,
                       std::vector<std::string> hosts = {}) const {
    return testing::MaterialForTest(ca_, role, name, std::move(hosts));
  }

  // Asks for the cluster status over `channel`.
  grpc::Status ClusterStatus(const std::shared_ptr<grpc::Channel>& channel,
                             v1::ClusterStatus* status = nullptr) {
    v1::ClusterStatus ignored;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return v1::BuildService::NewStub(channel)->GetClusterStatus(&context, {},
                                                                status ? status : &ignored);
  }

  grpc::Status Register(const std::shared_ptr<grpc::Channel>& channel, const std::string& name,
                        v1::RegisterWorkerResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return v1::WorkerService::NewStub(channel)->RegisterWorker(&context, Registration(name),
                                                               response);
  }

  std::string root_;
  CertificateAuthority ca_;
  TlsMaterial coordinator_tls_;
  TlsMaterial client_;
  TlsMaterial worker_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::string address_;
};

TEST_F(TlsTest, ClientCertificateReadsTheClusterStatus) {
  grpc::Status status = ClusterStatus(OpenChannel(address_, client_));
  EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
}

TEST_F(TlsTest, WorkerCertificateRegistersAWorker) {
  auto channel = OpenChannel(address_, worker_);
  v1::RegisterWorkerResponse response;
  grpc::Status status = Register(channel, "gpu-1", &response);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  EXPECT_FALSE(response.worker_id().empty());
  v1::ClusterStatus cluster;
  ASSERT_TRUE(ClusterStatus(OpenChannel(address_, client_), &cluster).ok());
  ASSERT_EQ(cluster.workers_size(), 1);
  EXPECT_EQ(cluster.workers(0).name(), "gpu-1");
}

// A worker id answers only to the certificate that registered it: another
// worker's certificate cannot beat, lease or report for it (a stranger's
// heartbeat once re-queued real workers' units).
TEST_F(TlsTest, AnotherWorkersCertificateCannotUseAWorkersId) {
  v1::RegisterWorkerResponse registered;
  ASSERT_TRUE(Register(OpenChannel(address_, worker_), "gpu-1", &registered).ok());
  auto mallory =
      v1::WorkerService::NewStub(OpenChannel(address_, Material(PeerRole::kWorker, "mallory")));
  v1::HeartbeatRequest beat;
  beat.set_worker_id(registered.worker_id());
  v1::HeartbeatResponse beat_response;
  grpc::ClientContext beat_context;
  beat_context.set_deadline(Deadline());
  EXPECT_EQ(mallory->Heartbeat(&beat_context, beat, &beat_response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::LeaseTaskRequest lease;
  lease.set_worker_id(registered.worker_id());
  v1::LeaseTaskResponse lease_response;
  grpc::ClientContext lease_context;
  lease_context.set_deadline(Deadline());
  EXPECT_EQ(mallory->LeaseTask(&lease_context, lease, &lease_response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::ReportResultRequest report;
  report.set_worker_id(registered.worker_id());
  report.set_task_id("t0-00000000000000000000000000000000");
  v1::ReportResultResponse report_response;
  grpc::ClientContext report_context;
  report_context.set_deadline(Deadline());
  EXPECT_EQ(mallory->ReportResult(&report_context, report, &report_response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // The real worker's own heartbeat still counts.
  grpc::ClientContext own_context;
  own_context.set_deadline(Deadline());
  EXPECT_TRUE(v1::WorkerService::NewStub(OpenChannel(address_, worker_))
                  ->Heartbeat(&own_context, beat, &beat_response)
                  .ok());
}

TEST_F(TlsTest, PeerWithoutACertificateCannotConnect) {
  grpc::SslCredentialsOptions roots_only;
  roots_only.pem_root_certs = ca_.certificate_pem;
  auto channel = grpc::CreateChannel(address_, grpc::SslCredentials(roots_only));
  grpc::Status status = ClusterStatus(channel);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  // Nor in the clear.
  status = ClusterStatus(OpenChannel(address_, std::nullopt));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(TlsTest, ClientCertificateOfAnotherCaCannotConnect) {
  CertificateAuthority other = Must(NewCertificateAuthority("elsewhere"));
  IssueOptions options;
  options.name = "mallory";
  IssuedCertificate mallory = Must(IssueCertificate(other, options));
  // Mallory trusts our CA (so the coordinator's certificate passes) but holds
  // a certificate of hers.
  TlsMaterial material = FromIssued(ca_, mallory);
  grpc::Status status = ClusterStatus(OpenChannel(address_, material));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(TlsTest, ClientRefusesACoordinatorCertificateForAnotherHost) {
  // A second coordinator whose certificate names another host: dialled at
  // 127.0.0.1, the client must refuse it.
  coordinator::CoordinatorOptions options;
  options.state_dir = root_ + "/elsewhere";
  options.tls = Material(PeerRole::kCoordinator, "elsewhere", {"coordinator.example.com"});
  auto elsewhere = coordinator::Coordinator::Start(options);
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.status();
  grpc::Status status = ClusterStatus(OpenChannel((*elsewhere)->address(), client_));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  // The same call succeeds when the client expects that name: the host name
  // was the only thing wrong.
  grpc::SslCredentialsOptions credentials;
  credentials.pem_root_certs = client_.ca_pem;
  credentials.pem_private_key = client_.key_pem;
  credentials.pem_cert_chain = client_.certificate_pem;
  grpc::ChannelArguments arguments;
  arguments.SetSslTargetNameOverride("coordinator.example.com");
  status = ClusterStatus(grpc::CreateCustomChannel((*elsewhere)->address(),
                                                   grpc::SslCredentials(credentials), arguments));
  EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
}

TEST_F(TlsTest, WorkerCertificateCannotReadStatusOrSubmitBuilds) {
  auto channel = OpenChannel(address_, worker_);
  grpc::Status status = ClusterStatus(channel);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("a worker certificate (gpu-1) cannot read the cluster status; that needs "
                        "a client certificate"));

  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::SubmitBuildRequest request;
  request.set_build_name("from a worker");
  auto reader = v1::BuildService::NewStub(channel)->SubmitBuild(&context, request);
  v1::BuildEvent event;
  EXPECT_FALSE(reader->Read(&event)) << "a refused build sent an event";
  status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("cannot submit builds"));
}

// A build opened with more units to follow takes its parts only from the
// client whose certificate opened it; it ends with its stream.
TEST_F(TlsTest, OnlyTheClientThatOpenedABuildAddsPartsToIt) {
  v1::RegisterWorkerResponse registered;
  ASSERT_TRUE(Register(OpenChannel(address_, worker_), "gpu-1", &registered).ok());
  auto alice = v1::BuildService::NewStub(OpenChannel(address_, client_));
  grpc::ClientContext stream_context;
  v1::SubmitBuildRequest open;
  open.set_build_name("in parts");
  open.mutable_toolchain()->set_digest("toolchain-digest-for-tls-test");
  open.set_more_units_follow(true);
  auto reader = alice->SubmitBuild(&stream_context, open);
  v1::BuildEvent event;
  ASSERT_TRUE(reader->Read(&event));
  ASSERT_TRUE(event.has_accepted());
  const std::string build_id = event.accepted().build_id();

  auto add = [&](v1::BuildService::Stub& stub, const std::string& id, bool last) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::AddUnitsRequest part;
    part.set_build_id(id);
    part.set_workspace_root("/work");
    part.set_last(last);
    v1::AddUnitsResponse response;
    return stub.AddUnits(&context, part, &response);
  };
  auto bob = v1::BuildService::NewStub(OpenChannel(address_, Material(PeerRole::kClient, "bob")));
  grpc::Status status = add(*bob, build_id, true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("was submitted by another client"));
  auto worker = v1::BuildService::NewStub(OpenChannel(address_, worker_));
  EXPECT_EQ(add(*worker, build_id, true).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(add(*alice, "b-0-not-a-build", true).error_code(), grpc::StatusCode::NOT_FOUND);

  // Alice's empty last part ends the build: the stream says so and ends.
  status = add(*alice, build_id, true);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_TRUE(reader->Read(&event));
  ASSERT_TRUE(event.has_units_added());
  EXPECT_TRUE(event.units_added().last());
  ASSERT_TRUE(reader->Read(&event));
  ASSERT_TRUE(event.has_finished());
  EXPECT_FALSE(reader->Read(&event));
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(add(*alice, build_id, true).error_code(), grpc::StatusCode::NOT_FOUND)
      << "the build ended with its stream";
}

TEST_F(TlsTest, ClientCertificateCannotActAsAWorker) {
  auto channel = OpenChannel(address_, client_);
  v1::RegisterWorkerResponse registered;
  grpc::Status status = Register(channel, "impostor", &registered);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("a client certificate (alice) cannot register a worker"));
  EXPECT_TRUE(registered.worker_id().empty());

  auto stub = v1::WorkerService::NewStub(channel);
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::HeartbeatRequest request;
    request.set_worker_id("w-1");
    v1::HeartbeatResponse response;
    status = stub->Heartbeat(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  }
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::LeaseTaskRequest request;
    request.set_worker_id("w-1");
    request.set_wait_ms(0);
    v1::LeaseTaskResponse response;
    status = stub->LeaseTask(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  }
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::ReportResultRequest request;
    v1::ReportResultResponse response;
    status = stub->ReportResult(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  }
  // Nobody was registered by any of it.
  v1::ClusterStatus cluster;
  ASSERT_TRUE(ClusterStatus(channel, &cluster).ok());
  EXPECT_EQ(cluster.workers_size(), 0);
}

TEST_F(TlsTest, ContentStoreServesClientsAndWorkersOnly) {
  for (const TlsMaterial& allowed : {client_, worker_}) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::FindMissingBlobsResponse response;
    grpc::Status status = v1::ContentStore::NewStub(OpenChannel(address_, allowed))
                              ->FindMissingBlobs(&context, {}, &response);
    EXPECT_TRUE(status.ok()) << allowed.identity.name << ": " << status.error_message();
  }
  // A coordinator certificate completes the handshake (it may authenticate
  // as a client) but holds neither role.
  auto stub = v1::ContentStore::NewStub(OpenChannel(address_, coordinator_tls_));
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::FindMissingBlobsResponse response;
    grpc::Status status = stub->FindMissingBlobs(&context, {}, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
    EXPECT_THAT(status.error_message(),
                HasSubstr("a coordinator certificate (coordinator) cannot use the content store; "
                          "that needs a client or worker certificate"));
  }
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::BatchUpdateBlobsResponse response;
    grpc::Status status = stub->BatchUpdateBlobs(&context, {}, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  }
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::ReadBlobRequest request;
    request.mutable_digest()->set_hash(std::string(64, '0'));
    auto reader = stub->ReadBlob(&context, request);
    v1::ReadBlobResponse chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  }
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::WriteBlobResponse response;
    auto writer = stub->WriteBlob(&context, &response);
    v1::WriteBlobRequest chunk;
    chunk.set_data("x");
    writer->Write(chunk);  // may fail once the call is refused; Finish says why
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
    EXPECT_EQ(response.committed_size(), 0);
  }
}

// The programs' own paths: Worker::Start and the client's status and build
// commands open their channels through OpenChannel with their certificates.
TEST_F(TlsTest, WorkerAndClientBuildOverMutualTls) {
  worker::WorkerOptions options;
  options.coordinator_address = address_;
  options.name = "gpu-1";
  options.slots = 1;
  options.memory_cap_bytes = int64_t{4} << 30;
  options.nvcc_path = testing::FakeNvccPath();
  options.work_dir = root_ + "/worker";
  options.tls = worker_;
  auto worker = worker::Worker::Start(options);
  ASSERT_TRUE(worker.ok()) << worker.status();

  std::ostringstream status_out;
  absl::Status status =
      client::RunStatus(address_, absl::Seconds(10), status_out, std::optional(client_));
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(status_out.str(), HasSubstr("1 workers"));
  EXPECT_THAT(status_out.str(), HasSubstr("  gpu-1 "));

  ASSERT_TRUE(WriteFileAtomically(root_ + "/src/api.cu", "int api() { return 1; }\n").ok());
  ASSERT_TRUE(WriteFileAtomically(root_ + "/src/kernels.toml", R"(
[build]
output = "libtls.so"
sources = ["api.cu"]
)")
                  .ok());
  client::BuildOptions build;
  build.plan_path = root_ + "/src/kernels.toml";
  build.coordinator_address = address_;
  build.output_dir = root_ + "/out";
  build.nvcc_path = testing::FakeNvccPath();
  build.state_dir = root_ + "/embedded";
  build.tls = client_;
  std::ostringstream build_out;
  status = client::RunBuild(build, build_out);
  ASSERT_TRUE(status.ok()) << status << "\n" << build_out.str();
  absl::StatusOr<std::string> library = ReadFile(root_ + "/out/libtls.so");
  ASSERT_TRUE(library.ok()) << library.status();
  EXPECT_THAT(*library, HasSubstr("int api()"));
}

TEST_F(TlsTest, WorkerWithAClientCertificateIsRefusedAtStart) {
  worker::WorkerOptions options;
  options.coordinator_address = address_;
  options.name = "impostor";
  options.slots = 1;
  options.memory_cap_bytes = int64_t{1} << 30;
  options.nvcc_path = testing::FakeNvccPath();
  options.work_dir = root_ + "/impostor";
  options.tls = client_;
  auto worker = worker::Worker::Start(options);
  EXPECT_TRUE(absl::IsPermissionDenied(worker.status())) << worker.status();
}

TEST_F(TlsTest, StatusWithAWorkerCertificateSaysWhyItIsRefused) {
  std::ostringstream out;
  absl::Status status = client::RunStatus(address_, absl::Seconds(10), out, std::optional(worker_));
  EXPECT_TRUE(absl::IsPermissionDenied(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("needs a client certificate"));
}

TEST(CoordinatorListenTest, ReachableAddressWithoutTlsIsRefusedUnlessInsecure) {
  coordinator::CoordinatorOptions options;
  options.listen_address = "0.0.0.0:0";
  options.state_dir = testing::NewTempDir("insecure-") + "/state";
  auto refused = coordinator::Coordinator::Start(options);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("refusing to listen on 0.0.0.0:0 without TLS"));
  EXPECT_THAT(refused.status().message(), HasSubstr("distcc-cuda-coordinator certs init"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--insecure"));
  EXPECT_FALSE(IsRegularFile(options.state_dir + "/history.tsv"))
      << "the refusal came after the state dir was opened";

  options.insecure = true;
  auto started = coordinator::Coordinator::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::ClusterStatus status;
  grpc::Status rpc = v1::BuildService::NewStub(OpenChannel((*started)->address(), std::nullopt))
                         ->GetClusterStatus(&context, {}, &status);
  EXPECT_TRUE(rpc.ok()) << rpc.error_message();
}

TEST(CoordinatorListenTest, CoordinatorNeedsACoordinatorCertificate) {
  CertificateAuthority ca = *NewCertificateAuthority("c");
  IssueOptions issue;
  issue.role = PeerRole::kWorker;
  issue.name = "w";
  coordinator::CoordinatorOptions options;
  options.state_dir = testing::NewTempDir("wrong-role-");
  options.tls = FromIssued(ca, *IssueCertificate(ca, issue));
  auto started = coordinator::Coordinator::Start(options);
  EXPECT_TRUE(absl::IsInvalidArgument(started.status())) << started.status();
  EXPECT_THAT(started.status().message(), HasSubstr("needs a coordinator certificate"));
}

// A second coordinator on the same state dir, or on the same port, is
// refused: before, it started and clients and workers were split between
// the two at random.
TEST(CoordinatorListenTest, SecondCoordinatorOnTheSameStateDirOrPortIsRefused) {
  coordinator::CoordinatorOptions options;
  options.state_dir = testing::NewTempDir("twice-") + "/state";
  auto first = coordinator::Coordinator::Start(options);
  ASSERT_TRUE(first.ok()) << first.status();

  auto same_dir = coordinator::Coordinator::Start(options);
  EXPECT_TRUE(absl::IsFailedPrecondition(same_dir.status())) << same_dir.status();
  EXPECT_THAT(same_dir.status().message(),
              HasSubstr(options.state_dir + " is in use by another distcc-cuda-coordinator (pid " +
                        std::to_string(getpid()) + ")"));

  coordinator::CoordinatorOptions same_port;
  same_port.state_dir = testing::NewTempDir("twice-") + "/other";
  same_port.listen_address = (*first)->address();
  auto second = coordinator::Coordinator::Start(same_port);
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr("cannot listen on " + (*first)->address()));

  // Once the first is gone, its state dir is free again.
  first->reset();
  auto again = coordinator::Coordinator::Start(options);
  EXPECT_TRUE(again.ok()) << again.status();
}

}  // namespace
}  // namespace distcc_cuda
