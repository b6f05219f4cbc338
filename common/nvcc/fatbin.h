// SPDX-License-Identifier: Apache-2.0
// Reads the CUDA device code that nvcc embeds in host ELF files (objects,
// shared libraries, executables) without cuobjdump: the fatbinary containers
// in the `.nv_fatbin` and `__nv_relfatbin` sections and the PTX and cubin
// images inside them. The end-to-end tests compare remote and local builds
// with this, so the payloads carry device code only, never the host object's
// temporary file names.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace distcc_cuda {

// What a device image holds: machine code for one GPU (a cubin, itself an
// ELF file) or PTX text that the driver compiles for the GPU it finds.
enum class DeviceImageKind { kCubin, kPtx };

// One device image of a fatbinary.
struct DeviceImage {
  DeviceImageKind kind;
  // The architecture number: 100 for sm_100 (cubin) or compute_100 (PTX).
  int arch;
  // True if the image was stored compressed (LZ4 or zstd) in the fatbinary.
  bool compressed;
  // The image bytes, decompressed. A cubin starts with "\x7fELF"; PTX is the
  // text without the NUL terminator and padding that the fatbinary stores.
  std::string payload;
  // "a" for arch-specific (sm_100a), "f" for family-specific (sm_100f)
  // images, else empty.
  std::string arch_suffix = {};
};

// True if both images have the same kind, architecture and payload; whether
// each was stored compressed does not matter.
bool operator==(const DeviceImage& a, const DeviceImage& b);
bool operator!=(const DeviceImage& a, const DeviceImage& b);

// Reads every PTX and cubin image in the fatbinaries of the ELF file at
// `path`, in file order. Other kinds of entry (LTO IR) are skipped. Returns
// NOT_FOUND if the file has no fatbinary section, INVALID_ARGUMENT (naming
// the file and the offset) if it is not a 64-bit little-endian ELF file or a
// fatbinary in it is malformed or truncated, and the error of open/read
// otherwise.
absl::StatusOr<std::vector<DeviceImage>> ReadDeviceImages(const std::string& path);

// Same as ReadDeviceImages, from the bytes of an ELF file already in memory;
// `name` is used only in error messages.
absl::StatusOr<std::vector<DeviceImage>> ReadDeviceImagesFromBytes(std::string_view elf_bytes,
                                                                   std::string_view name);

// Joins the objects of one compile's architecture parts (SplitByArchitecture
// in common/nvcc/nvcc_args.h) into the object the whole compile makes: the first
// part's host code, whose .nv_fatbin holds one fatbinary container of every
// part's images in part order (as nvcc orders them), in place of the first
// part's own (no dead bytes are left behind: the merged object is about the
// size of the whole compile's). The parts' host code is the same, so only
// the device code is joined. `names` name the parts in
// messages. INVALID_ARGUMENT naming the part for fewer than two parts, a file
// that is not a relocatable ELF object, or one without exactly one
// .nv_fatbin container (relocatable device code cannot be merged so);
// NOT_FOUND naming the part for one with no fatbinary at all.
absl::StatusOr<std::string> MergeArchitectureParts(const std::vector<std::string>& parts,
                                                   const std::vector<std::string>& names);

// How many kernels (.text.NAME sections) the cubin `cubin` holds.
// INVALID_ARGUMENT for PTX or a damaged cubin.
absl::StatusOr<int> CountKernels(const DeviceImage& cubin);

// The raw bytes of the file's fatbinary sections (.nv_fatbin, then
// __nv_relfatbin), in section order: the device code exactly as the object
// carries it, for comparing two builds byte for byte. Errors as
// ReadDeviceImagesFromBytes.
absl::StatusOr<std::string> DeviceCodeSections(std::string_view elf_bytes, std::string_view name);

// The file with the bytes of its fatbinary sections zeroed: what is left is
// host code, host data and the symbol and string tables.
absl::StatusOr<std::string> HostCodeOf(std::string_view elf_bytes, std::string_view name);

// Names an image as one line of `distcc-cuda inspect` prints it:
// "sm_100 cubin", "compute_100 ptx", "sm_100a cubin".
std::string DescribeDeviceImage(const DeviceImage& image);

}  // namespace distcc_cuda
