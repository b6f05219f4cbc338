// SPDX-License-Identifier: Apache-2.0
// SHA-256 content digests: the name of every blob in the system.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "distcc_cuda/v1/cas.pb.h"

namespace distcc_cuda {

// A blob's name: lowercase hex SHA-256 of its bytes and its size.
struct Digest {
  std::string hash;
  int64_t size_bytes = 0;

  // "hash/size", the form used in logs and messages.
  std::string ToString() const;
  // How the Remote Execution API names the blob: "blobs/HASH/SIZE" (the
  // subject of a MISSING precondition failure, MissingBlobsError).
  std::string BlobSubject() const;
  bool operator==(const Digest& other) const {
    return hash == other.hash && size_bytes == other.size_bytes;
  }
  bool operator!=(const Digest& other) const { return !(*this == other); }
  bool operator<(const Digest& other) const {
    return hash != other.hash ? hash < other.hash : size_bytes < other.size_bytes;
  }
};

// Incremental SHA-256 over a byte stream.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(absl::string_view data);
  // Returns the lowercase hex digest. Call once.
  std::string FinishHex();

 private:
  void* ctx_;  // EVP_MD_CTX, kept opaque so OpenSSL stays out of the header
};

// Returns the digest of `data`.
Digest DigestOf(absl::string_view data);

// Returns the digest of the file at `path`, read in chunks. NOT_FOUND if the
// file does not exist.
absl::StatusOr<Digest> DigestOfFile(const std::string& path);

// OK if `digest` is well formed (64 lowercase hex digits, size >= 0), else
// INVALID_ARGUMENT saying what is wrong.
absl::Status ValidateDigest(const Digest& digest);

v1::Digest ToProto(const Digest& digest);
Digest FromProto(const v1::Digest& digest);

}  // namespace distcc_cuda
