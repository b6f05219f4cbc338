// SPDX-License-Identifier: Apache-2.0
#include "common/reapi/reapi_cas_client.h"

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/transport/message_cost.h"

namespace distcc_cuda {
namespace {

// What a message blob may take once parsed: 16 times the largest one.
constexpr int64_t kMaxParsedBytes = int64_t{64} << 20;

// A fresh version 4 UUID, for an upload's resource name.
std::string NewUuid() {
  absl::BitGen random;
  uint64_t high = absl::Uniform<uint64_t>(random);
  uint64_t low = absl::Uniform<uint64_t>(random);
  high = (high & ~uint64_t{0xF000}) | 0x4000;
  low = (low & ~(uint64_t{0xC} << 60)) | (uint64_t{0x8} << 60);
  return absl::StrFormat("%08x-%04x-%04x-%04x-%012x", high >> 32, (high >> 16) & 0xFFFF,
                         high & 0xFFFF, low >> 48, low & 0xFFFFFFFFFFFF);
}

}  // namespace

ReapiCasClient::ReapiCasClient(const std::shared_ptr<grpc::Channel>& channel, std::string instance,
                               absl::Duration timeout)
    : BlobClient(timeout),
      instance_(std::move(instance)),
      cas_(reapi::ContentAddressableStorage::NewStub(channel)),
      bytestream_(google::bytestream::ByteStream::NewStub(channel)) {}

std::string ReapiCasClient::Prefix() const {
  return instance_.empty() ? "" : absl::StrCat(instance_, "/");
}

absl::StatusOr<std::vector<Digest>> ReapiCasClient::FindMissing(
    const std::vector<Digest>& digests) {
  std::vector<Digest> missing;
  constexpr size_t kPerCall = 10000;
  for (size_t begin = 0; begin < digests.size(); begin += kPerCall) {
    reapi::FindMissingBlobsRequest request;
    request.set_instance_name(instance_);
    for (size_t i = begin; i < std::min(digests.size(), begin + kPerCall); ++i) {
      *request.add_blob_digests() = ToReapi(digests[i]);
    }
    reapi::FindMissingBlobsResponse response;
    grpc::ClientContext context;
    InFlight in_flight(this, context);
    RETURN_IF_ERROR(Annotate(FromGrpcStatus(cas_->FindMissingBlobs(&context, request, &response)),
                             "FindMissingBlobs"));
    for (const reapi::Digest& digest : response.missing_blob_digests()) {
      missing.push_back(FromReapi(digest));
    }
  }
  return missing;
}

absl::Status ReapiCasClient::UploadBatch(const std::vector<const BlobSource*>& batch) {
  reapi::BatchUpdateBlobsRequest request;
  request.set_instance_name(instance_);
  for (const BlobSource* blob : batch) {
    auto* entry = request.add_requests();
    *entry->mutable_digest() = ToReapi(blob->digest);
    if (blob->path.empty()) {
      entry->set_data(blob->bytes);
    } else {
      ASSIGN_OR_RETURN(std::string content, ReadFile(blob->path));
      entry->set_data(std::move(content));
    }
  }
  reapi::BatchUpdateBlobsResponse response;
  grpc::ClientContext context;
  InFlight in_flight(this, context);
  RETURN_IF_ERROR(Annotate(FromGrpcStatus(cas_->BatchUpdateBlobs(&context, request, &response)),
                           "BatchUpdateBlobs"));
  for (const auto& result : response.responses()) {
    if (result.status().code() != 0) {
      return absl::Status(static_cast<absl::StatusCode>(result.status().code()),
                          absl::StrCat("BatchUpdateBlobs ", BlobSubject(result.digest()), ": ",
                                       result.status().message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ReapiCasClient::UploadStreamed(const BlobSource& blob) {
  grpc::ClientContext context;
  InFlight in_flight(this, context);
  google::bytestream::WriteResponse response;
  auto writer = bytestream_->Write(&context, &response);
  const std::string resource =
      absl::StrCat(Prefix(), "uploads/", NewUuid(), "/", BlobSubject(ToReapi(blob.digest)));
  absl::Status read = ForEachChunk(blob, [&](absl::string_view chunk, int64_t offset, bool last) {
    google::bytestream::WriteRequest request;
    if (offset == 0) request.set_resource_name(resource);
    request.set_write_offset(offset);
    request.set_data(chunk.data(), chunk.size());
    request.set_finish_write(last);
    return writer->Write(request);
  });
  writer->WritesDone();
  grpc::Status finished = writer->Finish();
  RETURN_IF_ERROR(read);
  RETURN_IF_ERROR(Annotate(FromGrpcStatus(finished), absl::StrCat("ByteStream.Write ", resource)));
  if (response.committed_size() != blob.digest.size_bytes) {
    return absl::DataLossError(absl::StrCat("ByteStream.Write ", resource, " committed ",
                                            response.committed_size(), " bytes of ",
                                            blob.digest.size_bytes));
  }
  return absl::OkStatus();
}

absl::Status ReapiCasClient::Read(const Digest& digest,
                                  const std::function<absl::Status(absl::string_view)>& sink) {
  grpc::ClientContext context;
  InFlight in_flight(this, context);
  google::bytestream::ReadRequest request;
  request.set_resource_name(absl::StrCat(Prefix(), BlobSubject(ToReapi(digest))));
  auto reader = bytestream_->Read(&context, request);
  google::bytestream::ReadResponse chunk;
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
  return Annotate(FromGrpcStatus(finished),
                  absl::StrCat("ByteStream.Read ", request.resource_name()));
}

absl::Status ReapiCasClient::ReadMessage(const reapi::Digest& digest, absl::string_view what,
                                         CasStore& store, google::protobuf::Message& message) {
  RETURN_IF_ERROR(CheckMessageDigest(digest, what));
  absl::StatusOr<std::string> fetched = FetchThroughStore(FromReapi(digest), store);
  if (absl::IsNotFound(fetched.status())) {
    // Named as REAPI names a missing blob: the client uploads it again.
    return MissingBlobsError(absl::StrCat("the engine lacks ", what, " (", BlobSubject(digest),
                                          "): ", fetched.status().message()),
                             {BlobSubject(digest)});
  }
  RETURN_IF_ERROR(Annotate(fetched.status(),
                           absl::StrCat("cannot read ", what, " (", BlobSubject(digest), ")")));
  const std::string& bytes = *fetched;
  absl::StatusOr<MessageCost> cost = MeasureMessage(bytes, *message.GetDescriptor());
  if (!cost.ok() || cost->parsed_bytes > kMaxParsedBytes || !message.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " (", BlobSubject(digest), ") is not a ",
                                                   message.GetDescriptor()->full_name(),
                                                   " that distcc-cuda reads"));
  }
  return absl::OkStatus();
}

}  // namespace distcc_cuda
