// SPDX-License-Identifier: Apache-2.0
// The coordinator at the size of a full CUTLASS sm100 library, in one
// process and without the network: N units (default 55,000) whose inputs
// are their own source, the core of a shared tree of H headers (default
// 3,000) and their kernel family's headers, sent in parts of P units
// (default 5,000) as input trees and BuildPlan blobs, each part planned
// (plan read, trees read and checked, units keyed and predicted, the result
// cache asked: PlanPart) while the client makes the next, then dispatched
// by the scheduler to W simulated workers (default 1,000) that report each
// unit done at once. Prints one line:
//   units=… parts=… submit_s=… plan_blob_mb=… coordinator_rss_mb=… units_per_s=… p99_dispatch_ms=…
//   lock_p50_us=… lock_p99_us=…
// submit_s: from the start of the first part to the last part planned (the
// client makes its parts in a process of its own and sends them through a
// pipe, as it would over gRPC, while the coordinator stores their blobs and
// plans the part before); coordinator_rss_mb: resident memory the
// coordinator's process added, storing, planning and holding the build;
// units_per_s: leases and reports through the scheduler
// (no RPCs, no compiles: the scheduler's own ceiling); p99_dispatch_ms:
// the 99th percentile of one RequestLease that hands out a unit;
// lock_p50_us, lock_p99_us: how long each call held the scheduler's lock
// (SchedulerMetrics::LockHoldQuantile, to within its bucket's factor of two).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
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
#include "client/plan/unit_request.h"
#include "common/base/files.h"
#include "common/nvcc/nvcc_args.h"
#include "common/store/cas_client.h"
#include "common/store/cas_store.h"
#include "common/store/input_tree.h"
#include "coordinator/memory/memory_model.h"
#include "coordinator/planning/build_inputs.h"
#include "coordinator/planning/build_planner.h"
#include "coordinator/planning/result_cache.h"
#include "coordinator/scheduler/scheduler.h"
#include "coordinator/services/build_service.h"
#include "distcc_cuda/v1/cas.pb.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(int, units, 55000, "compile units in the build");
ABSL_FLAG(int, headers, 3000, "headers in the shared tree");
ABSL_FLAG(int, headers_per_unit, 200, "headers each unit includes (a window of the tree)");
ABSL_FLAG(int, workers, 1000, "simulated workers (1 slot each)");
ABSL_FLAG(std::string, dir, "/tmp", "where the bench's store goes (removed at the end)");
ABSL_FLAG(int, part_units, 5000,
          "units per part the client sends (what its scans finished while the part before went)");

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

// A message on a pipe: its length in 8 bytes, then its bytes.
bool WriteMessage(int fd, const google::protobuf::Message& message) {
  std::string bytes = message.SerializeAsString();
  const uint64_t size = bytes.size();
  bytes.insert(0, reinterpret_cast<const char*>(&size), sizeof(size));
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) return false;
    done += n;
  }
  return true;
}

bool ReadExactly(int fd, char* into, size_t size) {
  for (size_t done = 0; done < size;) {
    ssize_t n = read(fd, into + done, size - done);
    if (n <= 0) return false;
    done += n;
  }
  return true;
}

bool ReadMessage(int fd, google::protobuf::Message& message) {
  uint64_t size = 0;
  if (!ReadExactly(fd, reinterpret_cast<char*>(&size), sizeof(size))) return false;
  std::string bytes(size, '\0');
  return ReadExactly(fd, bytes.data(), size) && message.ParseFromString(bytes);
}

// The client process: makes the build's parts of `part_units` units and
// writes each to `fd` (its new blobs, then the part). Returns its exit code.
int SendParts(int fd, const std::string& root, const std::string& generated,
              const std::vector<std::vector<std::string>>& closures, int units, int part_units) {
  client::WorkspaceFiles files;
  const client::WorkspaceLayout layout = client::WorkspaceLayout::Relocated(root);
  const std::vector<std::string> system_prefixes = SystemIncludePrefixes();
  size_t folders_sent = 0;
  for (int first = 0; first < units; first += part_units) {
    v1::AddUnitsRequest part;
    part.set_workspace_root("/");
    for (int u = first; u < std::min(units, first + part_units); ++u) {
      v1::CompileUnit* unit = part.add_units();
      std::string name = absl::StrFormat("cutlass3x_sm100_tensorop_gemm_%05d", u);
      unit->set_name(name);
      client::PlaceUnit(*unit, layout, absl::StrCat(root, "/", generated));
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
      // The scan's closure is the family's headers; the source goes beside.
      absl::Status added = client::AddUnitInputs(
          *unit, closures[u % closures.size()],
          absl::StrCat(root, "/", generated, "/", name, ".cu"), layout, files, system_prefixes);
      if (!added.ok()) {
        std::cerr << added << "\n";
        return 1;
      }
    }
    part.set_last(first + part_units >= units);
    client::PackLargeBuild(part, files);
    v1::BatchUpdateBlobsRequest blobs;
    for (; folders_sent < files.folders.size(); ++folders_sent) {
      auto* blob = blobs.add_blobs();
      *blob->mutable_digest() = ToProto(files.folders[folders_sent].digest);
      blob->set_data(files.folders[folders_sent].bytes);
    }
    for (const BlobSource& plan : files.plan) {
      auto* blob = blobs.add_blobs();
      *blob->mutable_digest() = ToProto(plan.digest);
      blob->set_data(plan.bytes);
    }
    files.plan.clear();
    if (!WriteMessage(fd, blobs) || !WriteMessage(fd, part)) return 1;
  }
  return 0;
}

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

  // The client, in a process of its own as `distcc-cuda build` is, sends
  // the build in parts (its BuildSubmission): each source hashed
  // (AddUnitInputs), its family's headers moved into a tree made once per
  // distinct closure, the source beside it; the units checked; the part's
  // new folders and its units packed into a plan blob. It writes each part
  // to a pipe as its upload would send it (the blobs as one
  // BatchUpdateBlobsRequest, then the AddUnitsRequest), and makes the next
  // while the coordinator plans the one before.
  const int part_units = std::max(1, absl::GetFlag(FLAGS_part_units));
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) {
    std::cerr << "pipe: " << std::strerror(errno) << "\n";
    return 1;
  }
  const double rss_before = ResidentMiB();
  const absl::Time submit = absl::Now();
  const pid_t client = fork();
  if (client < 0) {
    std::cerr << "fork: " << std::strerror(errno) << "\n";
    return 1;
  }
  if (client == 0) {
    close(pipe_fds[0]);
    _exit(SendParts(pipe_fds[1], root, generated, closures, units, part_units));
  }
  close(pipe_fds[1]);

  // The coordinator, in this process: what its ContentStore does with the
  // blobs (BatchUpdateBlobs: PutMany) and its BuildService with each part
  // before the scheduler (PlanPart: plan read, trees read and checked,
  // units keyed and predicted, the result cache asked).
  // The result cache and the history on disk, as the coordinator keeps them:
  // each unit's result is written (with its fsyncs) and its run appended.
  auto history = coordinator::PeakHistory::Open(*dir + "/history.tsv", {});
  coordinator::ResultCache results(*dir + "/results", cas->get());
  auto metrics = std::make_shared<coordinator::SchedulerMetrics>();
  coordinator::BuildScheduler scheduler(
      coordinator::SchedulerOptions{},
      [&results](const std::string& action, const v1::TaskResult& result) {
        results.Record(action, result);
      },
      history->get(), nullptr, metrics);
  v1::ToolchainFingerprint toolchain;
  toolchain.set_digest("bench-toolchain");
  std::vector<std::string> ids;
  for (int w = 0; w < workers; ++w) {
    v1::RegisterWorkerRequest worker;
    worker.set_name(absl::StrCat("worker-", w));
    *worker.mutable_toolchain() = toolchain;
    worker.set_memory_cap_bytes(int64_t{64} << 30);
    worker.set_slots(1);
    ids.push_back(*scheduler.RegisterWorker(worker, submit));
  }
  v1::SubmitBuildRequest header;
  header.set_build_name("cutlass sm100");
  *header.mutable_toolchain() = toolchain;
  int finished = 0;
  absl::StatusOr<std::string> build = scheduler.SubmitBuild(
      header.build_name(), toolchain, {}, {},
      [&finished](const v1::BuildEvent& event) {
        if (event.has_unit_finished()) ++finished;
      },
      submit, /*more_to_come=*/true);
  if (!build.ok()) {
    std::cerr << build.status() << "\n";
    return 1;
  }
  std::unique_ptr<CasPin> pin = (*cas)->Pin({});
  coordinator::Planning planning{};
  planning.cas = cas->get();
  planning.results = &results;
  planning.history = history->get();
  planning.scheduler = &scheduler;
  absl::Duration store_busy, plan_busy;
  int part_count = 0;
  double plan_blob_mb = 0;
  for (bool last = false; !last;) {
    v1::BatchUpdateBlobsRequest blobs;
    v1::AddUnitsRequest part;
    if (!ReadMessage(pipe_fds[0], blobs) || !ReadMessage(pipe_fds[0], part)) {
      std::cerr << "the client process ended before its last part\n";
      return 1;
    }
    const absl::Time began = absl::Now();
    std::vector<std::pair<Digest, absl::string_view>> batch;
    for (const auto& blob : blobs.blobs())
      batch.emplace_back(FromProto(blob.digest()), blob.data());
    for (const absl::Status& stored : (*cas)->PutMany(batch)) {
      if (!stored.ok()) std::cerr << stored << "\n";
    }
    if (part.has_plan()) plan_blob_mb += part.plan().size_bytes() / 1048576.0;
    const absl::Time stored = absl::Now();
    absl::StatusOr<coordinator::PlannedPart> planned =
        coordinator::PlanPart(coordinator::PartRequest(header, part), planning, *pin);
    if (!planned.ok()) {
      std::cerr << planned.status() << "\n";
      return 1;
    }
    last = part.last();
    absl::Status added = scheduler.AddUnits(*build, std::move(planned->units),
                                            std::move(planned->cached), {}, last, absl::Now());
    if (!added.ok()) {
      std::cerr << added << "\n";
      return 1;
    }
    store_busy += stored - began;
    plan_busy += absl::Now() - stored;
    ++part_count;
  }
  const absl::Duration submit_time = absl::Now() - submit;
  int client_status = 0;
  waitpid(client, &client_status, 0);
  close(pipe_fds[0]);
  if (!WIFEXITED(client_status) || WEXITSTATUS(client_status) != 0) {
    std::cerr << "the client process failed\n";
    return 1;
  }
  std::cerr << "coordinator: " << units << " units in " << part_count << " parts of " << part_units
            << ", plan blobs " << plan_blob_mb << " MiB; busy storing blobs " << Seconds(store_busy)
            << " s, planning " << Seconds(plan_busy) << " s; the last part planned "
            << Seconds(submit_time) << " s after the start\n";
  const double rss_mb = ResidentMiB() - rss_before;

  // The scheduler: W one-slot workers lease and report until all is done.
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
      "units=%d headers=%d headers_per_unit=%d workers=%d parts=%d submit_s=%.2f (coordinator "
      "busy %.2f) plan_blob_mb=%.1f coordinator_rss_mb=%.0f units_per_s=%.0f "
      "p99_dispatch_ms=%.3f lock_p50_us=%.0f lock_p99_us=%.0f\n",
      units, headers, per_unit, workers, part_count, Seconds(submit_time),
      Seconds(store_busy + plan_busy), plan_blob_mb, rss_mb, units / Seconds(run_time), p99,
      absl::ToDoubleMicroseconds(metrics->LockHoldQuantile(0.5)),
      absl::ToDoubleMicroseconds(metrics->LockHoldQuantile(0.99)));
  return 0;
}

}  // namespace
}  // namespace distcc_cuda

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return distcc_cuda::Run();
}
