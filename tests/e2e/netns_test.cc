// SPDX-License-Identifier: Apache-2.0
// The real topology on one machine: the coordinator, three workers and the
// client each in a network namespace of their own, joined by veth pairs to a
// bridge in a sixth, with the real binaries and the real nvcc. Addresses
// exist only inside the namespaces this test creates and removes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <future>
#include <map>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/fatbin.h"
#include "common/process/subprocess.h"
#include "common/transport/certificates.h"
#include "tests/support/background_process.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

constexpr char kSubnet[] = "10.213.0.";

absl::Status Ip(const std::vector<std::string>& args) {
  ProcessSpec spec;
  spec.argv = {"ip"};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.timeout = absl::Seconds(20);
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  if (!result.ok()) return result.status();
  if (result->exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("ip ", absl::StrJoin(args, " "), ": ", result->stderr_text));
  }
  return absl::OkStatus();
}

// Namespaces named after this process, each with eth0 on the hub's bridge.
// Removed (with their veths) when destroyed.
class Network {
 public:
  explicit Network(std::string prefix) : prefix_(std::move(prefix)) {}
  ~Network() {
    for (const std::string& name : made_) Ip({"netns", "del", name}).IgnoreError();
  }

  absl::Status Create() {
    RemoveThoseOfDeadTests();
    RETURN_IF_ERROR(Add(Hub()));
    RETURN_IF_ERROR(Ip({"-n", Hub(), "link", "add", "br0", "type", "bridge"}));
    return Ip({"-n", Hub(), "link", "set", "br0", "up"});
  }

  // A host `role` at kSubnet + `host`.
  absl::Status AddHost(const std::string& role, int host) {
    std::string ns = Name(role);
    std::string port = absl::StrCat("p", host);
    RETURN_IF_ERROR(Add(ns));
    RETURN_IF_ERROR(Ip(
        {"-n", Hub(), "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns}));
    RETURN_IF_ERROR(Ip({"-n", Hub(), "link", "set", port, "master", "br0", "up"}));
    RETURN_IF_ERROR(
        Ip({"-n", ns, "addr", "add", absl::StrCat(kSubnet, host, "/24"), "dev", "eth0"}));
    RETURN_IF_ERROR(Ip({"-n", ns, "link", "set", "eth0", "up"}));
    return Ip({"-n", ns, "link", "set", "lo", "up"});
  }

  // Cuts `role`'s only link, as a pulled cable would.
  absl::Status Cut(const std::string& role) {
    return Ip({"-n", Name(role), "link", "set", "eth0", "down"});
  }

  // `argv` run inside `role`'s network namespace (only the network: the
  // files and cgroups are the machine's).
  std::vector<std::string> In(const std::string& role, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"nsenter", "--net=/run/netns/" + Name(role), "--"});
    return argv;
  }

 private:
  std::string Hub() const { return Name("hub"); }
  std::string Name(const std::string& role) const { return absl::StrCat(prefix_, "-", role); }
  absl::Status Add(const std::string& name) {
    RETURN_IF_ERROR(Ip({"netns", "add", name}));
    made_.push_back(name);
    return absl::OkStatus();
  }

  // A test that crashed left its namespaces behind: remove those whose
  // process is gone.
  static void RemoveThoseOfDeadTests() {
    ProcessSpec spec;
    spec.argv = {"ip", "netns", "list"};
    spec.timeout = absl::Seconds(20);
    absl::StatusOr<ProcessResult> list = RunProcess(spec);
    if (!list.ok()) return;
    static const std::regex kOurs(R"(^(dcc([0-9]+)-\S+))");
    std::istringstream lines(list->stdout_text);
    for (std::string line; std::getline(lines, line);) {
      std::smatch match;
      if (!std::regex_search(line, match, kOurs)) continue;
      if (kill(std::stoi(match[2]), 0) != 0 && errno == ESRCH) {
        Ip({"netns", "del", match[1]}).IgnoreError();
      }
    }
  }

  std::string prefix_;
  std::vector<std::string> made_;
};

// nvcc names its temporary files after its process id (tmpxft_<pid>_...),
// and the host object keeps that name as its file symbol: two builds of the
// same source never agree on those bytes, with or without distcc-cuda.
std::string WithoutNvccTempNames(std::string bytes) {
  static const std::regex kTempName("tmpxft_[0-9a-f]{8}_[0-9a-f]{8}");
  return std::regex_replace(bytes, kTempName, "tmpxft_XXXXXXXX_XXXXXXXX");
}

class NetnsTest : public ::testing::Test {
 protected:
  static constexpr int kCoordinatorHost = 1;
  static constexpr int kClientHost = 20;

  void SetUp() override {
    nvcc_ = testing::RealNvccPath();
    if (nvcc_.empty()) GTEST_SKIP() << "needs the real nvcc at /usr/local/cuda/bin/nvcc";
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces (ip netns)";
    root_ = testing::NewTempDir("netns-");
    network_ = std::make_unique<Network>(absl::StrCat("dcc", getpid()));
    absl::Status made = network_->Create();
    if (!made.ok()) GTEST_SKIP() << "cannot create network namespaces here: " << made;
    ASSERT_TRUE(network_->AddHost("coordinator", kCoordinatorHost).ok());
    ASSERT_TRUE(network_->AddHost("client", kClientHost).ok());
    for (int i = 1; i <= 3; ++i) {
      ASSERT_TRUE(network_->AddHost(absl::StrCat("w", i), 10 + i).ok());
    }
    // The cluster runs over mutual TLS with roles, as across real machines:
    // a CA, the coordinator's certificate for its address, one certificate
    // per worker and one for the client.
    certs_ = root_ + "/certs";
    ASSERT_TRUE(InitCertificateAuthority(certs_, "netns-test").ok());
    ASSERT_TRUE(IssueCertificateFiles(certs_, {PeerRole::kCoordinator,
                                               "coordinator",
                                               {absl::StrCat(kSubnet, kCoordinatorHost)}})
                    .ok());
    for (const char* name : {"netns-w1", "netns-w2", "netns-w3"}) {
      ASSERT_TRUE(IssueCertificateFiles(certs_, {PeerRole::kWorker, name, {}}).ok());
    }
    ASSERT_TRUE(IssueCertificateFiles(certs_, {PeerRole::kClient, "netns-client", {}}).ok());
  }

  // --tls-ca, --tls-cert and --tls-key for the certificate `name`.
  std::vector<std::string> Tls(const std::string& name) const {
    return {"--tls-ca",  certs_ + "/ca.crt",          "--tls-cert", certs_ + "/" + name + ".crt",
            "--tls-key", certs_ + "/" + name + ".key"};
  }

  // `argv` with `more` appended.
  static std::vector<std::string> With(std::vector<std::string> argv,
                                       const std::vector<std::string>& more) {
    argv.insert(argv.end(), more.begin(), more.end());
    return argv;
  }

  void TearDown() override {
    // Processes first, then the namespaces they live in.
    workers_.clear();
    coordinator_.reset();
    network_.reset();
  }

  // A coordinator with a fresh state dir (so nothing is cached) and three
  // workers, each in its namespace.
  void StartCluster(const std::string& run) {
    workers_.clear();
    coordinator_.reset();
    auto coordinator = testing::BackgroundProcess::Start(
        network_->In("coordinator",
                     With({testing::BinaryPath("distcc-cuda-coordinator"), "--listen",
                           absl::StrCat(kSubnet, kCoordinatorHost, ":0"), "--state-dir",
                           root_ + "/" + run + "/state", "--heartbeat-timeout-s", "3"},
                          Tls("coordinator"))),
        root_ + "/" + run + "-coordinator.log");
    ASSERT_TRUE(coordinator.ok());
    coordinator_ = std::move(*coordinator);
    absl::StatusOr<std::string> line = coordinator_->WaitForLog("listening on ", absl::Seconds(20));
    ASSERT_TRUE(line.ok()) << line.status();
    address_ = line->substr(line->find("listening on ") + 13);
    for (int i = 1; i <= 3; ++i) {
      std::string role = absl::StrCat("w", i);
      auto worker = testing::BackgroundProcess::Start(
          network_->In(role,
                       With({testing::BinaryPath("distcc-cuda-worker"), "--coordinator", address_,
                             "--name", "netns-" + role, "--slots", "1", "--memory-cap", "4GiB",
                             "--nvcc", nvcc_, "--work-dir", root_ + "/" + run + "/" + role},
                            Tls("netns-" + role))),
          root_ + "/" + run + "-" + role + ".log");
      ASSERT_TRUE(worker.ok());
      workers_.push_back(std::move(*worker));
    }
    for (auto& worker : workers_) {
      ASSERT_TRUE(worker->WaitForLog("registered", absl::Seconds(60)).ok()) << worker->Log();
    }
  }

  // `distcc-cuda build` of examples/attention from the client's namespace.
  ProcessResult Build(const std::string& out) {
    return testing::RunToEnd(
        network_->In("client", With({testing::BinaryPath("distcc-cuda"), "build",
                                     testing::SourceDir() + "/examples/attention/kernels.toml",
                                     "--coordinator", address_, "-o", out, "--nvcc", nvcc_},
                                    Tls("netns-client"))));
  }

  std::string nvcc_;
  std::string root_;
  std::string certs_;
  std::string address_;
  std::unique_ptr<Network> network_;
  std::unique_ptr<testing::BackgroundProcess> coordinator_;
  std::vector<std::unique_ptr<testing::BackgroundProcess>> workers_;
};

// Which worker each unit's final result came from, from the build's lines
// "  [k/n] UNIT   WORKER   1.2 s  peak ...".
std::map<std::string, std::string> FinishedOn(const std::string& output) {
  static const std::regex kLine(R"(\] (\S+) +(\S+) +[0-9.]+ s  peak)");
  std::map<std::string, std::string> on;
  for (std::sregex_iterator it(output.begin(), output.end(), kLine), end; it != end; ++it) {
    on[(*it)[1]] = (*it)[2];
  }
  return on;
}

TEST_F(NetnsTest, BuildAcrossNamespacesSurvivesAWorkerLosingItsLink) {
  ASSERT_NO_FATAL_FAILURE(StartCluster("first"));
  ProcessResult first = Build(root_ + "/first-out");
  ASSERT_EQ(first.exit_code, 0) << first.stdout_text << first.stderr_text;
  EXPECT_THAT(first.stdout_text, HasSubstr("units     25 (25 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(first.stdout_text, HasSubstr("workers   3 (netns-w"));

  // Again on a fresh cluster, with worker 2's link cut while it compiles.
  ASSERT_NO_FATAL_FAILURE(StartCluster("second"));
  std::future<ProcessResult> second =
      std::async(std::launch::async, [&] { return Build(root_ + "/second-out"); });
  ASSERT_TRUE(workers_[1]->WaitForLog("runs unit", absl::Seconds(120)).ok()) << workers_[1]->Log();
  ASSERT_TRUE(network_->Cut("w2").ok());
  ASSERT_EQ(second.wait_for(std::chrono::minutes(10)), std::future_status::ready);
  ProcessResult result = second.get();
  ASSERT_EQ(result.exit_code, 0) << result.stdout_text << result.stderr_text;
  EXPECT_THAT(result.stdout_text, HasSubstr("units     25 (25 compiled, 0 cached, 0 failed)"));

  // The units the cut worker held were re-queued and finished elsewhere.
  static const std::regex kRequeued(R"(re-queued (\S+): worker netns-w2 sent no heartbeat)");
  std::map<std::string, std::string> finished_on = FinishedOn(result.stdout_text);
  EXPECT_EQ(finished_on.size(), 25u) << result.stdout_text;
  int requeued = 0;
  for (std::sregex_iterator it(result.stdout_text.begin(), result.stdout_text.end(), kRequeued),
       end;
       it != end; ++it) {
    ++requeued;
    std::string unit = (*it)[1];
    ASSERT_TRUE(finished_on.count(unit)) << unit;
    EXPECT_THAT(finished_on[unit], ::testing::AnyOf("netns-w1", "netns-w3")) << unit;
  }
  EXPECT_GE(requeued, 1) << result.stdout_text;

  // The same library, but for nvcc's own temporary file names.
  absl::StatusOr<std::string> a = ReadFile(root_ + "/first-out/libattention_sm100.so");
  absl::StatusOr<std::string> b = ReadFile(root_ + "/second-out/libattention_sm100.so");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), b->size());
  EXPECT_TRUE(WithoutNvccTempNames(*a) == WithoutNvccTempNames(*b))
      << "the two libraries differ beyond nvcc's temporary file names";
  absl::StatusOr<std::vector<DeviceImage>> images_a =
      ReadDeviceImages(root_ + "/first-out/libattention_sm100.so");
  absl::StatusOr<std::vector<DeviceImage>> images_b =
      ReadDeviceImages(root_ + "/second-out/libattention_sm100.so");
  ASSERT_TRUE(images_a.ok() && images_b.ok());
  EXPECT_TRUE(*images_a == *images_b) << "device code differs";
}

}  // namespace
}  // namespace distcc_cuda
