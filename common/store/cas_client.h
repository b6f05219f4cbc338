// SPDX-License-Identifier: Apache-2.0
// The client side of distcc-cuda's own ContentStore service, shared by the
// build client (uploads inputs, downloads objects) and the worker (fetches
// inputs, uploads outputs). What it does with blobs is BlobClient's
// (blob_client.h); this is how it says it in ContentStore's calls.
#pragma once

#include <memory>
#include <vector>

#include "common/store/blob_client.h"
#include "distcc_cuda/v1/cas.grpc.pb.h"

namespace distcc_cuda {

class CasClient : public BlobClient {
 public:
  explicit CasClient(std::shared_ptr<v1::ContentStore::StubInterface> stub,
                     absl::Duration timeout = absl::Minutes(10));

  absl::StatusOr<std::vector<Digest>> FindMissing(const std::vector<Digest>& digests) override;

 private:
  absl::Status UploadBatch(const std::vector<const BlobSource*>& batch) override;
  absl::Status UploadStreamed(const BlobSource& blob) override;
  absl::Status Read(const Digest& digest,
                    const std::function<absl::Status(absl::string_view)>& sink) override;

  std::shared_ptr<v1::ContentStore::StubInterface> stub_;
};

}  // namespace distcc_cuda
