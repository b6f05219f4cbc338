// SPDX-License-Identifier: Apache-2.0
// What planning a large instantiation grid costs the coordinator (issue 30,
// finding 2): one set whose two axes of --side values make side x side
// generated units (316 x 316 = 99,856, just under the 100,000 points a set
// may have), planned by PlanBuild as SubmitBuild plans it, into a store on
// the disk under --store (a real file system, as a coordinator's state dir
// is). A grid point's source is a few hundred bytes: it travels in its unit
// (InputFile.content) and is not stored, so the store grows by nothing
// (store_mb, blob_files: the set's header) while the text generated is
// source_mb. Side by side in the same run, the sources are then stored the
// way the planner stored them before (one blob each, in batches of 8,192):
// stored_as_before_s, _mb, _files; that figure leaves out the planning.
// Run by ./bench/plan_grid.sh.
//
// Last line: points=… plan_s=… source_mb=… inlined=… store_mb=… blob_files=…
//            stored_as_before_s=… stored_as_before_mb=… stored_as_before_files=…
//            peak_rss_mb=…
#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/store/cas_store.h"
#include "coordinator/planning/build_planner.h"

ABSL_FLAG(int, side, 316, "values on each of the grid's two axes");
ABSL_FLAG(std::string, store, "build/plan-grid-store",
          "the stores' folder (removed before and after the run)");

namespace {

namespace fs = std::filesystem;
using distcc_cuda::v1::SubmitBuildRequest;

// One set of side x side points over a header of one kernel template.
SubmitBuildRequest GridRequest(int side, const distcc_cuda::Digest& header) {
  SubmitBuildRequest request;
  request.set_build_name("plan-grid");
  request.mutable_toolchain()->set_digest("bench-toolchain");
  distcc_cuda::v1::InstantiationSet* set = request.add_instantiation_sets();
  set->set_name("grid");
  set->set_unit_name_template("grid_{a}_{b}");
  set->add_headers("grid.cuh");
  set->set_text_template("template __global__ void grid_kernel<{a}, {b}>();");
  set->set_directory("kernels");
  set->add_arguments("-O3");
  for (const char* name : {"a", "b"}) {
    distcc_cuda::v1::InstantiationAxis* axis = set->add_axes();
    axis->set_name(name);
    for (int i = 0; i < side; ++i) axis->add_values(absl::StrCat(i));
  }
  distcc_cuda::v1::InputFile* input = set->add_inputs();
  input->set_path("kernels/grid.cuh");
  *input->mutable_digest() = distcc_cuda::ToProto(header);
  return request;
}

// Bytes the files under `root` take on disk, and how many there are.
std::pair<uintmax_t, uintmax_t> DiskUse(const std::string& root) {
  uintmax_t bytes = 0;
  uintmax_t files = 0;
  std::error_code error;
  for (const auto& entry : fs::recursive_directory_iterator(root, error)) {
    struct stat info;
    if (!entry.is_regular_file(error) || stat(entry.path().c_str(), &info) != 0) continue;
    bytes += static_cast<uintmax_t>(info.st_blocks) * 512;
    ++files;
  }
  return {bytes, files};
}

// The seconds it takes to put the generated source of each of `units` into
// a new store at `root` the way the planner stored them before they were
// inlined: in batches of 8,192 (CasStore::PutMany, flushed by syncfs).
absl::StatusOr<double> StoreAsBefore(
    const std::vector<distcc_cuda::coordinator::PlannedUnit>& units, const std::string& root) {
  std::vector<std::pair<distcc_cuda::Digest, absl::string_view>> sources;
  for (const auto& planned : units) {
    const auto& source = planned.unit.inputs(planned.unit.inputs_size() - 1);
    if (!source.has_content()) continue;  // stored by the plan already
    sources.emplace_back(distcc_cuda::FromProto(source.digest()), source.content());
  }
  ASSIGN_OR_RETURN(auto store, distcc_cuda::CasStore::Open(root));
  const auto start = std::chrono::steady_clock::now();
  constexpr size_t kBatch = 8192;
  for (size_t begin = 0; begin < sources.size(); begin += kBatch) {
    std::vector<std::pair<distcc_cuda::Digest, absl::string_view>> batch(
        sources.begin() + begin, sources.begin() + std::min(sources.size(), begin + kBatch));
    for (const absl::Status& stored : store->PutMany(batch)) RETURN_IF_ERROR(stored);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Fail(const absl::Status& status) {
  fprintf(stderr, "plan_grid: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int side = absl::GetFlag(FLAGS_side);
  const std::string root = absl::GetFlag(FLAGS_store);
  std::error_code error;
  fs::remove_all(root, error);
  auto cas = distcc_cuda::CasStore::Open(root + "/batched");
  if (!cas.ok()) return Fail(cas.status());
  auto header = (*cas)->PutBytes("template <int A, int B> __global__ void grid_kernel() {}\n");
  if (!header.ok()) return Fail(header.status());
  const SubmitBuildRequest request = GridRequest(side, *header);

  const auto start = std::chrono::steady_clock::now();
  auto units = distcc_cuda::coordinator::PlanBuild(
      request, **cas, nullptr, distcc_cuda::coordinator::ClusterCapacity{}, nullptr);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!units.ok()) return Fail(units.status());
  const auto [bytes, files] = DiskUse(root + "/batched");
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  int64_t source_bytes = 0;
  int64_t inlined = 0;
  for (const auto& planned : *units) {
    const auto& source = planned.unit.inputs(planned.unit.inputs_size() - 1);
    source_bytes += source.digest().size_bytes();
    if (source.has_content()) ++inlined;
  }
  absl::StatusOr<double> before = StoreAsBefore(*units, root + "/as-before");
  if (!before.ok()) return Fail(before.status());
  const auto [before_bytes, before_files] = DiskUse(root + "/as-before");
  fs::remove_all(root, error);
  printf(
      "points=%zu plan_s=%.1f source_mb=%.1f inlined=%jd store_mb=%.1f blob_files=%ju "
      "stored_as_before_s=%.1f stored_as_before_mb=%.0f stored_as_before_files=%ju "
      "peak_rss_mb=%ld\n",
      units->size(), seconds, static_cast<double>(source_bytes) / (1 << 20),
      static_cast<intmax_t>(inlined), static_cast<double>(bytes) / (1 << 20), files, *before,
      static_cast<double>(before_bytes) / (1 << 20), before_files, usage.ru_maxrss / 1024);
  return 0;
}
