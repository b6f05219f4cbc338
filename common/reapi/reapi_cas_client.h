// SPDX-License-Identifier: Apache-2.0
// The client of a Remote Execution API engine's content store: its
// ContentAddressableStorage (FindMissingBlobs, BatchUpdateBlobs) and its
// ByteStream (Read and Write, "INSTANCE/blobs/HASH/SIZE" and
// "INSTANCE/uploads/UUID/blobs/HASH/SIZE"). What a worker that is another
// engine's bot fetches inputs and uploads outputs with; the transfers
// themselves are BlobClient's (common/store/blob_client.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "build/bazel/remote/execution/v2/remote_execution.grpc.pb.h"
#include "common/reapi/reapi_digest.h"
#include "common/store/blob_client.h"
#include "google/bytestream/bytestream.grpc.pb.h"
#include "google/protobuf/message.h"
#include "grpcpp/channel.h"

namespace distcc_cuda {

class ReapiCasClient : public BlobClient {
 public:
  ReapiCasClient(const std::shared_ptr<grpc::Channel>& channel, std::string instance,
                 absl::Duration timeout = absl::Minutes(10));

  absl::StatusOr<std::vector<Digest>> FindMissing(const std::vector<Digest>& digests) override;

  // Reads the engine's blob `digest` (an Action, a Command, a Directory)
  // into `message`, through `store`: INVALID_ARGUMENT naming `what` when the
  // digest is malformed, the blob is larger than 4 MiB, would take more than
  // 64 MiB parsed, or does not parse; FAILED_PRECONDITION with a MISSING
  // violation naming "blobs/HASH/SIZE" when the engine lacks it.
  absl::Status ReadMessage(const reapi::Digest& digest, absl::string_view what, CasStore& store,
                           google::protobuf::Message& message);

 private:
  absl::Status UploadBatch(const std::vector<const BlobSource*>& batch) override;
  absl::Status UploadStreamed(const BlobSource& blob) override;
  absl::Status Read(const Digest& digest,
                    const std::function<absl::Status(absl::string_view)>& sink) override;
  // "INSTANCE/" or "" for the default instance.
  std::string Prefix() const;

  std::string instance_;
  std::unique_ptr<reapi::ContentAddressableStorage::Stub> cas_;
  std::unique_ptr<google::bytestream::ByteStream::Stub> bytestream_;
};

}  // namespace distcc_cuda
