// SPDX-License-Identifier: Apache-2.0
// The ContentStore service over the coordinator's on-disk CAS.
#pragma once

#include "common/cas_store.h"
#include "coordinator/access_control.h"
#include "distcc_cuda/v1/cas.grpc.pb.h"

namespace distcc_cuda::coordinator {

class CasService final : public v1::ContentStore::CallbackService {
 public:
  // Every call needs the client or the worker role in `access`; no blob
  // above `max_blob_bytes` is stored (RESOURCE_EXHAUSTED naming the limit).
  CasService(const AccessControl* access, CasStore* store,
             int64_t max_blob_bytes = int64_t{4} << 30)
      : access_(access), store_(store), max_blob_bytes_(max_blob_bytes) {}

  grpc::ServerUnaryReactor* FindMissingBlobs(grpc::CallbackServerContext* context,
                                             const v1::FindMissingBlobsRequest* request,
                                             v1::FindMissingBlobsResponse* response) override;
  grpc::ServerUnaryReactor* BatchUpdateBlobs(grpc::CallbackServerContext* context,
                                             const v1::BatchUpdateBlobsRequest* request,
                                             v1::BatchUpdateBlobsResponse* response) override;
  grpc::ServerReadReactor<v1::WriteBlobRequest>* WriteBlob(
      grpc::CallbackServerContext* context, v1::WriteBlobResponse* response) override;
  grpc::ServerWriteReactor<v1::ReadBlobResponse>* ReadBlob(
      grpc::CallbackServerContext* context, const v1::ReadBlobRequest* request) override;

 private:
  // OK if the caller may use the content store.
  absl::Status Authorize(const grpc::CallbackServerContext& context) const;

  const AccessControl* access_;
  CasStore* store_;
  int64_t max_blob_bytes_;
};

}  // namespace distcc_cuda::coordinator
