// SPDX-License-Identifier: Apache-2.0
// The ContentStore service over the coordinator's on-disk CAS.
#pragma once

#include <vector>

#include "common/base/bounded_executor.h"
#include "common/store/cas_store.h"
#include "coordinator/trust/access_control.h"
#include "distcc_cuda/v1/cas.grpc.pb.h"

namespace distcc_cuda::coordinator {

// FindMissingBlobs and BatchUpdateBlobs take their requests as bytes (the
// raw callback methods), judged by what they would cost parsed before they
// are parsed (coordinator/request_cost): a few megabytes of empty digests
// would otherwise be hundreds of megabytes of objects.
using CasServiceBase = v1::ContentStore::WithRawCallbackMethod_FindMissingBlobs<
    v1::ContentStore::WithRawCallbackMethod_BatchUpdateBlobs<v1::ContentStore::CallbackService>>;

class CasService final : public CasServiceBase {
 public:
  // Every call needs the client or the worker role in `access`; no blob
  // above `max_blob_bytes` is stored (RESOURCE_EXHAUSTED naming the limit).
  // The store's disk work (reading, writing, hashing, syncing blobs) runs
  // on `io` (may be null: on the gRPC threads), off the reactors' threads;
  // when its queue is full, on the gRPC thread.
  CasService(const AccessControl* access, CasStore* store,
             int64_t max_blob_bytes = int64_t{4} << 30, BoundedExecutor* io = nullptr)
      : access_(access), store_(store), max_blob_bytes_(max_blob_bytes), io_(io) {}

  // A v1::FindMissingBlobsRequest in, a v1::FindMissingBlobsResponse out.
  grpc::ServerUnaryReactor* FindMissingBlobs(grpc::CallbackServerContext* context,
                                             const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) override;
  // A v1::BatchUpdateBlobsRequest in, a v1::BatchUpdateBlobsResponse out.
  grpc::ServerUnaryReactor* BatchUpdateBlobs(grpc::CallbackServerContext* context,
                                             const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) override;
  grpc::ServerReadReactor<v1::WriteBlobRequest>* WriteBlob(
      grpc::CallbackServerContext* context, v1::WriteBlobResponse* response) override;
  grpc::ServerWriteReactor<v1::ReadBlobResponse>* ReadBlob(
      grpc::CallbackServerContext* context, const v1::ReadBlobRequest* request) override;
  grpc::ServerUnaryReactor* ListToolkits(grpc::CallbackServerContext* context,
                                         const v1::ListToolkitsRequest* request,
                                         v1::ListToolkitsResponse* response) override;

  // The toolkits ListToolkits names (served_toolkits.h); set before the
  // server starts, never after.
  void ServeToolkits(std::vector<v1::ServedToolkit> toolkits) { toolkits_ = std::move(toolkits); }

  // The calls' work, on parsed messages (also the Remote Execution API's,
  // reapi_cas_service.h). Disk work: not on a reactor's thread.
  absl::Status FindMissing(const v1::FindMissingBlobsRequest& request,
                           v1::FindMissingBlobsResponse& response);
  void BatchUpdate(const v1::BatchUpdateBlobsRequest& request,
                   v1::BatchUpdateBlobsResponse& response);

  CasStore* store() const { return store_; }
  int64_t max_blob_bytes() const { return max_blob_bytes_; }
  BoundedExecutor* io() const { return io_; }

 private:
  // OK if the caller may use the content store.
  absl::Status Authorize(const grpc::CallbackServerContext& context) const;

  const AccessControl* access_;
  CasStore* store_;
  int64_t max_blob_bytes_;
  BoundedExecutor* const io_;
  std::vector<v1::ServedToolkit> toolkits_;
};

}  // namespace distcc_cuda::coordinator
