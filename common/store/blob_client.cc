// SPDX-License-Identifier: Apache-2.0
#include "common/store/blob_client.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/base/contained_folder.h"
#include "common/base/files.h"
#include "common/base/status.h"

namespace distcc_cuda {
namespace {

// The task whose transfers this thread makes now (BlobClient::TaskScope).
thread_local const CancelToken* current_task = nullptr;

}  // namespace

BlobClient::TaskScope::TaskScope(const CancelToken* cancel) : outer_(current_task) {
  current_task = cancel;
}

BlobClient::TaskScope::~TaskScope() { current_task = outer_; }

BlobClient::InFlight::InFlight(BlobClient* client, grpc::ClientContext& context)
    : client_(client), context_(&context) {
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoSeconds(client->timeout_));
  absl::MutexLock lock(&client_->mu_);
  client_->in_flight_[context_] = current_task;
  if (client_->cancelled_ || (current_task != nullptr && current_task->cancelled())) {
    context_->TryCancel();
  }
}

BlobClient::InFlight::~InFlight() {
  absl::MutexLock lock(&client_->mu_);
  client_->in_flight_.erase(context_);
}

void BlobClient::CancelAll() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (const auto& [context, task] : in_flight_) context->TryCancel();
}

void BlobClient::CancelTask(const CancelToken* cancel) {
  absl::MutexLock lock(&mu_);
  for (const auto& [context, task] : in_flight_) {
    if (task == cancel) context->TryCancel();
  }
}

absl::StatusOr<int> BlobClient::UploadMissing(const std::vector<BlobSource>& blobs) {
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
  int64_t batch_disk = 0;  // what the batch takes on the store's disk
  for (const Digest& digest : missing) {
    auto found = by_digest.find(digest);
    if (found == by_digest.end()) {
      return absl::InternalError(absl::StrCat("the store says it lacks ", digest.ToString(),
                                              ", which was not asked about"));
    }
    const BlobSource* blob = found->second;
    if (digest.size_bytes > kMaxChunkBytes) {
      RETURN_IF_ERROR(UploadStreamed(*blob));
      continue;
    }
    if (batch_bytes + digest.size_bytes > kMaxBatchBytes - (64 << 10) ||
        batch_disk + BlobDiskCost(digest.size_bytes) > kMaxBatchDiskBytes) {
      RETURN_IF_ERROR(UploadBatch(batch));
      batch.clear();
      batch_bytes = 0;
      batch_disk = 0;
    }
    batch.push_back(blob);
    batch_bytes += digest.size_bytes + 128;
    batch_disk += BlobDiskCost(digest.size_bytes);
  }
  if (!batch.empty()) RETURN_IF_ERROR(UploadBatch(batch));
  return static_cast<int>(missing.size());
}

absl::Status BlobClient::ForEachChunk(
    const BlobSource& blob,
    const std::function<bool(absl::string_view chunk, int64_t offset, bool last)>& send) {
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
      chunk = absl::string_view(blob.bytes)
                  .substr(std::min<size_t>(offset, blob.bytes.size()), kMaxChunkBytes);
    } else {
      in.read(buffer.data(), buffer.size());
      chunk = absl::string_view(buffer.data(), in.gcount());
    }
    if (chunk.empty() && blob.digest.size_bytes > 0) {
      return absl::DataLossError(
          absl::StrCat(blob.path.empty() ? "a blob" : blob.path, " is shorter than its digest ",
                       blob.digest.ToString(), " (changed during the build?)"));
    }
    const int64_t at = offset;
    offset += chunk.size();
    first = false;
    if (!send(chunk, at, offset >= blob.digest.size_bytes)) break;
  }
  return absl::OkStatus();
}

absl::Status BlobClient::ReadWithin(const Digest& digest,
                                    const std::function<absl::Status(absl::string_view)>& sink) {
  int64_t received = 0;
  return Read(digest, [&](absl::string_view data) {
    received += static_cast<int64_t>(data.size());
    if (received > digest.size_bytes) {
      return absl::DataLossError(absl::StrCat("the store sent more than the ", digest.size_bytes,
                                              " bytes of ", digest.ToString()));
    }
    return sink(data);
  });
}

absl::Status BlobClient::DownloadToFile(const Digest& digest, const std::string& destination) {
  if (digest.size_bytes > kMaxCompileOutputBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("the store offers ", destination, " as ", FormatByteSize(digest.size_bytes),
                     ", more than a compile's output may be (",
                     FormatByteSize(kMaxCompileOutputBytes), "); not a byte of it is written"));
  }
  RETURN_IF_ERROR(MakeDirectories(std::filesystem::path(destination).parent_path().string()));
  // A new name nobody could have planted a link at, never followed anyway.
  std::random_device random;
  const std::string temp = absl::StrCat(destination, ".part-", getpid(), "-", random());
  OwnedFd out(open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (out.get() < 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", temp, ": ", strerror(errno)));
  }
  Sha256 sha;
  int64_t size = 0;
  absl::Status read = ReadWithin(digest, [&](absl::string_view data) {
    sha.Update(data);
    size += static_cast<int64_t>(data.size());
    return WriteAll(out.get(), data, temp);
  });
  if (read.ok() && Digest{sha.FinishHex(), size} != digest) {
    read = absl::DataLossError(absl::StrCat(
        "downloaded blob of ", size, " bytes does not match the requested ", digest.ToString()));
  }
  if (read.ok()) read = out.Close();
  if (read.ok() && rename(temp.c_str(), destination.c_str()) != 0) {
    read = absl::InternalError(
        absl::StrCat("cannot move ", temp, " to ", destination, ": ", strerror(errno)));
  }
  // No half a blob left behind.
  if (!read.ok()) unlink(temp.c_str());
  return read;
}

absl::Status BlobClient::DownloadToStore(const Digest& digest, CasStore& store) {
  bool found = store.Contains(digest);
  store.CountLookup(found);
  if (found) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto writer, store.StartWrite(digest));
  RETURN_IF_ERROR(ReadWithin(digest, [&](absl::string_view data) {
    return writer->Append(writer->bytes_written(), data);
  }));
  return writer->Commit();
}

absl::StatusOr<std::string> BlobClient::DownloadBytes(const Digest& digest) {
  std::string content;
  RETURN_IF_ERROR(ReadWithin(digest, [&](absl::string_view data) {
    content.append(data.data(), data.size());
    return absl::OkStatus();
  }));
  if (DigestOf(content) != digest) {
    return absl::DataLossError(absl::StrCat("downloaded blob does not match ", digest.ToString()));
  }
  return content;
}

absl::StatusOr<std::string> BlobClient::FetchThroughStore(const Digest& digest, CasStore& store) {
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
