// SPDX-License-Identifier: Apache-2.0
// The ContentStore service over the coordinator's on-disk CAS.
#pragma once

#include "common/cas_store.h"
#include "distcc_cuda/v1/cas.grpc.pb.h"

namespace distcc_cuda::coordinator {

class CasService final : public v1::ContentStore::CallbackService {
 public:
  explicit CasService(CasStore* store) : store_(store) {}

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
  CasStore* store_;
};

}  // namespace distcc_cuda::coordinator
