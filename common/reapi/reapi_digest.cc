// SPDX-License-Identifier: Apache-2.0
#include "common/reapi/reapi_digest.h"

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace distcc_cuda {

Digest FromReapi(const reapi::Digest& digest) { return Digest{digest.hash(), digest.size_bytes()}; }

reapi::Digest ToReapi(const Digest& digest) {
  reapi::Digest out;
  out.set_hash(digest.hash);
  out.set_size_bytes(digest.size_bytes);
  return out;
}

std::string BlobSubject(const reapi::Digest& digest) {
  return absl::StrCat("blobs/", digest.hash(), "/", digest.size_bytes());
}

absl::Status CheckMessageDigest(const reapi::Digest& digest, absl::string_view what) {
  RETURN_IF_ERROR(
      Annotate(ValidateDigest(FromReapi(digest)), absl::StrCat("the digest of ", what)));
  if (digest.size_bytes() > kMaxMessageBlobBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", digest.size_bytes(),
                                                   " bytes; the most one may be is ",
                                                   kMaxMessageBlobBytes));
  }
  return absl::OkStatus();
}

}  // namespace distcc_cuda
