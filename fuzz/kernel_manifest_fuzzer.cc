// SPDX-License-Identifier: Apache-2.0
// The kernel manifest: ParseKernelManifest, then the expansion of what it
// accepts into generated units.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/plan/kernel_manifest.h"
#include "common/base/files.h"
#include "common/nvcc/instantiation.h"
#include "common/nvcc/nvcc_args.h"
#include "fuzz/fuzz_check.h"

namespace distcc_cuda::fuzz {
namespace {

// Grids larger than this are checked but not expanded: expansion is
// linear in the grid, and a short input can describe a huge one.
constexpr uint64_t kMaxExpandedPoints = 256;

// A folder holding the sources and headers the seeds name, made once per
// process, so that accepted manifests get past the existence checks.
const std::string& ManifestDirectory() {
  static const std::string* directory = [] {
    char name[] = "/tmp/kernel_manifest_fuzzer.XXXXXX";
    Check(mkdtemp(name) != nullptr, "cannot make a temporary folder");
    for (const char* file : {"attention_api.cu", "attention_kernels.cuh", "k.cu", "k.cuh"}) {
      Check(WriteFileAtomically(absl::StrCat(name, "/", file), "// fuzz\n").ok(),
            "cannot write a source into the temporary folder");
    }
    std::atexit([] { (void)RemoveAll(ManifestDirectory()); });
    return new std::string(name);
  }();
  return *directory;
}

uint64_t GridPoints(const v1::InstantiationSet& set) {
  uint64_t points = 1;
  for (const v1::InstantiationAxis& axis : set.axes()) {
    points *= static_cast<uint64_t>(axis.values_size());
    if (points > kMaxExpandedPoints) return points;
  }
  return points;
}

void CheckManifest(const client::KernelManifest& manifest) {
  Check(!manifest.output.empty() && manifest.output != "." && manifest.output != ".." &&
            manifest.output.find('/') == std::string::npos,
        "an output that is not a file name was accepted");
  Check(!manifest.archs.empty(), "no architectures after the default");
  Check(GencodeFlags(manifest.archs).ok(), "architectures GencodeFlags refuses were accepted");
  Check(!manifest.sources.empty() || !manifest.instantiation_sets.empty(),
        "a manifest with nothing to build was accepted");
  for (const v1::InstantiationSet& set : manifest.instantiation_sets) {
    Check(ValidateInstantiationSet(set).ok(), "an invalid instantiation set was accepted");
    if (GridPoints(set) > kMaxExpandedPoints) continue;
    absl::StatusOr<std::vector<GeneratedUnit>> points = ExpandInstantiationSet(set);
    if (!points.ok()) continue;  // e.g. two points render to one unit name
    Check(points->size() == GridPoints(set), "expansion is not one unit per grid point");
    const size_t count = points->size();
    std::vector<GeneratedUnit> units =
        GroupInstantiations(set, *std::move(points), set.instantiations_per_unit());
    size_t grouped = 0;
    for (const GeneratedUnit& unit : units) grouped += static_cast<size_t>(unit.instantiations);
    Check(grouped == count, "grouping loses or duplicates grid points");
  }
}

void TestOneInput(const std::string& text) {
  absl::StatusOr<client::KernelManifest> manifest =
      client::ParseKernelManifest(text, "kernels.toml", ManifestDirectory());
  if (manifest.ok()) CheckManifest(*manifest);
}

}  // namespace
}  // namespace distcc_cuda::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  distcc_cuda::fuzz::TestOneInput(distcc_cuda::fuzz::InputText(data, size));
  return 0;
}
