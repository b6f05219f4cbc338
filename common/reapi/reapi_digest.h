// SPDX-License-Identifier: Apache-2.0
// REAPI digests as the store's, and how a missing blob is named in a
// google.rpc.PreconditionFailure ("blobs/HASH/SIZE").
#pragma once

#include <string>

#include "build/bazel/remote/execution/v2/remote_execution.pb.h"
#include "common/store/digest.h"

namespace distcc_cuda {

namespace reapi = ::build::bazel::remote::execution::v2;

Digest FromReapi(const reapi::Digest& digest);
reapi::Digest ToReapi(const Digest& digest);

// "blobs/HASH/SIZE": the subject of a MISSING precondition failure, and
// the tail of a ByteStream resource name.
std::string BlobSubject(const reapi::Digest& digest);

}  // namespace distcc_cuda
