// SPDX-License-Identifier: Apache-2.0
// The fatbinary reader on ELF bytes, the merge of architecture parts and
// the compile identity check of merged objects.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/nvcc/compile_identity.h"
#include "common/nvcc/fatbin.h"
#include "fuzz/fuzz_check.h"

namespace distcc_cuda::fuzz {
namespace {

void TestOneInput(const std::string& bytes) {
  absl::StatusOr<std::vector<DeviceImage>> images = ReadDeviceImagesFromBytes(bytes, "fuzz.o");
  if (images.ok()) {
    for (const DeviceImage& image : *images) {
      Check(!DescribeDeviceImage(image).empty(), "an image without a name");
      absl::StatusOr<int> kernels = CountKernels(image);
      Check(!kernels.ok() || *kernels >= 0, "a negative kernel count");
    }
  }
  // What the merge and --verify read of any object.
  (void)CheckOneCompileIdentity(bytes, "fuzz.o");
  (void)HostCodeOf(bytes, "fuzz.o");
  // The input as both parts of a split: a merge that succeeds must give an
  // object the reader reads, holding each part's images in part order.
  absl::StatusOr<std::string> merged = MergeArchitectureParts({bytes, bytes}, {"part0", "part1"});
  if (!merged.ok()) return;
  Check(images.ok(), "a part the reader refuses was merged");
  absl::StatusOr<std::vector<DeviceImage>> joined = ReadDeviceImagesFromBytes(*merged, "merged.o");
  Check(joined.ok(), "the reader refuses a merged object");
  std::vector<DeviceImage> expected = *images;
  expected.insert(expected.end(), images->begin(), images->end());
  Check(*joined == expected, "a merged object holds other images than its parts");
  // Twice the input at most (plus what keeps later sections aligned): the
  // first part's own container is not left behind.
  Check(merged->size() <= 2 * bytes.size() + (1 << 20) + 64, "the merge grew beyond its parts");
}

}  // namespace
}  // namespace distcc_cuda::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  distcc_cuda::fuzz::TestOneInput(distcc_cuda::fuzz::InputText(data, size));
  return 0;
}
