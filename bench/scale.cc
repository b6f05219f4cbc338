// SPDX-License-Identifier: Apache-2.0
// The coordinator at the size of a full CUTLASS sm100 library, in one
// process and without the network: N units (default 55,000) whose inputs
// are their own source, the core of a shared tree of H headers (default
// 3,000) and their kernel family's headers, sent as input trees and a
// BuildPlan blob, planned (plan read,
// trees read and checked once, units keyed and predicted, the result cache
// asked), then dispatched by the scheduler to W simulated workers (default
// 1,000) that report each unit done at once. Prints one line:
//   units=… submit_s=… plan_blob_mb=… coordinator_rss_mb=… units_per_s=… p99_dispatch_ms=…
// submit_s: the client's trees and plan blob plus the coordinator's
// planning; coordinator_rss_mb: resident memory added by planning and
// holding the build; units_per_s: leases and reports through the scheduler
// (no RPCs, no compiles: the scheduler's own ceiling); p99_dispatch_ms:
// the 99th percentile of one RequestLease that hands out a unit.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/unit_request.h"
#include "common/cas_client.h"
#include "common/cas_store.h"
#include "common/files.h"
#include "common/input_tree.h"
#include "common/nvcc_args.h"
#include "coordinator/build_inputs.h"
#include "coordinator/build_planner.h"
#include "coordinator/memory_model.h"
#include "coordinator/result_cache.h"
#include "coordinator/scheduler.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(int, units, 55000, "compile units in the build");
ABSL_FLAG(int, headers, 3000, "headers in the shared tree");
ABSL_FLAG(int, headers_per_unit, 200, "headers each unit includes (a window of the tree)");
ABSL_FLAG(int, workers, 1000, "simulated workers (1 slot each)");
ABSL_FLAG(std::string, dir, "/tmp", "where the bench's store goes (removed at the end)");

namespace distcc_cuda {
namespace {

double ResidentMiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    long kib = 0;
    if (std::sscanf(line.c_str(), "VmRSS: %ld kB", &kib) == 1) return kib / 1024.0;
  }
  return 0;
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

int Run() {
  spdlog::set_level(spdlog::level::warn);
  const int units = absl::GetFlag(FLAGS_units);
  const int headers = absl::GetFlag(FLAGS_headers);
  const int per_unit = std::min(absl::GetFlag(FLAGS_headers_per_unit), headers);
  const int workers = absl::GetFlag(FLAGS_workers);
  absl::StatusOr<std::string> dir = MakeTempDirectory(absl::GetFlag(FLAGS_dir), "scale-bench-");
  if (!dir.ok()) {
    std::cerr << dir.status() << "\n";
    return 1;
  }
  auto cas = CasStore::Open(*dir + "/cas", 0);
  if (!cas.ok()) {
    std::cerr << cas.status() << "\n";
    return 1;
  }
  // Set-up, not timed: the workspace's headers and sources as files on disk
  // and their bytes in the store, as the client's upload would leave them;
  // each kernel family's closure (as the scan found it: the library's core
  // headers, 3/4 of a unit's, which every unit includes, and those of the
  // collective and epilogue it instantiates, one family of 200).
  absl::Time setup = absl::Now();
  const std::string root = *dir + "/src/cutlass";
  const std::string generated = "build/tools/library/generated/gemm/100";
  std::vector<std::string> header_paths;
  for (int h = 0; h < headers; ++h) {
    header_paths.push_back(absl::StrFormat(
        "%s/include/cutlass/gemm/collective/folder_%02d/sm100_header_%04d.hpp", root, h % 60, h));
  }
  auto write = [&](const std::string& path, const std::string& bytes) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << bytes;
    return (*cas)->PutBytes(bytes).ok();
  };
  for (int h = 0; h < headers; ++h) {
    if (!write(header_paths[h], absl::StrCat("// header ", h, "\n"))) return 1;
  }
  for (int u = 0; u < units; ++u) {
    if (!write(absl::StrFormat("%s/%s/cutlass3x_sm100_tensorop_gemm_%05d.cu", root, generated, u),
               absl::StrCat("// gemm unit ", u, "\n"))) {
      return 1;
    }
  }
  const int core = per_unit * 3 / 4;
  const int spread = std::max(1, headers - core);
  std::vector<std::vector<std::string>> closures(std::min(units, 200));
  for (size_t family = 0; family < closures.size(); ++family) {
    const int first = core + static_cast<int>((static_cast<int64_t>(family) * 7919) % spread);
    for (int i = 0; i < core; ++i) closures[family].push_back(header_paths[i]);
    for (int i = 0; i < per_unit - core; ++i) {
      closures[family].push_back(header_paths[core + (first - core + i) % spread]);
    }
  }
  std::cerr << "set-up " << Seconds(absl::Now() - setup) << " s\n";

  // The client, as `distcc-cuda build` sends a build (AddUnitInputs): each
  // source hashed, its family's headers moved into a tree made once per
  // distinct closure, the source beside it; the units checked; the folders
  // each once, and the units packed into a plan blob.
  const double rss_start = ResidentMiB();
  absl::Time submit = absl::Now();
  v1::SubmitBuildRequest request;
  request.set_build_name("cutlass sm100");
  request.mutable_toolchain()->set_digest("bench-toolchain");
  request.set_workspace_root(root);
  client::WorkspaceFiles files;
  const std::vector<std::string> system_prefixes = SystemIncludePrefixes();
  for (int u = 0; u < units; ++u) {
    v1::CompileUnit* unit = request.add_units();
    std::string name = absl::StrFormat("cutlass3x_sm100_tensorop_gemm_%05d", u);
    unit->set_name(name);
    unit->set_working_directory(generated);
    for (const char* flag : {"-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1", "-DCUTLASS_VERSIONS_GENERATED",
                             "-I../../../../../include", "-I../../../../../tools/library/include",
                             "-O3", "-std=c++17", "--expt-relaxed-constexpr",
                             "-gencode=arch=compute_100a,code=[sm_100a]", "-Xcompiler=-fPIC"}) {
      unit->add_arguments(flag);
    }
    for (const std::string& argument :
         {std::string("-c"), name + ".cu", std::string("-o"), name + ".cu.o"}) {
      unit->add_arguments(argument);
    }
    unit->add_output_paths(name + ".cu.o");
    unit->set_workspace_root(root);
    // The scan's closure is the family's headers; the source goes beside.
    absl::Status added = client::AddUnitInputs(*unit, closures[u % closures.size()],
                                               absl::StrCat(root, "/", generated, "/", name, ".cu"),
                                               files, system_prefixes);
    if (!added.ok()) {
      std::cerr << added << "\n";
      return 1;
    }
  }
  client::PackLargeBuild(request, files);
  const absl::Duration request_time = absl::Now() - submit;
  // What the upload leaves in the coordinator's store: the folders in
  // batches of the client's size, each stored as BatchUpdateBlobs stores
  // one (PutMany), and the plan blob (Put, as WriteBlob commits it); no
  // network.
  std::vector<std::pair<Digest, absl::string_view>> batch;
  int64_t batch_bytes = 0;
  auto store_batch = [&]() {
    for (const absl::Status& stored : (*cas)->PutMany(batch)) {
      if (!stored.ok()) std::cerr << stored << "\n";
    }
    batch.clear();
    batch_bytes = 0;
  };
  for (const BlobSource& blob : files.folders) {
    if (batch_bytes + blob.digest.size_bytes > kMaxBatchBytes - (64 << 10)) store_batch();
    batch.emplace_back(blob.digest, blob.bytes);
    batch_bytes += blob.digest.size_bytes + 128;
  }
  store_batch();
  const absl::Duration folders_time = absl::Now() - submit - request_time;
  for (const BlobSource& blob : files.plan) (void)(*cas)->Put(blob.digest, blob.bytes);
  const double plan_blob_mb =
      files.plan.empty() ? 0 : files.plan.front().digest.size_bytes / 1048576.0;
  const size_t folders = files.folders.size();
  const size_t distinct_trees = files.roots.size();
  files = client::WorkspaceFiles();
  const absl::Duration client_time = absl::Now() - submit;
  std::cerr << "client: " << units << " units, " << distinct_trees << " distinct trees, " << folders
            << " folders, plan blob " << plan_blob_mb << " MiB in " << Seconds(client_time)
            << " s (request " << Seconds(request_time) << " s, folders stored "
            << Seconds(folders_time) << " s, plan stored and memory freed "
            << Seconds(client_time - request_time - folders_time) << " s)\n";

  // The coordinator: what BuildService::Start does before the scheduler.
  const double rss_before = ResidentMiB();
  absl::Time plan_start = absl::Now();
  coordinator::BuildLimits limits;
  absl::StatusOr<v1::SubmitBuildRequest> read = coordinator::ReadBuildPlan(request, **cas);
  if (!read.ok()) {
    std::cerr << read.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<coordinator::BuildInputs>> trees =
      coordinator::BuildInputs::Read(*read, **cas, limits);
  if (!trees.ok()) {
    std::cerr << trees.status() << "\n";
    return 1;
  }
  const absl::Duration expand_time = absl::Now() - plan_start;
  auto history = coordinator::PeakHistory::Open("", {});
  coordinator::ResultCache results(*dir + "/results", cas->get());
  absl::StatusOr<std::vector<coordinator::PlannedUnit>> planned = coordinator::PlanBuild(
      *read, **cas, history->get(),
      coordinator::ClusterCapacity{int64_t{60} << 30, workers, int64_t{60} << 30}, nullptr, limits,
      nullptr, nullptr, trees->get());
  if (!planned.ok()) {
    std::cerr << planned.status() << "\n";
    return 1;
  }
  *read = v1::SubmitBuildRequest();
  trees->reset();
  const absl::Duration planbuild_time = absl::Now() - plan_start - expand_time;
  std::map<int, v1::TaskResult> cached;
  for (size_t i = 0; i < planned->size(); ++i) {
    if (auto hit = results.Lookup((*planned)[i].action_digest)) cached[i] = *hit;
  }
  const absl::Duration plan_time = absl::Now() - plan_start;
  std::cerr << "coordinator: planned " << planned->size() << " units in " << Seconds(plan_time)
            << " s (plan read and trees checked " << Seconds(expand_time) << " s, PlanBuild "
            << Seconds(planbuild_time) << " s, result cache "
            << Seconds(plan_time - expand_time - planbuild_time) << " s)\n";

  // The scheduler: W one-slot workers lease and report until all is done.
  coordinator::BuildScheduler scheduler(
      coordinator::SchedulerOptions{}, [](const std::string&, const v1::TaskResult&) {},
      history->get());
  absl::Time now = absl::Now();
  std::vector<std::string> ids;
  v1::ToolchainFingerprint toolchain;
  toolchain.set_digest("bench-toolchain");
  for (int w = 0; w < workers; ++w) {
    v1::RegisterWorkerRequest worker;
    worker.set_name(absl::StrCat("worker-", w));
    *worker.mutable_toolchain() = toolchain;
    worker.set_memory_cap_bytes(int64_t{64} << 30);
    worker.set_slots(1);
    ids.push_back(*scheduler.RegisterWorker(worker, now));
  }
  int finished = 0;
  absl::StatusOr<std::string> build = scheduler.SubmitBuild(
      request.build_name(), toolchain, std::move(*planned), std::move(cached),
      [&finished](const v1::BuildEvent& event) {
        if (event.has_unit_finished()) ++finished;
      },
      now);
  if (!build.ok()) {
    std::cerr << build.status() << "\n";
    return 1;
  }
  const double rss_mb = ResidentMiB() - rss_before;
  std::vector<double> dispatch_ms;
  absl::Time run_start = absl::Now();
  for (int round = 0; finished < units && round < units + 10; ++round) {
    std::vector<std::pair<std::string, v1::Task>> leased;
    for (const std::string& id : ids) {
      std::optional<v1::Task> task;
      absl::Time asked = absl::Now();
      absl::Status status = scheduler.RequestLease(
          id, asked, [&task](std::optional<v1::Task> t) { task = std::move(t); }, asked);
      if (!status.ok()) {
        std::cerr << status << "\n";
        return 1;
      }
      if (task) {
        dispatch_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - asked));
        leased.emplace_back(id, std::move(*task));
      }
    }
    for (auto& [id, task] : leased) {
      v1::ReportResultRequest report;
      report.set_worker_id(id);
      report.set_task_id(task.task_id());
      v1::TaskResult* result = report.mutable_result();
      result->set_outcome(v1::TASK_COMPLETED);
      result->set_wall_time_ms(1000);
      result->set_peak_memory_bytes(int64_t{1} << 30);
      result->set_toolchain_digest("bench-toolchain");
      v1::OutputFile* output = result->add_outputs();
      output->set_path(task.unit().output_paths(0));
      *output->mutable_digest() = ToProto(DigestOf(task.unit().name()));
      absl::Status status = scheduler.ReportResult(report, absl::Now());
      if (!status.ok()) {
        std::cerr << status << "\n";
        return 1;
      }
    }
  }
  const absl::Duration run_time = absl::Now() - run_start;
  std::sort(dispatch_ms.begin(), dispatch_ms.end());
  const double p99 =
      dispatch_ms.empty()
          ? 0
          : dispatch_ms[std::min(dispatch_ms.size() - 1, dispatch_ms.size() * 99 / 100)];
  RemoveAll(*dir).IgnoreError();
  if (finished != units) {
    std::cerr << "only " << finished << " of " << units << " units finished\n";
    return 1;
  }
  std::printf(
      "units=%d headers=%d headers_per_unit=%d workers=%d submit_s=%.2f (client %.2f, plan %.2f) "
      "plan_blob_mb=%.1f coordinator_rss_mb=%.0f units_per_s=%.0f p99_dispatch_ms=%.3f\n",
      units, headers, per_unit, workers, Seconds(client_time + plan_time), Seconds(client_time),
      Seconds(plan_time), plan_blob_mb, rss_mb, units / Seconds(run_time), p99);
  (void)rss_start;
  return 0;
}

}  // namespace
}  // namespace distcc_cuda

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return distcc_cuda::Run();
}
