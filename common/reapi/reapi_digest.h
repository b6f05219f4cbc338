// SPDX-License-Identifier: Apache-2.0
// REAPI digests as the store's, and how a missing blob is named in a
// google.rpc.PreconditionFailure ("blobs/HASH/SIZE").
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "build/bazel/remote/execution/v2/remote_execution.pb.h"
#include "common/store/digest.h"

namespace distcc_cuda {

namespace reapi = ::build::bazel::remote::execution::v2;

Digest FromReapi(const reapi::Digest& digest);
reapi::Digest ToReapi(const Digest& digest);

// "blobs/HASH/SIZE": the subject of a MISSING precondition failure, and
// the tail of a ByteStream resource name.
std::string BlobSubject(const reapi::Digest& digest);

// An Action, a Command or a Directory is a few kilobytes; no blob larger
// than this is read as one.
inline constexpr int64_t kMaxMessageBlobBytes = int64_t{4} << 20;

// INVALID_ARGUMENT naming `what` when `digest` is malformed or larger than
// kMaxMessageBlobBytes: checked before a message blob is read.
absl::Status CheckMessageDigest(const reapi::Digest& digest, absl::string_view what);

}  // namespace distcc_cuda
