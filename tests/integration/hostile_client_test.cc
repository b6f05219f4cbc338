// SPDX-License-Identifier: Apache-2.0
// What a client with a valid certificate can still try on a coordinator
// (issue 30's findings), over raw gRPC against the real binary: texts that
// would act on a terminal or forge a log line, a plan of minutes left
// running for a client that has gone, and a small request that costs
// hundreds of megabytes once parsed.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "build/bazel/remote/execution/v2/remote_execution.grpc.pb.h"
#include "common/nvcc/toolchain.h"
#include "common/store/digest.h"
#include "distcc_cuda/v1/build.grpc.pb.h"
#include "distcc_cuda/v1/cas.grpc.pb.h"
#include "distcc_cuda/v1/worker.grpc.pb.h"
#include "tests/support/background_process.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What a hostile client puts in a name: clear the screen, retitle the
// window, and start a line of its own in the log.
constexpr char kHostile[] = "x\x1b[2J\x1b]0;PWNED\x07\nFORGED LOG LINE";

class HostileClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::NewTempDir("hostile-client-");
    auto coordinator = testing::BackgroundProcess::Start(
        {testing::BinaryPath("distcc-cuda-coordinator"), "--listen", "127.0.0.1:0", "--state-dir",
         root_ + "/coordinator", "--reapi-listen", "127.0.0.1:0"},
        root_ + "/coordinator.log");
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = std::move(*coordinator);
    absl::StatusOr<std::string> line = coordinator_->WaitForLog("listening on ", absl::Seconds(20));
    ASSERT_TRUE(line.ok()) << line.status();
    const std::string address = line->substr(line->find("listening on ") + 13);
    channel_ = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    stub_ = v1::BuildService::NewStub(channel_);
    absl::StatusOr<v1::ToolchainFingerprint> toolchain =
        ComputeToolchainFingerprint(testing::FakeNvccPath());
    ASSERT_TRUE(toolchain.ok()) << toolchain.status();
    toolchain_ = *toolchain;
  }

  // A build of one instantiation set of one point, named `build_name`.
  v1::SubmitBuildRequest Request(const std::string& build_name) const {
    v1::SubmitBuildRequest request;
    request.set_build_name(build_name);
    *request.mutable_toolchain() = toolchain_;
    request.set_workspace_root(root_);
    v1::InstantiationSet* set = request.add_instantiation_sets();
    set->set_name("kernels");
    set->set_unit_name_template("k_{n}");
    set->set_text_template("template void k<{n}>();\n");
    v1::InstantiationAxis* axis = set->add_axes();
    axis->set_name("n");
    axis->add_values("1");
    set->set_manifest_location("kernels.toml:1");
    return request;
  }

  // The status SubmitBuild ends with (the build is accepted, or refused).
  grpc::Status Submit(const v1::SubmitBuildRequest& request,
                      absl::Duration deadline = absl::Seconds(30)) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    auto reader = stub_->SubmitBuild(&context, request);
    v1::BuildEvent event;
    // Accepted builds wait for a worker that never comes: the first event
    // is enough.
    if (reader->Read(&event)) context.TryCancel();
    return reader->Finish();
  }

  std::string root_;
  std::unique_ptr<testing::BackgroundProcess> coordinator_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::BuildService::Stub> stub_;
  v1::ToolchainFingerprint toolchain_;
};

TEST_F(HostileClientTest, TextsThatWouldActOnATerminalAreRefusedAndNeverLogged) {
  struct Case {
    std::string name;
    v1::SubmitBuildRequest request;
    std::string message_has;
  };
  std::vector<Case> cases;
  cases.push_back({"build name", Request(kHostile), "the build name"});
  cases.push_back({"long build name", Request(std::string(300, 'b')), "300 bytes"});
  cases.push_back({"bidi build name",
                   Request("abc\xe2\x80\xae"
                           "fdp.exe"),
                   "the build name"});
  // (Bytes that are not UTF-8 never arrive: proto3 refuses them in a
  // string field when it parses the request.)
  Case toolchain{"toolchain", Request("fine"), "host_compiler"};
  toolchain.request.mutable_toolchain()->set_host_compiler(kHostile);
  cases.push_back(toolchain);
  Case set{"set name", Request("fine"), "instantiation set's name"};
  set.request.mutable_instantiation_sets(0)->set_name(kHostile);
  cases.push_back(set);
  Case location{"manifest location", Request("fine"), "manifest_location"};
  location.request.mutable_instantiation_sets(0)->set_manifest_location(kHostile);
  cases.push_back(location);
  Case value{"axis value", Request("fine"), "a value of axis n"};
  value.request.mutable_instantiation_sets(0)->mutable_axes(0)->set_values(0, kHostile);
  cases.push_back(value);

  for (const Case& c : cases) {
    grpc::Status status = Submit(c.request);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.name << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message_has)) << c.name;
    EXPECT_THAT(status.error_message(), Not(HasSubstr("\x1b"))) << c.name;
  }
  // Printable text in any script is a name like any other.
  grpc::Status greek = Submit(Request("πυρήνες → sm_100"));
  EXPECT_TRUE(greek.ok() || greek.error_code() == grpc::StatusCode::CANCELLED)
      << greek.error_message();

  const std::string log = coordinator_->Log();
  for (const char* acting : {"\x1b", "\x07", "\xe2\x80\xae", "\nFORGED"}) {
    EXPECT_THAT(log, Not(HasSubstr(acting))) << "the coordinator's log:\n" << log;
  }
}

// `request` with its one set made a grid of `side` x `side` points, one
// instantiation per unit.
v1::SubmitBuildRequest GridRequest(v1::SubmitBuildRequest request, int side) {
  v1::InstantiationSet* set = request.mutable_instantiation_sets(0);
  set->set_unit_name_template("k_{a}_{b}");
  set->set_text_template("template void k<{a}, {b}>();\n");
  set->set_instantiations_per_unit(1);
  set->clear_axes();
  for (const char* name : {"a", "b"}) {
    v1::InstantiationAxis* axis = set->add_axes();
    axis->set_name(name);
    for (int i = 0; i < side; ++i) axis->add_values(absl::StrCat(i));
  }
  return request;
}

// A grid of 99,856 points (under the 100,000 a set may have) takes many
// seconds to plan; its client gives up after one. The coordinator stops
// planning instead of going on for nobody (it went on to the end before).
TEST_F(HostileClientTest, PlanningStopsWhenItsClientLeaves) {
  grpc::Status status = Submit(GridRequest(Request("left behind"), 316), absl::Seconds(1));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  absl::StatusOr<std::string> stopped =
      coordinator_->WaitForLog("stopped planning build 'left behind'", absl::Seconds(30));
  ASSERT_TRUE(stopped.ok()) << stopped.status() << "\n" << coordinator_->Log();
  EXPECT_THAT(*stopped, HasSubstr("its client left"));
}

// One client sends twelve grids of seconds at once: eight are planned (the
// most one client may have, --max-plans-per-client), the rest are refused
// at once, so the planners' queue stays open to other clients; the places
// come back when the plans end.
TEST_F(HostileClientTest, OneClientCannotFillThePlanners) {
  std::vector<std::future<grpc::Status>> sent;
  for (int i = 0; i < 12; ++i) {
    sent.push_back(std::async(std::launch::async, [this, i] {
      return Submit(GridRequest(Request(absl::StrCat("grid ", i)), 316), absl::Seconds(4));
    }));
  }
  int refused = 0;
  for (std::future<grpc::Status>& status : sent) {
    grpc::Status ended = status.get();
    if (ended.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      EXPECT_THAT(ended.error_message(), HasSubstr("has 8 builds or parts being planned already"));
    } else {
      // Still planned when its client gave up, or accepted (and left).
      EXPECT_TRUE(ended.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                  ended.error_code() == grpc::StatusCode::CANCELLED)
          << ended.error_code() << ": " << ended.error_message();
    }
  }
  EXPECT_EQ(refused, 4);
  // Their clients gone, the plans stop and give their places back.
  grpc::Status after;
  for (absl::Time end = absl::Now() + absl::Seconds(60); absl::Now() < end;
       absl::SleepFor(absl::Milliseconds(200))) {
    after = Submit(Request("after"));
    if (after.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
  }
  EXPECT_NE(after.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << after.error_message();
}

// A line of /proc/PID/status in bytes: VmHWM (the peak) or VmRSS (now).
int64_t ProcessMemory(pid_t pid, absl::string_view field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    int64_t kib = 0;
    if (absl::StartsWith(line, absl::StrCat(field, ":")) &&
        absl::SimpleAtoi(
            absl::StripAsciiWhitespace(absl::StripSuffix(line.substr(field.size() + 1), "kB")),
            &kib)) {
      return kib << 10;
    }
  }
  return -1;
}

int64_t PeakMemory(pid_t pid) { return ProcessMemory(pid, "VmHWM"); }

// What was refused from its bytes cost the coordinator little: its peak
// (`after`) within 48 MiB of `before`.
void ExpectPeakNear(int64_t after, int64_t before) {
  std::cout << "coordinator peak " << (before >> 20) << " MiB before, " << (after >> 20)
            << " MiB after\n";
  EXPECT_LT(after - before, int64_t{48} << 20) << "peak " << before << " -> " << after;
}

// The coordinator at `pid`, resident `before` until large requests came:
// its peak rose by more than `rise` (they were read), and within 10 s it is
// back within 48 MiB of `before` (what they cost was given back).
void ExpectMemoryGivenBack(pid_t pid, int64_t before, int64_t rise) {
  const int64_t peak = PeakMemory(pid);
  int64_t now = ProcessMemory(pid, "VmRSS");
  for (absl::Time end = absl::Now() + absl::Seconds(10);
       absl::Now() < end && now - before >= int64_t{48} << 20;
       absl::SleepFor(absl::Milliseconds(200))) {
    now = ProcessMemory(pid, "VmRSS");
  }
  ASSERT_GT(now, 0) << "the coordinator is gone";
  std::cout << "coordinator resident " << (before >> 20) << " MiB before, peak " << (peak >> 20)
            << " MiB, " << (now >> 20) << " MiB after\n";
  EXPECT_GT(peak - before, rise) << "peak " << peak << ", before " << before;
  EXPECT_LT(now - before, int64_t{48} << 20)
      << "resident " << before << " -> " << now << " (peak " << peak << ")";
}

// Four builds of 90,000 named units each (about 4 MB sent, several times
// that parsed) sent at once, all refused when planned: what they cost comes
// back to the system within seconds (it was kept for ever: 536 MB after a
// battery of large requests).
TEST_F(HostileClientTest, TheMemoryOfARefusedLargeRequestIsGivenBack) {
  const int64_t before = ProcessMemory(coordinator_->pid(), "VmRSS");
  ASSERT_GT(before, 0);
  v1::SubmitBuildRequest request = Request("named units inline");
  request.clear_instantiation_sets();
  for (int i = 0; i < 90000; ++i) {
    v1::CompileUnit* unit = request.add_units();
    unit->set_name(absl::StrCat("unit_with_a_name_", i));
    unit->add_arguments(absl::StrCat("-DINSTANTIATION_NUMBER=", i));
  }
  ASSERT_GT(request.ByteSizeLong(), 3u << 20);
  ASSERT_LT(request.ByteSizeLong(), 8u << 20);
  std::vector<std::future<grpc::Status>> sent;
  for (int i = 0; i < 4; ++i) {
    sent.push_back(std::async(std::launch::async, [this, &request] { return Submit(request); }));
  }
  for (std::future<grpc::Status>& status : sent) {
    grpc::Status ended = status.get();
    EXPECT_EQ(ended.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << ended.error_message();
  }
  // The requests were read and planned (or this test proves nothing).
  ExpectMemoryGivenBack(coordinator_->pid(), before, int64_t{96} << 20);
}

// The Remote Execution API's content store, as a hostile REAPI client uses
// it: four FindMissingBlobs of 100,000 digests at once (7 MB each) and a
// batch upload of 3.6 MB. What they cost comes back to the system within
// seconds, as the build service's requests do (the coordinator stayed at
// 214-232 MB resident, 24 MB at start).
TEST_F(HostileClientTest, TheMemoryOfLargeRemoteExecutionApiStoreCallsIsGivenBack) {
  const std::string said = "serving the Remote Execution API on port ";
  absl::StatusOr<std::string> line = coordinator_->WaitForLog(said, absl::Seconds(20));
  ASSERT_TRUE(line.ok()) << line.status();
  int port = 0;
  const size_t at = line->find(said) + said.size();
  ASSERT_TRUE(
      absl::SimpleAtoi(line->substr(at, line->find_first_not_of("0123456789", at) - at), &port))
      << *line;
  const std::string address = absl::StrCat("127.0.0.1:", port);
  namespace reapi = ::build::bazel::remote::execution::v2;
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);  // 100,000 digests missing: 7 MB
  auto cas = reapi::ContentAddressableStorage::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), arguments));
  const int64_t before = ProcessMemory(coordinator_->pid(), "VmRSS");
  ASSERT_GT(before, 0);
  reapi::FindMissingBlobsRequest find;
  for (int i = 0; i < 100000; ++i) {
    const Digest digest = DigestOf(absl::StrCat("blob ", i));
    reapi::Digest* asked = find.add_blob_digests();
    asked->set_hash(digest.hash);
    asked->set_size_bytes(digest.size_bytes);
  }
  ASSERT_GT(find.ByteSizeLong(), 6u << 20);
  std::vector<std::future<grpc::Status>> sent;
  for (int i = 0; i < 4; ++i) {
    sent.push_back(std::async(std::launch::async, [&cas, &find] {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
      reapi::FindMissingBlobsResponse missing;
      grpc::Status status = cas->FindMissingBlobs(&context, find, &missing);
      EXPECT_EQ(missing.missing_blob_digests_size(), status.ok() ? 100000 : 0);
      return status;
    }));
  }
  for (std::future<grpc::Status>& status : sent) {
    grpc::Status ended = status.get();
    EXPECT_TRUE(ended.ok()) << ended.error_message();
  }
  reapi::BatchUpdateBlobsRequest upload;
  for (int i = 0; i < 8; ++i) {
    const std::string data(450 << 10, static_cast<char>('a' + i));
    const Digest digest = DigestOf(data);
    auto* blob = upload.add_requests();
    blob->mutable_digest()->set_hash(digest.hash);
    blob->mutable_digest()->set_size_bytes(digest.size_bytes);
    blob->set_data(data);
  }
  {
    grpc::ClientContext context;
    reapi::BatchUpdateBlobsResponse stored;
    grpc::Status status = cas->BatchUpdateBlobs(&context, upload, &stored);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(stored.responses_size(), 8);
    for (const auto& response : stored.responses()) EXPECT_EQ(response.status().code(), 0);
  }
  // The calls were read and answered (or this test proves nothing).
  ExpectMemoryGivenBack(coordinator_->pid(), before, int64_t{64} << 20);
}

// 700,000 empty units: 1.4 MB sent, about 200 MB parsed; four of them took
// the coordinator to 619 MB, and it kept it. In the request itself, as a
// part added to an open build, or as a build's plan blob (the way a client
// sends a large part) they are refused from their bytes, and so are
// 3,000,000 empty digests asked for at once: the coordinator's peak stays
// near where it was.
TEST_F(HostileClientTest, RequestsOfManyEmptyElementsAreRefusedBeforeTheyAreParsed) {
  const int64_t before = PeakMemory(coordinator_->pid());
  ASSERT_GT(before, 0);
  auto cas = v1::ContentStore::NewStub(channel_);

  v1::BuildPlan plan;
  for (int i = 0; i < 700000; ++i) plan.add_units();
  const std::string plan_bytes = plan.SerializeAsString();
  ASSERT_LT(plan_bytes.size(), 2u << 20);
  v1::BatchUpdateBlobsRequest upload;
  v1::BatchUpdateBlobsRequest::Blob* blob = upload.add_blobs();
  *blob->mutable_digest() = ToProto(DigestOf(plan_bytes));
  blob->set_data(plan_bytes);
  {
    grpc::ClientContext context;
    v1::BatchUpdateBlobsResponse uploaded;
    grpc::Status status = cas->BatchUpdateBlobs(&context, upload, &uploaded);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(uploaded.results(0).code(), 0) << uploaded.results(0).message();
  }
  v1::SubmitBuildRequest request = Request("empty units");
  request.clear_instantiation_sets();
  *request.mutable_plan() = ToProto(DigestOf(plan_bytes));
  v1::SubmitBuildRequest inline_request = Request("empty units inline");
  inline_request.clear_instantiation_sets();
  for (int i = 0; i < 700000; ++i) inline_request.add_units();
  for (int i = 0; i < 4; ++i) {
    for (const v1::SubmitBuildRequest* sent : {&request, &inline_request}) {
      grpc::Status status = Submit(*sent);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << status.error_message();
      EXPECT_THAT(status.error_message(), HasSubstr("holds 700000 units"));
    }
    v1::AddUnitsRequest part;
    part.set_build_id("b-1");
    *part.mutable_units() = inline_request.units();
    grpc::ClientContext context;
    v1::AddUnitsResponse added;
    grpc::Status status = stub_->AddUnits(&context, part, &added);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("the AddUnits request holds 700000 units"));
  }

  v1::FindMissingBlobsRequest find;
  for (int i = 0; i < 3000000; ++i) find.add_digests();
  grpc::ClientContext context;
  v1::FindMissingBlobsResponse missing;
  grpc::Status status = cas->FindMissingBlobs(&context, find, &missing);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("of the coordinator's memory once read"));
  ExpectPeakNear(PeakMemory(coordinator_->pid()), before);
}

// A worker's key in the wrong hands: a heartbeat larger than any worker
// sends and a report of 3,000,000 empty outputs (6 MB sent, some 400 MB
// parsed) are refused from their bytes, before they are parsed.
TEST_F(HostileClientTest, AWorkersOversizedOrCostlyMessagesAreRefusedBeforeTheyAreParsed) {
  const int64_t before = PeakMemory(coordinator_->pid());
  ASSERT_GT(before, 0);
  auto workers = v1::WorkerService::NewStub(channel_);
  for (int i = 0; i < 4; ++i) {
    v1::HeartbeatRequest beat;
    beat.set_worker_id("w-1");
    for (int k = 0; k < 30000; ++k) beat.add_running_task_ids(std::string(40, 't'));
    grpc::ClientContext context;
    v1::HeartbeatResponse answer;
    grpc::Status status = workers->Heartbeat(&context, beat, &answer);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_THAT(
        status.error_message(),
        HasSubstr(
            "request to send worker heartbeats is 1260005 bytes, over the 1048576 bytes (1 MiB)"));
  }
  v1::ReportResultRequest report;
  report.set_worker_id("w-1");
  report.set_task_id("t-1");
  for (int k = 0; k < 3000000; ++k) report.mutable_result()->add_outputs();
  ASSERT_LT(report.ByteSizeLong(), 8u << 20);
  for (int i = 0; i < 4; ++i) {
    grpc::ClientContext context;
    v1::ReportResultResponse answer;
    grpc::Status status = workers->ReportResult(&context, report, &answer);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("of the coordinator's memory once read"));
  }
  ExpectPeakNear(PeakMemory(coordinator_->pid()), before);
}

}  // namespace
}  // namespace distcc_cuda
