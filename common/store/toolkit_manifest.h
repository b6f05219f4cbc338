// SPDX-License-Identifier: Apache-2.0
// What a toolkit folder holds, file by file with its content (SHA-256, size,
// whether it runs) and link by link: written when a toolkit is installed,
// read back to check that nothing in it changed since. Its digest names the
// toolkit's content.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/store/digest.h"

namespace distcc_cuda {

// The manifest's file name, inside the toolkit folder (it lists everything
// but itself).
inline constexpr char kToolkitManifestName[] = ".distcc-cuda-toolkit";

// One line of a manifest.
struct ToolkitEntry {
  std::string path;  // relative, plain ("bin/nvcc")
  bool link = false;
  std::string target;  // a link's, relative, inside the toolkit
  Digest digest;       // a file's content
  bool executable = false;
};

// What a manifest may hold, checked before the work each bounds: its
// bytes, its entries, and each path's length, depth and names. A real
// compile part has about 400 entries of at most 12 names and 110 bytes.
inline constexpr int kMaxToolkitEntries = 100000;
// The most folders its paths may imply (a real toolkit has about 180): each
// is a folder made on disk before any byte arrives.
inline constexpr int kMaxToolkitFolders = 20000;
inline constexpr int64_t kMaxToolkitManifestBytes = 16 << 20;
inline constexpr size_t kMaxToolkitPathBytes = 1024;
inline constexpr int kMaxToolkitPathDepth = 32;
// The most a file of a toolkit may declare (sums of 100,000 stay far
// from overflowing).
inline constexpr int64_t kMaxToolkitFileBytes = int64_t{1} << 40;
// The most links one link may lead through to reach a file or a folder.
inline constexpr int kMaxToolkitLinkChain = 8;

// The manifest of `folder` as it is now: one line per file ("file SHA256
// SIZE x|- PATH") and per symbolic link ("link TARGET PATH"), paths relative
// and sorted, after a first line that names the format. A link that leads
// out of the folder, a name with a space or a control character, or anything
// that is neither file, folder nor link, is FAILED_PRECONDITION naming it.
absl::StatusOr<std::string> ManifestOf(const std::string& folder);

// Which of a folder's paths (relative, "bin/nvcc") a manifest takes.
using ToolkitPathFilter = std::function<bool(const std::string& relative)>;

// The manifest of the part of `folder` that `keep` takes: a file or link
// `keep` refuses is left out, and so is a link whose target (resolved
// lexically) it refuses, that leads out of the folder, or that leads to
// nothing the manifest lists (ParseToolkitManifest would refuse it), so
// that what is listed is whole. Otherwise as above.
absl::StatusOr<std::string> ManifestOf(const std::string& folder, const ToolkitPathFilter& keep);

// The entries of a manifest that came from elsewhere (a coordinator),
// checked as hostile, in time linear in its size: the limits above before
// anything is split; the format line; every field; paths that are plain,
// relative and printable ASCII words, in order (as ManifestOf writes them)
// and each given once, none below a file or a link; and every link's target resolved name by name,
// as the kernel would, through folders of the manifest only (never through another link), to a
// file, a folder or a link of the manifest that does the same (at most kMaxToolkitLinkChain deep,
// no cycle), never to the toolkit's own folder or out of it. INVALID_ARGUMENT naming the first bad
// line or link, made terminal-safe.
absl::StatusOr<std::vector<ToolkitEntry>> ParseToolkitManifest(absl::string_view text);

// The files' declared sizes, summed.
int64_t ToolkitBytes(const std::vector<ToolkitEntry>& entries);

// What the toolkit takes on disk once written: each file in whole 4 KiB
// blocks, and a block for each link and each folder its paths imply (so
// that empty files under deep folders cost what they take). And the inodes:
// one per entry and per folder.
struct ToolkitDiskCost {
  int64_t bytes = 0;
  int64_t inodes = 0;
};
ToolkitDiskCost DiskCostOf(const std::vector<ToolkitEntry>& entries);

// OK if `folder` holds exactly what its manifest lists. Else
// FAILED_PRECONDITION naming the first file that differs (changed, missing
// or not listed) and saying what to run; NOT_FOUND without a manifest.
absl::Status VerifyManifest(const std::string& folder);

}  // namespace distcc_cuda
