// SPDX-License-Identifier: Apache-2.0
// A remote content store as its clients use it, whatever protocol it
// speaks: upload only what it lacks (small blobs in batches, large ones
// streamed in chunks), download into a file, into the local store or into
// memory, each checked against its digest. CasClient (cas_client.h) speaks
// distcc-cuda's own ContentStore; ReapiCasClient (common/reapi) a Remote
// Execution API engine's CAS and ByteStream. Calls in flight are tracked so
// that a stopping process ends them at once.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/cancellation.h"
#include "common/store/cas_store.h"
#include "common/store/digest.h"
#include "grpcpp/client_context.h"

namespace distcc_cuda {

// A blob to upload: its digest and where its bytes are (a file, or in memory).
struct BlobSource {
  Digest digest;
  std::string path;   // used when non-empty
  std::string bytes;  // used when path is empty
};

// The largest gRPC message a coordinator accepts (a build's submission).
inline constexpr int64_t kMaxMessageBytes = 8 << 20;
// The most bytes one chunk of a streamed blob carries.
inline constexpr int64_t kMaxChunkBytes = 1 << 20;
// The most bytes one output file of a compile may be (a device object of
// many targets is hundreds of MiB): what a client downloads as an object or
// a worker takes from an engine, checked before the first byte.
inline constexpr int64_t kMaxCompileOutputBytes = int64_t{4} << 30;
// Blobs up to this size travel in BatchUpdateBlobs calls.
inline constexpr int64_t kMaxBatchBytes = 2 << 20;

class BlobClient {
 public:
  explicit BlobClient(absl::Duration timeout) : timeout_(timeout) {}
  virtual ~BlobClient() = default;
  BlobClient(const BlobClient&) = delete;
  BlobClient& operator=(const BlobClient&) = delete;

  // Returns the digests the store lacks.
  virtual absl::StatusOr<std::vector<Digest>> FindMissing(const std::vector<Digest>& digests) = 0;

  // Uploads the blobs the store lacks: small ones in batches, large ones
  // streamed in chunks. Returns how many blobs were sent.
  absl::StatusOr<int> UploadMissing(const std::vector<BlobSource>& blobs);

  // Streams the blob, a compile's output, into `destination` (through a new
  // temporary file of a random name beside it, created exclusively without
  // following a link, verified against its digest before it is renamed into
  // place; removed on any failure). FAILED_PRECONDITION before the first
  // byte for a digest above kMaxCompileOutputBytes.
  absl::Status DownloadToFile(const Digest& digest, const std::string& destination);

  // Reads the blob and hands each chunk to `sink` in order, ended with
  // DATA_LOSS as soon as the store sends more bytes than the digest says: a
  // hostile store cannot fill a disk or memory through it. Every download
  // goes through here; the caller checks the digest.
  absl::Status ReadWithin(const Digest& digest,
                          const std::function<absl::Status(absl::string_view)>& sink);

  // Streams the blob into `store` unless it is already there.
  absl::Status DownloadToStore(const Digest& digest, CasStore& store);

  // Returns the blob's bytes. For small blobs.
  absl::StatusOr<std::string> DownloadBytes(const Digest& digest);

  // Returns a small blob's bytes through `store`: fetched into it unless it
  // is there, read back and checked against the digest (a damaged copy is
  // dropped and fetched again once). How workers and --verify read the
  // folders of input trees, which many units share.
  absl::StatusOr<std::string> FetchThroughStore(const Digest& digest, CasStore& store);

  // Ends every call in flight and every later one with CANCELLED (a worker
  // that is stopping must not wait out a dead link for minutes).
  void CancelAll();

  // While it lives, the calls this thread makes through any BlobClient are
  // the transfers of the task `cancel` belongs to: CancelTask(cancel) ends
  // them, and once `cancel` is cancelled each later one ends at once. A
  // task's cancel then stops its own uploads and downloads, not the other
  // tasks'. Null: calls of no task.
  class TaskScope {
   public:
    explicit TaskScope(const CancelToken* cancel);
    ~TaskScope();
    TaskScope(const TaskScope&) = delete;
    TaskScope& operator=(const TaskScope&) = delete;

   private:
    const CancelToken* outer_;
  };
  // Ends the calls in flight made in a TaskScope of `cancel` (CANCELLED).
  void CancelTask(const CancelToken* cancel);

 protected:
  // A call's context, with its deadline, reachable by CancelAll while the
  // call runs.
  class InFlight {
   public:
    InFlight(BlobClient* client, grpc::ClientContext& context);
    ~InFlight();

   private:
    BlobClient* client_;
    grpc::ClientContext* context_;
  };
  // Sends blobs of at most kMaxChunkBytes each in one call.
  virtual absl::Status UploadBatch(const std::vector<const BlobSource*>& batch) = 0;
  // Sends one blob in chunks of kMaxChunkBytes.
  virtual absl::Status UploadStreamed(const BlobSource& blob) = 0;
  // Reads the blob and hands each chunk to `sink` in order.
  virtual absl::Status Read(const Digest& digest,
                            const std::function<absl::Status(absl::string_view)>& sink) = 0;
  // Hands `send` the blob's chunks in order (at most kMaxChunkBytes each,
  // read from its file or its bytes; one empty chunk for an empty blob),
  // with each chunk's offset and whether it is the last. Stops early when
  // `send` returns false (the stream broke: its Finish says why).
  // DATA_LOSS when the file is shorter than the digest says.
  static absl::Status ForEachChunk(
      const BlobSource& blob,
      const std::function<bool(absl::string_view chunk, int64_t offset, bool last)>& send);

 private:
  absl::Duration timeout_;
  absl::Mutex mu_;
  // Each call in flight, with the task it transfers for (null: none).
  std::map<grpc::ClientContext*, const CancelToken*> in_flight_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace distcc_cuda
