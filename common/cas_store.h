// SPDX-License-Identifier: Apache-2.0
// A content-addressed store of blobs in a folder on disk. Used by the
// coordinator (the build's CAS) and by each worker (its local input cache).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/digest.h"

namespace distcc_cuda {

// The modification time (2000-01-01 00:00:00 UTC) of every file a store
// materializes. nvcc hashes the source's modification time into the names of
// internal device entities when it also names them after its process id
// (see common/compile_identity.h): the parts of a split unit, compiled on
// several workers at several times, must see the same one.
inline constexpr int64_t kMaterializedMtime = 946684800;

class CasStore;

// A blob being written in order, chunk by chunk, into a temporary file; it
// enters the store only when Commit() has verified its size and digest.
// Destroying an uncommitted BlobWriter discards the partial blob.
class BlobWriter {
 public:
  ~BlobWriter();
  BlobWriter(const BlobWriter&) = delete;
  BlobWriter& operator=(const BlobWriter&) = delete;

  // Appends `data` at `offset`, which must equal the bytes written so far.
  // INVALID_ARGUMENT for an out-of-order offset or more bytes than declared.
  absl::Status Append(int64_t offset, absl::string_view data);
  // Verifies size and SHA-256 and moves the blob into the store.
  // INVALID_ARGUMENT (naming both digests) when the content does not match.
  absl::Status Commit();
  int64_t bytes_written() const { return written_; }

 private:
  friend class CasStore;
  BlobWriter(const CasStore* store, Digest expected, std::string temp_path, int fd);

  const CasStore* store_;
  Digest expected_;
  std::string temp_path_;
  int fd_;
  int64_t written_ = 0;
  Sha256 sha_;
  bool committed_ = false;
};

class CasStore {
 public:
  // Opens (creating if needed) a store rooted at `root`, readable by this
  // process's user only (mode 0700). PERMISSION_DENIED if it cannot be made so.
  static absl::StatusOr<std::unique_ptr<CasStore>> Open(const std::string& root);

  // True if the store holds the blob: a regular file of the digest's size
  // (its content was verified when it came in).
  bool Contains(const Digest& digest) const;
  // Where the blob lives (or would live) on disk.
  std::string PathOf(const Digest& digest) const;

  // Stores `data` after checking it against `digest`. INVALID_ARGUMENT if it
  // does not match.
  absl::Status Put(const Digest& digest, absl::string_view data);
  // Stores `data` under its own digest and returns that digest.
  absl::StatusOr<Digest> PutBytes(absl::string_view data);
  // Copies the file at `path` into the store and returns its digest.
  absl::StatusOr<Digest> PutFile(const std::string& path);
  // Starts a chunked write of a blob expected to have `digest`.
  absl::StatusOr<std::unique_ptr<BlobWriter>> StartWrite(const Digest& digest);

  // Returns the blob's bytes. NOT_FOUND if absent. For small blobs only.
  absl::StatusOr<std::string> Get(const Digest& digest) const;
  // Places a copy of the blob at `destination` (read-only; never a hard
  // link, so nothing done to it reaches the store), creating parent folders,
  // modified at kMaterializedMtime. NOT_FOUND if absent.
  absl::Status Materialize(const Digest& digest, const std::string& destination,
                           bool executable) const;

  const std::string& root() const { return root_; }

 private:
  explicit CasStore(std::string root) : root_(std::move(root)) {}
  std::string TempPath() const;
  friend class BlobWriter;

  std::string root_;
};

}  // namespace distcc_cuda
