// SPDX-License-Identifier: Apache-2.0
// The client side of the ContentStore service, shared by the build client
// (uploads inputs, downloads objects) and the worker (fetches inputs, uploads
// outputs). Uploads only what the store lacks; moves large blobs in chunks.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/store/cas_store.h"
#include "common/store/digest.h"
#include "distcc_cuda/v1/cas.grpc.pb.h"

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
// Blobs up to this size travel in BatchUpdateBlobs calls.
inline constexpr int64_t kMaxBatchBytes = 2 << 20;

class CasClient {
 public:
  explicit CasClient(std::shared_ptr<v1::ContentStore::StubInterface> stub,
                     absl::Duration timeout = absl::Minutes(10));

  // Returns the digests the store lacks.
  absl::StatusOr<std::vector<Digest>> FindMissing(const std::vector<Digest>& digests);

  // Uploads the blobs the store lacks: small ones in batches, large ones
  // streamed in chunks. Returns how many blobs were sent.
  absl::StatusOr<int> UploadMissing(const std::vector<BlobSource>& blobs);

  // Streams the blob into `destination` (through a temporary file, verified
  // against its digest before it is renamed into place).
  absl::Status DownloadToFile(const Digest& digest, const std::string& destination);

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

 private:
  // A call's context, with its deadline, reachable by CancelAll while the
  // call runs.
  class InFlight {
   public:
    InFlight(CasClient* client, grpc::ClientContext& context);
    ~InFlight();

   private:
    CasClient* client_;
    grpc::ClientContext* context_;
  };
  absl::Status UploadBatch(const std::vector<const BlobSource*>& batch);
  absl::Status UploadStreamed(const BlobSource& blob);
  // Reads the blob and hands each chunk to `sink` in order.
  absl::Status Read(const Digest& digest,
                    const std::function<absl::Status(absl::string_view)>& sink);
  std::shared_ptr<v1::ContentStore::StubInterface> stub_;
  absl::Duration timeout_;
  absl::Mutex mu_;
  std::set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace distcc_cuda
