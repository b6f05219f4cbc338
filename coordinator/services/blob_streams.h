// SPDX-License-Identifier: Apache-2.0
// The store's blobs streamed in and out in chunks, for the coordinator's
// own content store service (cas_service.h) and for the Remote Execution
// API's ByteStream (reapi_cas_service.h): one reactor each way, templated on
// the messages that name the blob and carry its chunks.
#pragma once

#include <grpcpp/support/server_callback.h>

#include <fstream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/base/bounded_executor.h"
#include "common/base/byte_size.h"
#include "common/base/status.h"
#include "common/store/cas_client.h"
#include "common/store/cas_store.h"
#include "common/store/digest.h"

namespace distcc_cuda::coordinator {

// OK for a blob of at most `max_blob_bytes`, else RESOURCE_EXHAUSTED
// naming the limit.
inline absl::Status CheckBlobSize(const Digest& digest, int64_t max_blob_bytes) {
  if (digest.size_bytes <= max_blob_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("blob ", digest.ToString().substr(0, 80), " is ",
                   FormatByteSize(digest.size_bytes), "; this coordinator stores blobs of at most ",
                   FormatByteSize(max_blob_bytes), " (--max-blob-size)"));
}

// Receives one blob in chunks and commits it once verified. `Naming` says
// which blob a stream's first `Request` names and where a chunk goes:
// static absl::StatusOr<Digest> DigestOf(const Request&) and
// static int64_t OffsetOf(const Request&). `Response` has committed_size.
template <typename Request, typename Response, typename Naming>
class BlobWriteReactor final : public grpc::ServerReadReactor<Request> {
 public:
  BlobWriteReactor(CasStore* store, int64_t max_blob_bytes, Response* response, BoundedExecutor* io)
      : store_(store), max_blob_bytes_(max_blob_bytes), response_(response), io_(io) {
    this->StartRead(&request_);
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
        this->Finish(
            grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the write stream carried no chunk"));
        return;
      }
      this->Finish(ToGrpcStatus(Commit()));
      return;
    }
    absl::Status status = Accept();
    if (!status.ok()) {
      this->Finish(ToGrpcStatus(status));
      return;
    }
    this->StartRead(&request_);
  }

  absl::Status Accept() {
    if (writer_ == nullptr) {
      ASSIGN_OR_RETURN(Digest digest, Naming::DigestOf(request_));
      RETURN_IF_ERROR(CheckBlobSize(digest, max_blob_bytes_));
      ASSIGN_OR_RETURN(writer_, store_->StartWrite(digest));
      digest_ = digest;
    }
    if (static_cast<int64_t>(request_.data().size()) > kMaxChunkBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk of ", request_.data().size(), " bytes exceeds the 1 MiB limit"));
    }
    return writer_->Append(Naming::OffsetOf(request_), request_.data());
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
  Response* response_;
  BoundedExecutor* io_;
  Request request_;
  std::unique_ptr<BlobWriter> writer_;
  Digest digest_;
};

// Which bytes of a blob a read sends: from `offset`, at most `limit` (0:
// to its end). ByteStream's read_offset and read_limit; the whole blob for
// the coordinator's own ReadBlob.
struct ReadWindow {
  int64_t offset = 0;
  int64_t limit = 0;
};

// Sends one blob (or the window of it asked for) in chunks of at most 1
// MiB, one write in flight. `Chunk` fills a `Response`: static void
// Fill(Response&, int64_t offset, absl::string_view data).
template <typename Response, typename Chunk>
class BlobReadReactor final : public grpc::ServerWriteReactor<Response> {
 public:
  // The blob `digest` (a request that names none: its error) is verified,
  // read and hashed on `io_`: all of it, whatever the window, so that a
  // blob damaged since it was verified is never sent to its end.
  BlobReadReactor(CasStore* store, absl::StatusOr<Digest> digest, BoundedExecutor* io,
                  ReadWindow window = {})
      : store_(store), io_(io), named_(std::move(digest)), window_(window) {
    RunOnOrHere(io_, [this] { Begin(); });
  }

  void OnWriteDone(bool ok) override {
    RunOnOrHere(io_, [this, ok] {
      if (!ok) {
        this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "reader went away"));
        return;
      }
      Next();
    });
  }

  void OnDone() override { delete this; }

 private:
  void Begin() {
    absl::Status valid = named_.ok() ? ValidateDigest(*named_) : named_.status();
    if (!valid.ok()) {
      this->Finish(ToGrpcStatus(valid));
      return;
    }
    digest_ = *named_;
    if (window_.offset < 0 || window_.offset > digest_.size_bytes || window_.limit < 0) {
      this->Finish(grpc::Status(
          window_.limit < 0 ? grpc::StatusCode::INVALID_ARGUMENT : grpc::StatusCode::OUT_OF_RANGE,
          absl::StrCat("read_offset ", window_.offset, " and read_limit ", window_.limit,
                       " are not a window of blob ", digest_.ToString())));
      return;
    }
    end_ = window_.limit > 0 ? std::min(digest_.size_bytes, window_.offset + window_.limit)
                             : digest_.size_bytes;
    // Hashed on its first read since the coordinator started; a damaged
    // blob is removed, so the next FindMissingBlobs asks for it again.
    absl::Status verified = store_->Verify(digest_);
    if (!verified.ok()) {
      this->Finish(grpc::Status(
          grpc::StatusCode::NOT_FOUND,
          absl::StrCat(verified.message(), absl::IsDataLoss(verified)
                                               ? "; the next build uploads or rebuilds it"
                                               : " of the coordinator")));
      return;
    }
    if (digest_.size_bytes > 0) in_.open(store_->PathOf(digest_), std::ios::binary);
    buffer_.resize(kMaxChunkBytes);
    // The bytes before the window are hashed, not sent.
    while (offset_ < window_.offset) {
      std::streamsize n = ReadChunk(window_.offset - offset_);
      if (n <= 0) return;
      offset_ += n;
    }
    Next();
  }

  // Reads at most `most` bytes (and kMaxChunkBytes) into buffer_ and hashes
  // them; 0 or less, with the call finished, when the file ends early.
  std::streamsize ReadChunk(int64_t most) {
    in_.read(buffer_.data(), std::min<int64_t>(most, buffer_.size()));
    std::streamsize n = in_.gcount();
    if (n <= 0) {
      this->Finish(grpc::Status(
          grpc::StatusCode::DATA_LOSS,
          absl::StrCat("blob ", digest_.ToString(), " is shorter on disk than its size")));
      return 0;
    }
    sha_.Update(absl::string_view(buffer_.data(), n));
    return n;
  }

  void Next() {
    if (offset_ >= end_) {
      this->Finish(grpc::Status::OK);
      return;
    }
    std::streamsize n = ReadChunk(end_ - offset_);
    if (n <= 0) return;
    // Damaged since it was verified: the last chunk is held back, so the
    // reader never gets a wrong blob whole, and the blob goes. A window
    // that ends early has the rest of the blob hashed first.
    if (offset_ + n >= end_) {
      std::string tail;
      for (int64_t rest = end_; rest < digest_.size_bytes; rest += in_.gcount()) {
        tail.resize(std::min<int64_t>(kMaxChunkBytes, digest_.size_bytes - rest));
        in_.read(tail.data(), tail.size());
        if (in_.gcount() <= 0) break;
        sha_.Update(absl::string_view(tail.data(), in_.gcount()));
      }
      std::string actual = sha_.FinishHex();
      if (actual != digest_.hash) {
        store_->Discard(digest_,
                        absl::StrCat("while read, its bytes hashed to ", actual.substr(0, 16)));
        this->Finish(
            grpc::Status(grpc::StatusCode::DATA_LOSS,
                         absl::StrCat("blob ", digest_.ToString(),
                                      " was damaged on the coordinator's disk and has been "
                                      "removed; the next build uploads or rebuilds it")));
        return;
      }
    }
    Chunk::Fill(response_, offset_, absl::string_view(buffer_.data(), n));
    offset_ += n;
    this->StartWrite(&response_);
  }

  CasStore* store_;
  BoundedExecutor* io_;
  Sha256 sha_;
  absl::StatusOr<Digest> named_;
  Digest digest_;
  std::ifstream in_;
  std::string buffer_;
  ReadWindow window_;
  int64_t end_ = 0;  // where the window ends
  int64_t offset_ = 0;
  Response response_;
};

}  // namespace distcc_cuda::coordinator
