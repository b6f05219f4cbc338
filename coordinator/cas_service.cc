// SPDX-License-Identifier: Apache-2.0
#include "coordinator/cas_service.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/base/status.h"
#include "common/store/cas_client.h"
#include "coordinator/request_cost.h"

namespace distcc_cuda::coordinator {
namespace {

absl::Status CheckBlobSize(const Digest& digest, int64_t max_blob_bytes) {
  if (digest.size_bytes <= max_blob_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("blob ", digest.ToString().substr(0, 80), " is ",
                   FormatByteSize(digest.size_bytes), "; this coordinator stores blobs of at most ",
                   FormatByteSize(max_blob_bytes), " (--max-blob-size)"));
}

// Receives one blob in chunks and commits it once verified.
class WriteBlobReactor final : public grpc::ServerReadReactor<v1::WriteBlobRequest> {
 public:
  WriteBlobReactor(CasStore* store, int64_t max_blob_bytes, v1::WriteBlobResponse* response,
                   BoundedExecutor* io)
      : store_(store), max_blob_bytes_(max_blob_bytes), response_(response), io_(io) {
    StartRead(&request_);
  }

  // Each chunk is written (and the blob hashed and synced) on `io_`.
  void OnReadDone(bool ok) override {
    RunOnOrHere(io_, [this, ok] { Received(ok); });
  }

  void OnDone() override { delete this; }

 private:
  // Takes a chunk (or, once the client closed its side, commits the blob)
  // and asks for the next; Finish or StartRead is its last step.
  void Received(bool ok) {
    if (!ok) {
      // The client closed its side; the blob must be whole by now.
      if (writer_ == nullptr) {
        Finish(
            grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "WriteBlob stream carried no chunk"));
        return;
      }
      Finish(ToGrpcStatus(Commit()));
      return;
    }
    absl::Status status = Accept();
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    StartRead(&request_);
  }

  absl::Status Accept() {
    if (writer_ == nullptr) {
      Digest digest = FromProto(request_.digest());
      RETURN_IF_ERROR(CheckBlobSize(digest, max_blob_bytes_));
      ASSIGN_OR_RETURN(writer_, store_->StartWrite(digest));
      digest_ = digest;
    }
    if (static_cast<int64_t>(request_.data().size()) > kMaxChunkBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk of ", request_.data().size(), " bytes exceeds the 1 MiB limit"));
    }
    return writer_->Append(request_.offset(), request_.data());
  }

  absl::Status Commit() {
    if (writer_->bytes_written() != digest_.size_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("blob ", digest_.ToString(), " ended after ",
                                                     writer_->bytes_written(), " bytes"));
    }
    RETURN_IF_ERROR(writer_->Commit());
    response_->set_committed_size(digest_.size_bytes);
    return absl::OkStatus();
  }

  CasStore* store_;
  int64_t max_blob_bytes_;
  v1::WriteBlobResponse* response_;
  BoundedExecutor* io_;
  v1::WriteBlobRequest request_;
  std::unique_ptr<BlobWriter> writer_;
  Digest digest_;
};

// Sends one blob in chunks of at most 1 MiB, one write in flight.
class ReadBlobReactor final : public grpc::ServerWriteReactor<v1::ReadBlobResponse> {
 public:
  // The blob is verified, read and hashed on `io_`.
  ReadBlobReactor(CasStore* store, const v1::ReadBlobRequest* request, BoundedExecutor* io)
      : store_(store), io_(io), digest_(FromProto(request->digest())) {
    RunOnOrHere(io_, [this] { Begin(); });
  }

  void OnWriteDone(bool ok) override {
    RunOnOrHere(io_, [this, ok] {
      if (!ok) {
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "reader went away"));
        return;
      }
      Next();
    });
  }

  void OnDone() override { delete this; }

 private:
  void Begin() {
    absl::Status valid = ValidateDigest(digest_);
    if (!valid.ok()) {
      Finish(ToGrpcStatus(valid));
      return;
    }
    // Hashed on its first read since the coordinator started; a damaged
    // blob is removed, so the next FindMissingBlobs asks for it again.
    absl::Status verified = store_->Verify(digest_);
    if (!verified.ok()) {
      Finish(grpc::Status(
          grpc::StatusCode::NOT_FOUND,
          absl::StrCat(verified.message(), absl::IsDataLoss(verified)
                                               ? "; the next build uploads or rebuilds it"
                                               : " of the coordinator")));
      return;
    }
    if (digest_.size_bytes > 0) in_.open(store_->PathOf(digest_), std::ios::binary);
    buffer_.resize(kMaxChunkBytes);
    Next();
  }

  void Next() {
    if (offset_ >= digest_.size_bytes) {
      Finish(grpc::Status::OK);
      return;
    }
    in_.read(buffer_.data(), buffer_.size());
    std::streamsize n = in_.gcount();
    if (n <= 0) {
      Finish(grpc::Status(
          grpc::StatusCode::DATA_LOSS,
          absl::StrCat("blob ", digest_.ToString(), " is shorter on disk than its size")));
      return;
    }
    // Damaged since it was verified: the last chunk is held back, so the
    // reader never gets a wrong blob whole, and the blob goes.
    sha_.Update(absl::string_view(buffer_.data(), n));
    if (offset_ + n >= digest_.size_bytes) {
      std::string actual = sha_.FinishHex();
      if (actual != digest_.hash) {
        store_->Discard(digest_,
                        absl::StrCat("while read, its bytes hashed to ", actual.substr(0, 16)));
        Finish(grpc::Status(grpc::StatusCode::DATA_LOSS,
                            absl::StrCat("blob ", digest_.ToString(),
                                         " was damaged on the coordinator's disk and has been "
                                         "removed; the next build uploads or rebuilds it")));
        return;
      }
    }
    response_.set_offset(offset_);
    response_.set_data(buffer_.data(), n);
    offset_ += n;
    StartWrite(&response_);
  }

  CasStore* store_;
  BoundedExecutor* io_;
  Sha256 sha_;
  Digest digest_;
  std::ifstream in_;
  std::string buffer_;
  int64_t offset_ = 0;
  v1::ReadBlobResponse response_;
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
  for (int i = 0; i < request.blobs_size(); ++i) {
    const auto& blob = request.blobs(i);
    results[i] = CheckBlobSize(FromProto(blob.digest()), max_blob_bytes_);
    if (!results[i].ok()) continue;
    storing.emplace_back(FromProto(blob.digest()), blob.data());
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
  return new WriteBlobReactor(store_, max_blob_bytes_, response, io_);
}

grpc::ServerWriteReactor<v1::ReadBlobResponse>* CasService::ReadBlob(
    grpc::CallbackServerContext* context, const v1::ReadBlobRequest* request) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) {
    return RefuseCall<grpc::ServerWriteReactor<v1::ReadBlobResponse>>(ToGrpcStatus(allowed));
  }
  return new ReadBlobReactor(store_, request, io_);
}

}  // namespace distcc_cuda::coordinator
