// SPDX-License-Identifier: Apache-2.0
#include "coordinator/services/cas_service.h"

#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/base/status.h"
#include "common/store/cas_client.h"
#include "coordinator/planning/request_cost.h"
#include "coordinator/services/blob_streams.h"

namespace distcc_cuda::coordinator {
namespace {

// The coordinator's own messages name a blob by its digest.
struct StoreNaming {
  static absl::StatusOr<Digest> DigestOf(const v1::WriteBlobRequest& request) {
    return FromProto(request.digest());
  }
  static int64_t OffsetOf(const v1::WriteBlobRequest& request) { return request.offset(); }
};

struct StoreChunk {
  static void Fill(v1::ReadBlobResponse& response, int64_t offset, absl::string_view data) {
    response.set_offset(offset);
    response.set_data(data.data(), data.size());
  }
};

}  // namespace

absl::Status CasService::Authorize(const grpc::CallbackServerContext& context) const {
  return access_
      ->Authorize(context, {PeerRole::kClient, PeerRole::kWorker}, "use the content store")
      .status();
}

absl::Status CasService::FindMissing(const v1::FindMissingBlobsRequest& request,
                                     v1::FindMissingBlobsResponse& response) {
  for (const auto& proto : request.digests()) {
    Digest digest = FromProto(proto);
    RETURN_IF_ERROR(ValidateDigest(digest));
    // Hashed once per coordinator run: a blob damaged on disk is missing.
    bool found = store_->Verify(digest).ok();
    store_->CountLookup(found);
    if (!found) *response.add_missing() = proto;
  }
  return absl::OkStatus();
}

void CasService::BatchUpdate(const v1::BatchUpdateBlobsRequest& request,
                             v1::BatchUpdateBlobsResponse& response) {
  // Blobs of a size this store takes are stored together (PutMany).
  std::vector<absl::Status> results(request.blobs_size());
  std::vector<std::pair<Digest, absl::string_view>> storing;
  std::vector<int> stored_at;
  // What the batch's new blobs take on disk, bounded: tiny blobs cost
  // their blocks and their files, not their bytes.
  int64_t disk = 0;
  for (int i = 0; i < request.blobs_size(); ++i) {
    const auto& blob = request.blobs(i);
    const Digest digest = FromProto(blob.digest());
    results[i] = CheckBlobSize(digest, max_blob_bytes_);
    if (!results[i].ok()) continue;
    if (!store_->Contains(digest) &&
        (disk += BlobDiskCost(digest.size_bytes)) > kMaxBatchDiskBytes) {
      results[i] = absl::ResourceExhaustedError(absl::StrCat(
          "this batch's new blobs would take more than ", FormatByteSize(kMaxBatchDiskBytes),
          " of the store's disk (a blob takes whole 4 KiB blocks and one more for its file); "
          "send the rest in another batch"));
      continue;
    }
    storing.emplace_back(digest, blob.data());
    stored_at.push_back(i);
  }
  std::vector<absl::Status> stored = store_->PutMany(storing);
  for (size_t k = 0; k < stored.size(); ++k) results[stored_at[k]] = std::move(stored[k]);
  for (int i = 0; i < request.blobs_size(); ++i) {
    auto* result = response.add_results();
    *result->mutable_digest() = request.blobs(i).digest();
    result->set_code(static_cast<int>(results[i].code()));
    result->set_message(std::string(results[i].message()));
  }
}

grpc::ServerUnaryReactor* CasService::FindMissingBlobs(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* raw,
                                                       grpc::ByteBuffer* raw_response) {
  auto* reactor = context->DefaultReactor();
  absl::Status status = Authorize(*context);
  if (!status.ok()) {
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }
  // Looking a blob up hashes it the first time: on io_.
  RunOnOrHere(io_, [this, reactor, raw, raw_response] {
    v1::FindMissingBlobsRequest request;
    v1::FindMissingBlobsResponse response;
    absl::Status status = ParseRequest(*raw, nullptr, "the FindMissingBlobs request", request);
    if (status.ok()) status = FindMissing(request, response);
    if (status.ok()) *raw_response = SerializedBytes(response);
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

grpc::ServerUnaryReactor* CasService::BatchUpdateBlobs(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* raw,
                                                       grpc::ByteBuffer* raw_response) {
  auto* reactor = context->DefaultReactor();
  absl::Status status = Authorize(*context);
  if (!status.ok()) {
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }
  // Storing writes and syncs files: on io_.
  RunOnOrHere(io_, [this, reactor, raw, raw_response] {
    v1::BatchUpdateBlobsRequest request;
    absl::Status status = ParseRequest(*raw, nullptr, "the BatchUpdateBlobs request", request);
    if (status.ok()) {
      v1::BatchUpdateBlobsResponse response;
      BatchUpdate(request, response);
      *raw_response = SerializedBytes(response);
    }
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

grpc::ServerReadReactor<v1::WriteBlobRequest>* CasService::WriteBlob(
    grpc::CallbackServerContext* context, v1::WriteBlobResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) {
    return RefuseCall<grpc::ServerReadReactor<v1::WriteBlobRequest>>(ToGrpcStatus(allowed));
  }
  return new BlobWriteReactor<v1::WriteBlobRequest, v1::WriteBlobResponse, StoreNaming>(
      store_, max_blob_bytes_, response, io_);
}

grpc::ServerWriteReactor<v1::ReadBlobResponse>* CasService::ReadBlob(
    grpc::CallbackServerContext* context, const v1::ReadBlobRequest* request) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) {
    return RefuseCall<grpc::ServerWriteReactor<v1::ReadBlobResponse>>(ToGrpcStatus(allowed));
  }
  return new BlobReadReactor<v1::ReadBlobResponse, StoreChunk>(store_, FromProto(request->digest()),
                                                               io_);
}

grpc::ServerUnaryReactor* CasService::ListToolkits(grpc::CallbackServerContext* context,
                                                   const v1::ListToolkitsRequest* /*request*/,
                                                   v1::ListToolkitsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status allowed = Authorize(*context);
  if (allowed.ok()) {
    for (const v1::ServedToolkit& toolkit : toolkits_) *response->add_toolkits() = toolkit;
  }
  reactor->Finish(ToGrpcStatus(allowed));
  return reactor;
}

}  // namespace distcc_cuda::coordinator
