// SPDX-License-Identifier: Apache-2.0
#include "common/store/cas_client.h"

#include <chrono>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status.h"

namespace distcc_cuda {

CasClient::CasClient(std::shared_ptr<v1::ContentStore::StubInterface> stub, absl::Duration timeout)
    : stub_(std::move(stub)), timeout_(timeout) {}

CasClient::InFlight::InFlight(CasClient* client, grpc::ClientContext& context)
    : client_(client), context_(&context) {
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoSeconds(client->timeout_));
  absl::MutexLock lock(&client_->mu_);
  client_->in_flight_.insert(context_);
  if (client_->cancelled_) context_->TryCancel();
}

CasClient::InFlight::~InFlight() {
  absl::MutexLock lock(&client_->mu_);
  client_->in_flight_.erase(context_);
}

void CasClient::CancelAll() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (grpc::ClientContext* context : in_flight_) context->TryCancel();
}

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

absl::StatusOr<int> CasClient::UploadMissing(const std::vector<BlobSource>& blobs) {
  std::vector<Digest> digests;
  std::map<Digest, const BlobSource*> by_digest;
  for (const BlobSource& blob : blobs) {
    if (by_digest.emplace(blob.digest, &blob).second) {
      digests.push_back(blob.digest);
    }
  }
  ASSIGN_OR_RETURN(std::vector<Digest> missing, FindMissing(digests));
  std::vector<const BlobSource*> batch;
  int64_t batch_bytes = 0;
  for (const Digest& digest : missing) {
    const BlobSource* blob = by_digest.at(digest);
    if (digest.size_bytes > kMaxChunkBytes) {
      RETURN_IF_ERROR(UploadStreamed(*blob));
      continue;
    }
    if (batch_bytes + digest.size_bytes > kMaxBatchBytes - (64 << 10)) {
      RETURN_IF_ERROR(UploadBatch(batch));
      batch.clear();
      batch_bytes = 0;
    }
    batch.push_back(blob);
    batch_bytes += digest.size_bytes + 128;
  }
  if (!batch.empty()) RETURN_IF_ERROR(UploadBatch(batch));
  return static_cast<int>(missing.size());
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
  std::ifstream in;
  if (!blob.path.empty()) {
    in.open(blob.path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", blob.path));
  }
  std::string buffer(kMaxChunkBytes, '\0');
  int64_t offset = 0;
  bool first = true;
  while (offset < blob.digest.size_bytes || first) {
    absl::string_view chunk;
    if (blob.path.empty()) {
      chunk = absl::string_view(blob.bytes).substr(offset, kMaxChunkBytes);
    } else {
      in.read(buffer.data(), buffer.size());
      chunk = absl::string_view(buffer.data(), in.gcount());
    }
    if (chunk.empty() && !first) {
      writer->WritesDone();
      writer->Finish();
      return absl::DataLossError(absl::StrCat(blob.path, " is shorter than its digest ",
                                              blob.digest.ToString(),
                                              " (changed during the build?)"));
    }
    v1::WriteBlobRequest request;
    if (first) *request.mutable_digest() = ToProto(blob.digest);
    request.set_offset(offset);
    request.set_data(chunk.data(), chunk.size());
    offset += chunk.size();
    request.set_finish_write(offset >= blob.digest.size_bytes);
    first = false;
    if (!writer->Write(request)) break;
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

absl::Status CasClient::DownloadToFile(const Digest& digest, const std::string& destination) {
  std::string temp = absl::StrCat(destination, ".part");
  {
    RETURN_IF_ERROR(MakeDirectories(std::filesystem::path(destination).parent_path().string()));
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot create ", temp));
    Sha256 sha;
    int64_t size = 0;
    RETURN_IF_ERROR(Read(digest, [&](absl::string_view data) {
      out.write(data.data(), data.size());
      sha.Update(data);
      size += data.size();
      return out ? absl::OkStatus()
                 : absl::ResourceExhaustedError(absl::StrCat("cannot write ", temp));
    }));
    Digest actual{sha.FinishHex(), size};
    if (actual != digest) {
      std::filesystem::remove(temp);
      return absl::DataLossError(absl::StrCat("downloaded blob ", actual.ToString(),
                                              " does not match the requested ", digest.ToString()));
    }
  }
  std::error_code error;
  std::filesystem::rename(temp, destination, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot move ", temp, " to ", destination, ": ", error.message()));
  }
  return absl::OkStatus();
}

absl::Status CasClient::DownloadToStore(const Digest& digest, CasStore& store) {
  bool found = store.Contains(digest);
  store.CountLookup(found);
  if (found) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto writer, store.StartWrite(digest));
  RETURN_IF_ERROR(Read(digest, [&](absl::string_view data) {
    return writer->Append(writer->bytes_written(), data);
  }));
  return writer->Commit();
}

absl::StatusOr<std::string> CasClient::DownloadBytes(const Digest& digest) {
  std::string content;
  RETURN_IF_ERROR(Read(digest, [&](absl::string_view data) {
    content.append(data.data(), data.size());
    return absl::OkStatus();
  }));
  if (DigestOf(content) != digest) {
    return absl::DataLossError(absl::StrCat("downloaded blob does not match ", digest.ToString()));
  }
  return content;
}

absl::StatusOr<std::string> CasClient::FetchThroughStore(const Digest& digest, CasStore& store) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    RETURN_IF_ERROR(DownloadToStore(digest, store));
    absl::StatusOr<std::string> bytes = store.Get(digest);
    if (!bytes.ok()) return bytes.status();
    if (DigestOf(*bytes) == digest) return bytes;
    // Damaged on this disk: dropped, and fetched afresh once.
    store.Discard(digest, "a folder of an input tree read back damaged");
  }
  return absl::DataLossError(
      absl::StrCat("blob ", digest.ToString(), " read back damaged twice from this store"));
}

}  // namespace distcc_cuda
