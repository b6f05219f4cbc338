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

// The most entries and bytes a manifest may have.
inline constexpr int kMaxToolkitEntries = 100000;
inline constexpr int64_t kMaxToolkitManifestBytes = 16 << 20;

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
// lexically) it refuses or that leads out of the folder, so that what is
// listed is whole. Otherwise as above.
absl::StatusOr<std::string> ManifestOf(const std::string& folder, const ToolkitPathFilter& keep);

// The entries of a manifest that came from elsewhere (a coordinator),
// checked as hostile: the format line, every field, plain relative paths
// given once, link targets that stay inside, no path below a link, at most
// kMaxToolkitEntries. INVALID_ARGUMENT naming the first bad line.
absl::StatusOr<std::vector<ToolkitEntry>> ParseToolkitManifest(absl::string_view text);

// OK if `folder` holds exactly what its manifest lists. Else
// FAILED_PRECONDITION naming the first file that differs (changed, missing
// or not listed) and saying what to run; NOT_FOUND without a manifest.
absl::Status VerifyManifest(const std::string& folder);

}  // namespace distcc_cuda
