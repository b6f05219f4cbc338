// SPDX-License-Identifier: Apache-2.0
// A content-addressed store of blobs in a folder on disk. Used by the
// coordinator (the build's CAS) and by each worker (its local input cache).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/store/digest.h"

namespace distcc_cuda {

// The modification time (2000-01-01 00:00:00 UTC) of every file a store
// materializes. nvcc hashes the source's modification time into the names of
// internal device entities when it also names them after its process id
// (see common/nvcc/compile_identity.h): the parts of a split unit, compiled on
// several workers at several times, must see the same one.
inline constexpr int64_t kMaterializedMtime = 946684800;

// Gives a file just laid out as an input the mode and time every input
// has: executable bits added when `executable`, modified at
// kMaterializedMtime.
absl::Status FinishMaterialized(const std::string& destination, bool executable);

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
  // Commit's steps, which CasStore::PutMany runs for many blobs at once:
  // the content checked and on disk (read-only, flushed, closed), then
  // named (renamed into its folder, which is returned; not yet synced).
  // `flush` false leaves the flush to the caller (one syncfs for a batch).
  absl::Status Seal(bool flush = true);
  absl::StatusOr<std::string> Publish();

  const CasStore* store_;
  Digest expected_;
  std::string temp_path_;
  int fd_;
  int64_t written_ = 0;
  Sha256 sha_;
  bool committed_ = false;
};

// What a blob of `size` bytes costs the disk it is stored on: whole blocks
// of 4 KiB (at least one), and one more for its inode and its name in a
// folder. A store's size and limit count this, not the blobs' bytes: 60,000
// blobs of 80 bytes (5 MB) took 376 MB of disk.
int64_t BlobDiskCost(int64_t size);

// The most disk the new blobs of one batch upload may take (16,384 blobs
// of under 4 KiB): a store refuses the rest of a batch beyond it, and a
// client sends no larger batch.
inline constexpr int64_t kMaxBatchDiskBytes = int64_t{128} << 20;

// The most a store may hold by default: 10% of the file system it lives on,
// at most 50 GiB (at least 1 GiB).
int64_t DefaultCasMaxBytes(const std::string& root);

// The limit --cas-max-size gives a store at `root`: a size such as 20GiB, or
// DefaultCasMaxBytes when `flag_value` is empty. INVALID_ARGUMENT naming the
// flag for a size that does not parse.
absl::StatusOr<int64_t> CasMaxBytesFromFlag(const std::string& flag_value, const std::string& root);

// Blobs a running build or task needs: the store never evicts them while
// the pin lives. Digests not in the store yet are pinned for when they come.
class CasPin {
 public:
  ~CasPin();
  CasPin(const CasPin&) = delete;
  CasPin& operator=(const CasPin&) = delete;
  // Pins more blobs (a build's outputs, as they come back).
  void Add(const std::vector<Digest>& digests);

 private:
  friend class CasStore;
  explicit CasPin(const CasStore* store) : store_(store) {}
  const CasStore* store_;
  absl::Mutex mu_;
  std::vector<std::string> hashes_ ABSL_GUARDED_BY(mu_);
};

class CasStore {
 public:
  // Opens (creating if needed) a store rooted at `root`, readable by this
  // process's user only (mode 0700). PERMISSION_DENIED if it cannot be made so.
  // With `max_bytes` > 0 the store keeps itself under that size on disk
  // (each blob counted at its BlobDiskCost): when a new blob takes it over, the least recently used
  // blobs that no CasPin holds are removed until it is under 90% of it.
  //
  // What the store already holds is counted on a thread of its own (a walk
  // of every blob: 9 ms for 600 blobs, far more for a large store), so that
  // opening does not wait for it; until it is done nothing is evicted and
  // size_bytes() waits for it.
  static absl::StatusOr<std::unique_ptr<CasStore>> Open(const std::string& root,
                                                        int64_t max_bytes = 0);
  ~CasStore();

  // True if the store holds the blob: a regular file of the digest's size
  // (its content was verified when it came in).
  bool Contains(const Digest& digest) const;
  // OK if the store holds the blob with the right content. The content is
  // read and hashed once per store opened (so after every restart, when a
  // disk may have damaged it) and then remembered. A blob that does not
  // match is removed, so that it is uploaded or rebuilt again: DATA_LOSS;
  // NOT_FOUND if absent. Callers verifying the same blob at once hash it
  // once.
  absl::Status Verify(const Digest& digest) const;
  // Removes a blob that a reader found damaged (its bytes do not hash to its
  // digest), and logs it.
  void Discard(const Digest& digest, const std::string& how) const;
  // Where the blob lives (or would live) on disk.
  std::string PathOf(const Digest& digest) const;

  // Stores `data` after checking it against `digest`. INVALID_ARGUMENT if it
  // does not match.
  absl::Status Put(const Digest& digest, absl::string_view data);
  // Put for each of `blobs`, with one result each, in order. What a batch
  // upload sends: the blobs are written, then flushed, then named, then
  // their folders synced, each step for all of them, so a file system that
  // commits its journal once for many files (ext4) does so a few times per
  // batch, not twice per blob. A batch of more than 1,024 blobs (a large
  // grid's generated sources) is flushed by syncfs twice (contents before
  // names, then names), not per blob. Durable when it returns, as Put is.
  std::vector<absl::Status> PutMany(const std::vector<std::pair<Digest, absl::string_view>>& blobs);
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
  // modified at kMaterializedMtime. The copy is hashed: a stored blob whose
  // bytes do not match is removed and the result is DATA_LOSS (fetch it
  // again), so nothing ever compiles against a damaged input. NOT_FOUND if
  // absent.
  absl::Status Materialize(const Digest& digest, const std::string& destination,
                           bool executable) const;

  const std::string& root() const { return root_; }
  // What the store takes on disk now (BlobDiskCost of each blob), and its
  // limit (0: none).
  int64_t size_bytes() const;
  int64_t max_bytes() const { return max_bytes_; }
  // Blobs evicted for room since the store was opened.
  int64_t evicted_blobs() const;

  // What the store holds and has done since it was opened, for /metrics.
  struct Stats {
    int64_t bytes = 0;  // on disk: BlobDiskCost of each blob
    int64_t blobs = 0;
    int64_t max_bytes = 0;  // 0: no limit
    int64_t evicted_blobs = 0;
    int64_t evicted_bytes = 0;
    int64_t lookup_hits = 0;    // blobs asked for that it had
    int64_t lookup_misses = 0;  // and that it lacked (to be uploaded or fetched)
  };
  Stats stats() const;
  // Counts a caller's lookup of a blob a peer wants to send or a task needs:
  // found here (nothing to transfer) or not. Store-internal checks do not
  // count.
  void CountLookup(bool found) const;

  // Keeps `digests` from eviction while the returned pin lives.
  std::unique_ptr<CasPin> Pin(const std::vector<Digest>& digests) const;

 private:
  friend class CasPin;
  explicit CasStore(std::string root, int64_t max_bytes)
      : root_(std::move(root)), max_bytes_(max_bytes) {}
  // Counts the blobs on disk into the index (Open's thread).
  void Index();
  struct Entry {
    int64_t size = 0;       // the blob's bytes (its digest's)
    int64_t disk_cost = 0;  // BlobDiskCost(size)
    absl::Time last_use;
  };
  // Records a blob that entered the store, then evicts if it is over its
  // limit.
  void Added(const Digest& digest) const;
  // Records a use, for least-recently-used eviction; persisted in the
  // file's modification time at most hourly, so it survives restarts.
  void Used(const Digest& digest) const;
  void EvictLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unpin(const std::vector<std::string>& hashes) const;
  std::string TempPath() const;
  friend class BlobWriter;

  // A blob committed or verified since the store was opened.
  void MarkVerified(const Digest& digest) const;

  std::string root_;
  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  mutable std::unordered_set<std::string> verified_ ABSL_GUARDED_BY(mu_);  // hashes
  // Blobs being hashed by a Verify now: another Verify of the same blob
  // waits for its verdict instead of hashing it too (the first units of a
  // build ask for the same headers at once).
  mutable std::unordered_set<std::string> verifying_ ABSL_GUARDED_BY(mu_);
  mutable std::unordered_map<std::string, Entry> index_ ABSL_GUARDED_BY(mu_);  // by hash
  mutable int64_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::unordered_map<std::string, int> pins_ ABSL_GUARDED_BY(mu_);  // hash -> count
  mutable int64_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
  mutable int64_t evicted_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::atomic<int64_t> lookup_hits_{0};
  mutable std::atomic<int64_t> lookup_misses_{0};
  mutable bool warned_full_ ABSL_GUARDED_BY(mu_) = false;
  // Set when Index has counted what was on disk; until then, the blobs
  // discarded, which its walk may still have seen.
  mutable bool indexed_ ABSL_GUARDED_BY(mu_) = false;
  mutable std::unordered_set<std::string> discarded_while_indexing_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> closing_{false};
  std::thread indexer_;
};

}  // namespace distcc_cuda
