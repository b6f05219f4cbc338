// SPDX-License-Identifier: Apache-2.0
// A worker's word is not the last word: a process holding a valid worker
// certificate ("rogue", talking gRPC itself) reports an object of its own
// making, which its build links and the result cache keeps. Revoking the
// identity (distcc-cuda-coordinator revoke) refuses it and drops every
// result it produced; a cross-check (--cross-check-rate) finds it without
// being told, when two other workers outvote it. All over mutual TLS with a
// real coordinator, real workers and the fake compiler.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <sstream>

#include "absl/time/clock.h"
#include "client/stages/build_command.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/toolchain.h"
#include "common/process/subprocess.h"
#include "common/store/cas_client.h"
#include "common/transport/certificates.h"
#include "common/transport/tls_credentials.h"
#include "coordinator/coordinator.h"
#include "coordinator/trust/revocations.h"
#include "coordinator/trust/revoke_command.h"
#include "distcc_cuda/v1/build.grpc.pb.h"
#include "distcc_cuda/v1/cas.grpc.pb.h"
#include "distcc_cuda/v1/worker.grpc.pb.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/test_certificates.h"
#include "tests/support/test_paths.h"
#include "worker/worker.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What the rogue compiles instead of the unit's source: a real object, so
// that the build links it.
constexpr char kForgedSource[] =
    "// FORGED OBJECT made by the rogue worker\nint api() { return 666; }\n";

// Polls `condition` every 50 ms for up to `limit`.
bool WaitFor(const std::function<bool()>& condition, absl::Duration limit) {
  absl::Time end = absl::Now() + limit;
  while (absl::Now() < end) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return condition();
}

class WorkerTrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::NewTempDir("trust-");
    absl::StatusOr<CertificateAuthority> ca = NewCertificateAuthority("trust-test");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *ca;
    ASSERT_TRUE(WriteFileAtomically(root_ + "/src/api.cu", "int api() { return 1; }\n").ok());
    ASSERT_TRUE(WriteFileAtomically(root_ + "/src/k.toml",
                                    "[build]\noutput = \"libk.so\"\nsources = [\"api.cu\"]\n")
                    .ok());
  }

  TlsMaterial Material(PeerRole role, const std::string& name,
                       std::vector<std::string> hosts = {}) const {
    return testing::MaterialForTest(ca_, role, name, std::move(hosts));
  }

  void StartCoordinator(double cross_check_rate) {
    coordinator::CoordinatorOptions options;
    options.state_dir = state_dir();
    options.tls = Material(PeerRole::kCoordinator, "coordinator", {"127.0.0.1"});
    options.metrics_listen = "127.0.0.1:0";
    options.scheduler.cross_check_rate = cross_check_rate;
    auto started = coordinator::Coordinator::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(*started);
    address_ = coordinator_->address();
  }

  std::string state_dir() const { return root_ + "/coordinator"; }

  // A worker that compiles honestly, under its own certificate.
  std::unique_ptr<worker::Worker> StartHonest(const std::string& name) {
    worker::WorkerOptions options;
    options.coordinator_address = address_;
    options.name = name;
    options.slots = 1;
    options.memory_cap_bytes = int64_t{4} << 30;
    options.nvcc_path = testing::FakeNvccPath();
    options.work_dir = root_ + "/" + name;
    options.sandbox = geteuid() == 0;
    options.tls = Material(PeerRole::kWorker, name);
    absl::StatusOr<std::unique_ptr<worker::Worker>> worker = worker::Worker::Start(options);
    EXPECT_TRUE(worker.ok()) << worker.status();
    return worker.ok() ? *std::move(worker) : nullptr;
  }

  // Builds k.toml into `out`; the status and what the client printed.
  std::future<std::pair<absl::Status, std::string>> BuildInto(const std::string& out) {
    TlsMaterial client = Material(PeerRole::kClient, "alice");
    return std::async(std::launch::async, [this, out, client] {
      client::BuildOptions options;
      options.plan_path = root_ + "/src/k.toml";
      options.coordinator_address = address_;
      options.output_dir = root_ + "/" + out;
      options.nvcc_path = testing::FakeNvccPath();
      options.state_dir = root_ + "/client";
      options.tls = client;
      std::ostringstream printed;
      absl::Status status = client::RunBuild(options, printed);
      return std::make_pair(status, printed.str());
    });
  }

  std::string Library(const std::string& out) {
    absl::StatusOr<std::string> library = ReadFile(root_ + "/" + out + "/libk.so");
    EXPECT_TRUE(library.ok()) << library.status();
    return library.ok() ? *library : "";
  }

  v1::ClusterStatus Status() {
    auto channel = OpenChannel(address_, Material(PeerRole::kClient, "status-reader"));
    v1::ClusterStatus status;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    EXPECT_TRUE(v1::BuildService::NewStub(channel)->GetClusterStatus(&context, {}, &status).ok());
    return status;
  }

  std::optional<v1::RevokedWorker> RevokedInStatus(const std::string& name) {
    v1::ClusterStatus status = Status();
    for (const v1::RevokedWorker& revoked : status.revoked_workers()) {
      if (revoked.name() == name) return revoked;
    }
    return std::nullopt;
  }

  // How many results in the coordinator's cache `producer` made.
  int CachedResultsBy(const std::string& producer) const {
    int count = 0;
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(state_dir() + "/results")) {
      if (!entry.is_regular_file()) continue;
      v1::TaskResult result;
      absl::StatusOr<std::string> bytes = ReadFile(entry.path().string());
      if (bytes.ok() && result.ParseFromString(*bytes) && result.producer() == producer) ++count;
    }
    return count;
  }

  double Metric(const std::string& series) {
    absl::StatusOr<std::string> text = testing::HttpGet(coordinator_->metrics_url() + "/metrics");
    if (!text.ok()) return -1;
    absl::StatusOr<testing::ScrapedMetrics> parsed = testing::ParsePrometheusText(*text);
    return parsed.ok() ? parsed->Value(series) : -1;
  }

  // The rogue: registers with the fake compiler's toolchain like any worker,
  // leases a task, and reports an object it made up, uploaded to the store.
  class Rogue {
   public:
    Rogue(const std::string& address, const TlsMaterial& tls, const std::string& root)
        : channel_(OpenChannel(address, tls)),
          stub_(v1::WorkerService::NewStub(channel_)),
          root_(root) {}

    grpc::Status Register() {
      v1::RegisterWorkerRequest hello;
      hello.set_name("rogue");
      hello.set_slots(1);
      hello.set_memory_cap_bytes(int64_t{4} << 30);
      hello.set_reads_input_trees(true);
      *hello.mutable_toolchain() = *ComputeToolchainFingerprint(testing::FakeNvccPath());
      toolchain_digest_ = hello.toolchain().digest();
      v1::RegisterWorkerResponse registered;
      grpc::ClientContext context;
      grpc::Status status = stub_->RegisterWorker(&context, hello, &registered);
      worker_id_ = registered.worker_id();
      return status;
    }

    grpc::Status Lease(v1::LeaseTaskResponse* lease) {
      v1::LeaseTaskRequest want;
      want.set_worker_id(worker_id_);
      want.set_wait_ms(20000);
      grpc::ClientContext context;
      return stub_->LeaseTask(&context, want, lease);
    }

    grpc::Status ReportForged(const v1::Task& task) {
      absl::StatusOr<std::string> object = Forge();
      if (!object.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, object.status().ToString());
      CasClient cas(v1::ContentStore::NewStub(channel_));
      Digest forged = DigestOf(*object);
      absl::StatusOr<int> uploaded = cas.UploadMissing({BlobSource{forged, "", *object}});
      if (!uploaded.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "upload failed");
      v1::ReportResultRequest lie;
      lie.set_worker_id(worker_id_);
      lie.set_task_id(task.task_id());
      lie.mutable_result()->set_outcome(v1::TASK_COMPLETED);
      lie.mutable_result()->set_toolchain_digest(toolchain_digest_);
      // It even claims to be someone else: the coordinator does not ask.
      lie.mutable_result()->set_producer("honest-1");
      auto* output = lie.mutable_result()->add_outputs();
      output->set_path(task.unit().output_paths(0));
      *output->mutable_digest() = ToProto(forged);
      v1::ReportResultResponse ignored;
      grpc::ClientContext context;
      return stub_->ReportResult(&context, lie, &ignored);
    }

   private:
    // An object of its own making, from its own source.
    absl::StatusOr<std::string> Forge() {
      RETURN_IF_ERROR(WriteFileAtomically(root_ + "/rogue/forged.cu", kForgedSource));
      ProcessSpec compile;
      compile.argv = {testing::FakeNvccPath(), "-c", root_ + "/rogue/forged.cu", "-o",
                      root_ + "/rogue/forged.o"};
      ASSIGN_OR_RETURN(ProcessResult compiled, RunProcess(compile));
      if (compiled.exit_code != 0) return absl::InternalError(compiled.stderr_text);
      return ReadFile(root_ + "/rogue/forged.o");
    }

    std::shared_ptr<grpc::Channel> channel_;
    std::unique_ptr<v1::WorkerService::Stub> stub_;
    std::string root_;
    std::string worker_id_;
    std::string toolchain_digest_;
  };

  // Has the rogue lease the build's one unit and report its forgery; the
  // build links it.
  void ForgedBuild(Rogue& rogue, const std::function<void()>& before_report = nullptr) {
    auto build = BuildInto("forged");
    v1::LeaseTaskResponse lease;
    ASSERT_TRUE(rogue.Lease(&lease).ok());
    ASSERT_TRUE(lease.has_task());
    if (before_report) before_report();
    grpc::Status reported = rogue.ReportForged(lease.task());
    ASSERT_TRUE(reported.ok()) << reported.error_message();
    ASSERT_EQ(build.wait_for(std::chrono::minutes(2)), std::future_status::ready);
    auto [status, printed] = build.get();
    ASSERT_TRUE(status.ok()) << status << "\n" << printed;
    EXPECT_THAT(Library("forged"), HasSubstr("FORGED OBJECT"));
  }

  std::string root_;
  CertificateAuthority ca_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::string address_;
};

TEST_F(WorkerTrustTest, RevokingAWorkerRefusesItAndDropsEveryResultItProduced) {
  StartCoordinator(/*cross_check_rate=*/0);
  Rogue rogue(address_, Material(PeerRole::kWorker, "rogue"), root_);
  ASSERT_TRUE(rogue.Register().ok());
  ASSERT_NO_FATAL_FAILURE(ForgedBuild(rogue));
  // The coordinator, not the report, names who made it.
  EXPECT_EQ(CachedResultsBy("rogue"), 1);
  EXPECT_EQ(CachedResultsBy("honest-1"), 0);

  std::ostringstream said;
  absl::Status revoked = coordinator::RunRevokeCommand(
      {"--state-dir", state_dir(), "--reason", "its key was on a lost laptop", "rogue"}, said);
  ASSERT_TRUE(revoked.ok()) << revoked;
  EXPECT_THAT(said.str(), HasSubstr("worker rogue revoked"));
  // The running coordinator reads the list again within a second.
  ASSERT_TRUE(WaitFor([&] { return RevokedInStatus("rogue").has_value(); }, absl::Seconds(10)));
  EXPECT_EQ(RevokedInStatus("rogue")->reason(), "its key was on a lost laptop");
  ASSERT_TRUE(WaitFor([&] { return CachedResultsBy("rogue") == 0; }, absl::Seconds(10)));
  EXPECT_EQ(Metric("distcc_cuda_workers_revoked"), 1);

  v1::LeaseTaskResponse lease;
  grpc::Status refused = rogue.Lease(&lease);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(refused.error_message(), HasSubstr("worker 'rogue' is revoked since"));
  EXPECT_THAT(refused.error_message(), HasSubstr("its key was on a lost laptop"));
  EXPECT_EQ(rogue.Register().error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // The unit compiles again, honestly: nothing of the rogue's is served.
  auto honest = StartHonest("honest-1");
  ASSERT_NE(honest, nullptr);
  auto rebuild = BuildInto("rebuilt");
  ASSERT_EQ(rebuild.wait_for(std::chrono::minutes(2)), std::future_status::ready);
  auto [status, printed] = rebuild.get();
  ASSERT_TRUE(status.ok()) << status << "\n" << printed;
  EXPECT_THAT(printed, HasSubstr("(1 compiled, 0 cached"));
  EXPECT_THAT(Library("rebuilt"), HasSubstr("int api()"));
  EXPECT_THAT(Library("rebuilt"), Not(HasSubstr("FORGED")));
  EXPECT_EQ(CachedResultsBy("honest-1"), 1);

  std::ostringstream listed;
  ASSERT_TRUE(coordinator::RunRevokeCommand({"--state-dir", state_dir(), "--list"}, listed).ok());
  EXPECT_THAT(listed.str(), HasSubstr("rogue  since "));
  // Lifted, the identity may register again.
  std::ostringstream lifted;
  ASSERT_TRUE(
      coordinator::RunRevokeCommand({"--state-dir", state_dir(), "--lift", "rogue"}, lifted).ok());
  ASSERT_TRUE(WaitFor([&] { return !RevokedInStatus("rogue").has_value(); }, absl::Seconds(10)));
  EXPECT_TRUE(rogue.Register().ok());
}

TEST_F(WorkerTrustTest, ACrossCheckQuarantinesTheWorkerTwoOthersOutvote) {
  StartCoordinator(/*cross_check_rate=*/1.0);
  Rogue rogue(address_, Material(PeerRole::kWorker, "rogue"), root_);
  ASSERT_TRUE(rogue.Register().ok());
  std::unique_ptr<worker::Worker> first, second;
  // The honest workers join once the rogue holds the unit.
  ASSERT_NO_FATAL_FAILURE(ForgedBuild(rogue, [&] {
    first = StartHonest("honest-1");
    second = StartHonest("honest-2");
  }));
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);

  // Compiled again by one honest worker: they differ; by the other: it
  // sides with the first. The rogue is quarantined, its result dropped.
  ASSERT_TRUE(WaitFor([&] { return RevokedInStatus("rogue").has_value(); }, absl::Seconds(90)))
      << "the rogue was never quarantined";
  EXPECT_THAT(RevokedInStatus("rogue")->reason(),
              HasSubstr("quarantined by a cross-check: its object for unit api"));
  EXPECT_EQ(Metric("distcc_cuda_cross_checks_total{verdict=\"quarantined\"}"), 1);
  EXPECT_EQ(Metric("distcc_cuda_cross_checks_total{verdict=\"agreed\"}"), 0);
  ASSERT_TRUE(WaitFor([&] { return CachedResultsBy("rogue") == 0; }, absl::Seconds(10)));
  std::ostringstream listed;
  ASSERT_TRUE(coordinator::RunRevokeCommand({"--state-dir", state_dir(), "--list"}, listed).ok());
  EXPECT_THAT(listed.str(), HasSubstr("quarantined by a cross-check"));

  auto rebuild = BuildInto("rebuilt");
  ASSERT_EQ(rebuild.wait_for(std::chrono::minutes(2)), std::future_status::ready);
  auto [status, printed] = rebuild.get();
  ASSERT_TRUE(status.ok()) << status << "\n" << printed;
  EXPECT_THAT(printed, HasSubstr("(1 compiled, 0 cached"));
  EXPECT_THAT(Library("rebuilt"), Not(HasSubstr("FORGED")));
}

TEST_F(WorkerTrustTest, HonestWorkersAgreeAndNobodyIsQuarantined) {
  StartCoordinator(/*cross_check_rate=*/1.0);
  auto first = StartHonest("honest-1");
  auto second = StartHonest("honest-2");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  auto build = BuildInto("built");
  ASSERT_EQ(build.wait_for(std::chrono::minutes(2)), std::future_status::ready);
  auto [status, printed] = build.get();
  ASSERT_TRUE(status.ok()) << status << "\n" << printed;
  ASSERT_TRUE(
      WaitFor([&] { return Metric("distcc_cuda_cross_checks_total{verdict=\"agreed\"}") == 1; },
              absl::Seconds(60)));
  EXPECT_EQ(Metric("distcc_cuda_cross_checks_total{verdict=\"quarantined\"}"), 0);
  EXPECT_EQ(Status().revoked_workers_size(), 0);
  // The check's own compile is not cached over the first: one result.
  EXPECT_EQ(CachedResultsBy("honest-1") + CachedResultsBy("honest-2"), 1);
}

}  // namespace
}  // namespace distcc_cuda
