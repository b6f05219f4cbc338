// SPDX-License-Identifier: Apache-2.0
// Whether `distcc-cuda status` waits behind a large plan (issue 30, finding
// 2): against a running coordinator (--coordinator, started by
// ./bench/status_behind_plan.sh on loopback), one idle worker registered
// over raw gRPC, GetClusterStatus is called every 20 ms while a client
// submits one instantiation set of --side x --side points (one
// instantiation per unit), the build is accepted and admitted, and its
// client then leaves (the coordinator cancels its units). The latency of
// each status call is kept by phase: idle before the submit, while the
// build is planned (until it is accepted), and after (admission and the
// cancel of every unit). With --coordinator_pid, also the coordinator's
// CPU time from the submit to 3 s after the client left, and its peak
// resident memory.
//
// Last line: points=… accept_s=… status_calls=… idle_max_ms=… planning_max_ms=…
//            planning_p50_ms=… after_max_ms=… coordinator_cpu_s=… coordinator_peak_mb=…
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "distcc_cuda/v1/build.grpc.pb.h"
#include "distcc_cuda/v1/worker.grpc.pb.h"

ABSL_FLAG(std::string, coordinator, "", "the coordinator's address (host:port)");
ABSL_FLAG(int, side, 316, "values on each of the grid's two axes");
ABSL_FLAG(int, coordinator_pid, 0, "the coordinator's process (its CPU time and peak are read)");

namespace {

using namespace distcc_cuda;  // NOLINT: a bench's main file

enum Phase { kIdle, kPlanning, kAfter, kPhases };

// Status latencies in milliseconds, by phase.
struct Latencies {
  absl::Mutex mu;
  std::vector<double> ms[kPhases] ABSL_GUARDED_BY(mu);
};

// The CPU seconds (user and system) and the peak resident MiB of `pid`, 0
// when unknown.
std::pair<double, double> ProcessUse(int pid) {
  if (pid <= 0) return {0, 0};
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::vector<std::string> fields = absl::StrSplit(text.substr(text.rfind(')') + 2), ' ');
  double ticks = 0;
  // utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the name.
  if (fields.size() > 13) ticks = std::stod(fields[11]) + std::stod(fields[12]);
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  double peak_mb = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) peak_mb = std::stod(line.substr(6)) / 1024;
  }
  return {ticks / sysconf(_SC_CLK_TCK), peak_mb};
}

double Percentile(std::vector<double> values, double share) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(share * values.size()))];
}

v1::SubmitBuildRequest Grid(int side, const v1::ToolchainFingerprint& toolchain) {
  v1::SubmitBuildRequest request;
  request.set_build_name("status behind a plan");
  *request.mutable_toolchain() = toolchain;
  request.set_workspace_root("/tmp/status-behind-plan");
  v1::InstantiationSet* set = request.add_instantiation_sets();
  set->set_name("grid");
  set->set_unit_name_template("grid_{a}_{b}");
  set->set_text_template("template void grid_kernel<{a}, {b}>();\n");
  set->set_instantiations_per_unit(1);
  set->set_manifest_location("bench:1");
  for (const char* name : {"a", "b"}) {
    v1::InstantiationAxis* axis = set->add_axes();
    axis->set_name(name);
    for (int i = 0; i < side; ++i) axis->add_values(absl::StrCat(i));
  }
  return request;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto channel =
      grpc::CreateChannel(absl::GetFlag(FLAGS_coordinator), grpc::InsecureChannelCredentials());
  auto builds = v1::BuildService::NewStub(channel);
  auto workers = v1::WorkerService::NewStub(channel);
  v1::ToolchainFingerprint toolchain;
  toolchain.set_digest("bench-toolchain");

  v1::RegisterWorkerRequest worker;
  worker.set_name("idle");
  *worker.mutable_toolchain() = toolchain;
  worker.set_memory_cap_bytes(int64_t{64} << 30);
  worker.set_slots(1);
  worker.set_memory_mechanism("none (bench)");
  worker.set_sandbox("none (bench)");
  worker.set_reads_input_trees(true);
  v1::RegisterWorkerResponse registered;
  {
    grpc::ClientContext context;
    grpc::Status status = workers->RegisterWorker(&context, worker, &registered);
    if (!status.ok()) {
      fprintf(stderr, "status_behind_plan: cannot register: %s\n", status.error_message().c_str());
      return 1;
    }
  }

  std::atomic<int> phase{kIdle};
  std::atomic<bool> stop{false};
  Latencies latencies;
  std::thread poller([&] {
    while (!stop) {
      const int now = phase;
      grpc::ClientContext context;
      v1::ClusterStatus status;
      const absl::Time start = absl::Now();
      builds->GetClusterStatus(&context, v1::GetClusterStatusRequest(), &status);
      const double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
      {
        absl::MutexLock lock(&latencies.mu);
        latencies.ms[now].push_back(ms);
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  std::thread heartbeat([&] {
    while (!stop) {
      grpc::ClientContext context;
      v1::HeartbeatRequest beat;
      beat.set_worker_id(registered.worker_id());
      v1::HeartbeatResponse answer;
      workers->Heartbeat(&context, beat, &answer);
      absl::SleepFor(absl::Milliseconds(500));
    }
  });

  absl::SleepFor(absl::Seconds(1));
  const int pid = absl::GetFlag(FLAGS_coordinator_pid);
  const double cpu_before = ProcessUse(pid).first;
  const v1::SubmitBuildRequest request = Grid(absl::GetFlag(FLAGS_side), toolchain);
  phase = kPlanning;
  const absl::Time submitted = absl::Now();
  double accept_s = -1;
  {
    grpc::ClientContext context;
    auto reader = builds->SubmitBuild(&context, request);
    v1::BuildEvent event;
    if (reader->Read(&event)) accept_s = absl::ToDoubleSeconds(absl::Now() - submitted);
    phase = kAfter;
    context.TryCancel();  // the client leaves: every unit is cancelled
    grpc::Status ended = reader->Finish();
    if (accept_s < 0) {
      fprintf(stderr, "status_behind_plan: the build was not accepted: %s\n",
              ended.error_message().c_str());
    }
  }
  absl::SleepFor(absl::Seconds(3));
  const auto [cpu_after, peak_mb] = ProcessUse(pid);
  stop = true;
  poller.join();
  heartbeat.join();

  absl::MutexLock lock(&latencies.mu);
  size_t calls = 0;
  for (const auto& phase_ms : latencies.ms) calls += phase_ms.size();
  printf(
      "points=%d accept_s=%.1f status_calls=%zu idle_max_ms=%.0f planning_max_ms=%.0f "
      "planning_p50_ms=%.0f after_max_ms=%.0f coordinator_cpu_s=%.1f coordinator_peak_mb=%.0f\n",
      request.instantiation_sets(0).axes(0).values_size() *
          request.instantiation_sets(0).axes(1).values_size(),
      accept_s, calls, Percentile(latencies.ms[kIdle], 1), Percentile(latencies.ms[kPlanning], 1),
      Percentile(latencies.ms[kPlanning], 0.5), Percentile(latencies.ms[kAfter], 1),
      cpu_after - cpu_before, peak_mb);
  return accept_s < 0 ? 1 : 0;
}
