// SPDX-License-Identifier: Apache-2.0
// A REAPI input root as the store's own tree. REAPI's Directory and
// cas.proto's are the same bytes but for one field number (a file's
// executable bit: REAPI 4, ours 3), so each folder is read, checked and
// written again; the coordinator reads the folders from its own store, a
// bot from its engine's.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "common/reapi/reapi_digest.h"
#include "common/store/cas_store.h"

namespace distcc_cuda {

// Reads the REAPI folder `digest` into `folder`: FAILED_PRECONDITION
// (MISSING) when the store lacks it, INVALID_ARGUMENT when it does not parse.
using ReapiFolderReader =
    std::function<absl::Status(const reapi::Digest& digest, reapi::Directory& folder)>;

// Writes the REAPI tree of folders rooted at `root` (read with `read`) as
// the store's own Directory blobs in `cas` and returns the root of the copy.
// Folders seen twice are converted (and their files counted) once.
// INVALID_ARGUMENT for a symlink, a name that is not one path component, a
// name twice, a tree deeper than 64 folders, more than 100,000 distinct
// folders, or more than `max_files` files (`max_files_flag` names the flag
// that raises it). The folders written are added to `pin` as they are, so
// none is evicted before the unit runs.
absl::StatusOr<Digest> ConvertInputRoot(const reapi::Digest& root, const ReapiFolderReader& read,
                                        CasStore& cas, int64_t max_files,
                                        absl::string_view max_files_flag, CasPin& pin);

}  // namespace distcc_cuda
