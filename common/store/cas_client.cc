// SPDX-License-Identifier: Apache-2.0
#include "common/store/cas_client.h"

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status.h"

namespace distcc_cuda {

CasClient::CasClient(std::shared_ptr<v1::ContentStore::StubInterface> stub, absl::Duration timeout)
    : BlobClient(timeout), stub_(std::move(stub)) {}

absl::StatusOr<std::vector<Digest>> CasClient::FindMissing(const std::vector<Digest>& digests) {
  std::vector<Digest> missing;
  // Keep each request far below the 4 MiB message limit.
  constexpr size_t kPerCall = 10000;
  for (size_t begin = 0; begin < digests.size(); begin += kPerCall) {
    v1::FindMissingBlobsRequest request;
    for (size_t i = begin; i < std::min(digests.size(), begin + kPerCall); ++i) {
      *request.add_digests() = ToProto(digests[i]);
    }
    v1::FindMissingBlobsResponse response;
    grpc::ClientContext context;
    InFlight in_flight(this, context);
    RETURN_IF_ERROR(Annotate(FromGrpcStatus(stub_->FindMissingBlobs(&context, request, &response)),
                             "FindMissingBlobs"));
    for (const auto& digest : response.missing()) {
      missing.push_back(FromProto(digest));
    }
  }
  return missing;
}

absl::Status CasClient::UploadBatch(const std::vector<const BlobSource*>& batch) {
  v1::BatchUpdateBlobsRequest request;
  for (const BlobSource* blob : batch) {
    auto* entry = request.add_blobs();
    *entry->mutable_digest() = ToProto(blob->digest);
    if (blob->path.empty()) {
      entry->set_data(blob->bytes);
    } else {
      ASSIGN_OR_RETURN(std::string content, ReadFile(blob->path));
      entry->set_data(std::move(content));
    }
  }
  v1::BatchUpdateBlobsResponse response;
  grpc::ClientContext context;
  InFlight in_flight(this, context);
  RETURN_IF_ERROR(Annotate(FromGrpcStatus(stub_->BatchUpdateBlobs(&context, request, &response)),
                           "BatchUpdateBlobs"));
  for (const auto& result : response.results()) {
    if (result.code() != 0) {
      return absl::Status(static_cast<absl::StatusCode>(result.code()), result.message());
    }
  }
  return absl::OkStatus();
}

absl::Status CasClient::UploadStreamed(const BlobSource& blob) {
  grpc::ClientContext context;
  InFlight in_flight(this, context);
  v1::WriteBlobResponse response;
  auto writer = stub_->WriteBlob(&context, &response);
  absl::Status read = ForEachChunk(blob, [&](absl::string_view chunk, int64_t offset, bool last) {
    v1::WriteBlobRequest request;
    if (offset == 0) *request.mutable_digest() = ToProto(blob.digest);
    request.set_offset(offset);
    request.set_data(chunk.data(), chunk.size());
    request.set_finish_write(last);
    return writer->Write(request);
  });
  if (!read.ok()) {
    writer->WritesDone();
    writer->Finish();
    return read;
  }
  writer->WritesDone();
  return Annotate(FromGrpcStatus(writer->Finish()),
                  absl::StrCat("WriteBlob ", blob.digest.ToString()));
}

absl::Status CasClient::Read(const Digest& digest,
                             const std::function<absl::Status(absl::string_view)>& sink) {
  grpc::ClientContext context;
  InFlight in_flight(this, context);
  v1::ReadBlobRequest request;
  *request.mutable_digest() = ToProto(digest);
  auto reader = stub_->ReadBlob(&context, request);
  v1::ReadBlobResponse chunk;
  absl::Status sink_status;
  while (reader->Read(&chunk)) {
    sink_status = sink(chunk.data());
    if (!sink_status.ok()) {
      context.TryCancel();
      break;
    }
  }
  grpc::Status finished = reader->Finish();
  RETURN_IF_ERROR(sink_status);
  return Annotate(FromGrpcStatus(finished), absl::StrCat("ReadBlob ", digest.ToString()));
}

}  // namespace distcc_cuda
