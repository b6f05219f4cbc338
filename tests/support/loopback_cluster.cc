// SPDX-License-Identifier: Apache-2.0
#include "tests/support/loopback_cluster.h"

#include "absl/strings/str_cat.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::testing {

absl::StatusOr<std::unique_ptr<LoopbackCluster>> LoopbackCluster::Start(
    const std::string& root, const std::string& nvcc, const std::vector<LoopbackWorker>& workers,
    const std::vector<std::string>& coordinator_arguments) {
  auto cluster = std::unique_ptr<LoopbackCluster>(new LoopbackCluster());
  std::vector<std::string> coordinator_argv = {BinaryPath("distcc-cuda-coordinator"), "--listen",
                                               "127.0.0.1:0", "--state-dir", root + "/state"};
  coordinator_argv.insert(coordinator_argv.end(), coordinator_arguments.begin(),
                          coordinator_arguments.end());
  auto coordinator = BackgroundProcess::Start(coordinator_argv, root + "/coordinator.log");
  if (!coordinator.ok()) return coordinator.status();
  cluster->coordinator_ = std::move(*coordinator);
  absl::StatusOr<std::string> line =
      cluster->coordinator_->WaitForLog("listening on ", absl::Seconds(20));
  if (!line.ok()) return line.status();
  cluster->address_ = line->substr(line->find("listening on ") + 13);
  for (const LoopbackWorker& spec : workers) {
    std::vector<std::string> argv = {BinaryPath("distcc-cuda-worker"),
                                     "--coordinator",
                                     cluster->address_,
                                     "--name",
                                     spec.name,
                                     "--slots",
                                     std::to_string(spec.slots),
                                     "--memory-cap",
                                     spec.memory_cap,
                                     "--nvcc",
                                     nvcc,
                                     "--work-dir",
                                     root + "/" + spec.name};
    if (!spec.sandbox) argv.push_back("--insecure-no-sandbox");
    argv.insert(argv.end(), spec.arguments.begin(), spec.arguments.end());
    auto worker = BackgroundProcess::Start(argv, root + "/" + spec.name + ".log");
    if (!worker.ok()) return worker.status();
    absl::StatusOr<std::string> registered = (*worker)->WaitForLog("registered", absl::Seconds(60));
    if (!registered.ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat("worker ", spec.name, " did not register:\n", (*worker)->Log()));
    }
    cluster->workers_.push_back(std::move(*worker));
  }
  return cluster;
}

}  // namespace distcc_cuda::testing
