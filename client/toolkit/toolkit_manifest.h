// SPDX-License-Identifier: Apache-2.0
// What a toolkit folder holds, file by file with its content (SHA-256, size,
// whether it runs) and link by link: written when a toolkit is installed,
// read back to check that nothing in it changed since. Its digest names the
// toolkit's content.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace distcc_cuda::client {

// The manifest's file name, inside the toolkit folder (it lists everything
// but itself).
inline constexpr char kToolkitManifestName[] = ".distcc-cuda-toolkit";

// The manifest of `folder` as it is now: one line per file ("file SHA256
// SIZE x|- PATH") and per symbolic link ("link TARGET PATH"), paths relative
// and sorted, after a first line that names the format. A link that leads
// out of the folder, or anything that is neither file, folder nor link, is
// FAILED_PRECONDITION naming it.
absl::StatusOr<std::string> ManifestOf(const std::string& folder);

// OK if `folder` holds exactly what its manifest lists. Else
// FAILED_PRECONDITION naming the first file that differs (changed, missing
// or not listed) and saying what to run; NOT_FOUND without a manifest.
absl::Status VerifyManifest(const std::string& folder);

}  // namespace distcc_cuda::client
