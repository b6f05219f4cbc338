// SPDX-License-Identifier: Apache-2.0
#include "coordinator/reapi/reapi_cas_service.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/status.h"
#include "coordinator/reapi/reapi_action.h"
#include "coordinator/services/blob_streams.h"

namespace distcc_cuda::coordinator {
namespace {

namespace bytestream = ::google::bytestream;

void SetVersion(build::bazel::semver::SemVer& version, int major, int minor) {
  version.set_major(major);
  version.set_minor(minor);
}

google::rpc::Status RpcStatusOf(const absl::Status& status) {
  google::rpc::Status out;
  out.set_code(static_cast<int>(status.code()));
  out.set_message(std::string(status.message()));
  return out;
}

struct ByteStreamNaming {
  static absl::StatusOr<Digest> DigestOf(const bytestream::WriteRequest& request) {
    return BlobOfResource(request.resource_name(), /*upload=*/true);
  }
  static int64_t OffsetOf(const bytestream::WriteRequest& request) {
    return request.write_offset();
  }
};

struct ByteStreamChunk {
  static void Fill(bytestream::ReadResponse& response, int64_t, absl::string_view data) {
    response.set_data(data.data(), data.size());
  }
};

}  // namespace

absl::Status AuthorizeReapiClient(const AccessControl& access,
                                  const grpc::CallbackServerContext& context,
                                  absl::string_view action) {
  return access.Authorize(context, {PeerRole::kClient}, action).status();
}

grpc::ServerUnaryReactor* ServeReapiCall(const AccessControl& access,
                                         grpc::CallbackServerContext* context,
                                         absl::string_view action, BoundedExecutor* io,
                                         std::function<absl::Status()> work) {
  auto* reactor = context->DefaultReactor();
  if (absl::Status allowed = AuthorizeReapiClient(access, *context, action); !allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  RunOnOrHere(io, [reactor, work = std::move(work)] { reactor->Finish(ToGrpcStatus(work())); });
  return reactor;
}

absl::StatusOr<Digest> BlobOfResource(absl::string_view resource, bool upload) {
  std::vector<absl::string_view> parts = absl::StrSplit(resource, '/');
  // The last "blobs" with a hash and a size after it; the instance name
  // before it may have slashes of its own.
  for (size_t i = parts.size(); i >= 3; --i) {
    size_t at = i - 3;
    if (parts[at] != "blobs") continue;
    bool uploads = at >= 2 && parts[at - 2] == "uploads";
    int64_t size = -1;
    if (uploads != upload || !absl::SimpleAtoi(parts[at + 2], &size)) break;
    // Anything after the size (an upload's metadata) is allowed only there.
    if (!upload && at + 3 != parts.size()) break;
    Digest digest{std::string(parts[at + 1]), size};
    RETURN_IF_ERROR(ValidateDigest(digest));
    return digest;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "resource '", absl::CHexEscape(resource.substr(0, 300)), "' is not ",
      upload ? "'[INSTANCE/]uploads/UUID/blobs/HASH/SIZE'" : "'[INSTANCE/]blobs/HASH/SIZE'",
      "; this server keeps SHA-256 blobs, uncompressed"));
}

grpc::ServerUnaryReactor* ReapiCapabilities::GetCapabilities(grpc::CallbackServerContext* context,
                                                             const reapi::GetCapabilitiesRequest*,
                                                             reapi::ServerCapabilities* response) {
  return ServeReapiCall(*access_, context, "read the capabilities", nullptr, [response] {
    reapi::CacheCapabilities* cache = response->mutable_cache_capabilities();
    cache->add_digest_functions(reapi::DigestFunction::SHA256);
    // Only results the coordinator's workers earned are cached.
    cache->mutable_action_cache_update_capabilities()->set_update_enabled(false);
    // Under the 4 MiB a gRPC client takes by default, framing included.
    cache->set_max_batch_total_size_bytes((int64_t{4} << 20) - (int64_t{64} << 10));
    cache->set_symlink_absolute_path_strategy(reapi::SymlinkAbsolutePathStrategy::DISALLOWED);
    reapi::ExecutionCapabilities* execution = response->mutable_execution_capabilities();
    execution->set_digest_function(reapi::DigestFunction::SHA256);
    execution->add_digest_functions(reapi::DigestFunction::SHA256);
    execution->set_exec_enabled(true);
    SetVersion(*response->mutable_low_api_version(), 2, 0);
    SetVersion(*response->mutable_high_api_version(), 2, 0);
    return absl::OkStatus();
  });
}

void ReapiContentStore::NoteIfLarge(const google::protobuf::Message& request,
                                    const google::protobuf::Message& response) const {
  if (release_ == nullptr) return;
  if (static_cast<int64_t>(request.ByteSizeLong()) > kLargeRequestBytes ||
      static_cast<int64_t>(response.ByteSizeLong()) > kLargeRequestBytes) {
    release_->Note(absl::Now());
  }
}

grpc::ServerUnaryReactor* ReapiContentStore::FindMissingBlobs(
    grpc::CallbackServerContext* context, const reapi::FindMissingBlobsRequest* request,
    reapi::FindMissingBlobsResponse* response) {
  // Looking a blob up hashes it the first time: on the store's executor.
  return ServeReapiCall(*access_, context, "use the content store", store_->io(),
                        [this, request, response] {
                          NoteIfLarge(*request, *response);
                          v1::FindMissingBlobsRequest ours;
                          for (const reapi::Digest& digest : request->blob_digests()) {
                            *ours.add_digests() = ToProto(FromReapi(digest));
                          }
                          v1::FindMissingBlobsResponse missing;
                          absl::Status status = store_->FindMissing(ours, missing);
                          for (const v1::Digest& digest : missing.missing()) {
                            *response->add_missing_blob_digests() = ToReapi(FromProto(digest));
                          }
                          NoteIfLarge(*request, *response);
                          return status;
                        });
}

grpc::ServerUnaryReactor* ReapiContentStore::BatchUpdateBlobs(
    grpc::CallbackServerContext* context, const reapi::BatchUpdateBlobsRequest* request,
    reapi::BatchUpdateBlobsResponse* response) {
  return ServeReapiCall(*access_, context, "use the content store", store_->io(),
                        [this, request, response] {
                          NoteIfLarge(*request, *response);
                          v1::BatchUpdateBlobsRequest ours;
                          for (const auto& blob : request->requests()) {
                            if (blob.compressor() != reapi::Compressor::IDENTITY) {
                              return absl::InvalidArgumentError(
                                  "compressed blobs are not served; send them uncompressed");
                            }
                            v1::BatchUpdateBlobsRequest::Blob* copy = ours.add_blobs();
                            *copy->mutable_digest() = ToProto(FromReapi(blob.digest()));
                            copy->set_data(blob.data());
                          }
                          v1::BatchUpdateBlobsResponse stored;
                          store_->BatchUpdate(ours, stored);
                          for (const auto& result : stored.results()) {
                            auto* out = response->add_responses();
                            *out->mutable_digest() = ToReapi(FromProto(result.digest()));
                            out->mutable_status()->set_code(result.code());
                            out->mutable_status()->set_message(result.message());
                          }
                          NoteIfLarge(*request, *response);
                          return absl::OkStatus();
                        });
}

grpc::ServerUnaryReactor* ReapiContentStore::BatchReadBlobs(
    grpc::CallbackServerContext* context, const reapi::BatchReadBlobsRequest* request,
    reapi::BatchReadBlobsResponse* response) {
  return ServeReapiCall(
      *access_, context, "use the content store", store_->io(), [this, request, response] {
        int64_t total = 0;
        for (const reapi::Digest& asked : request->digests()) {
          auto* out = response->add_responses();
          *out->mutable_digest() = asked;
          Digest digest = FromReapi(asked);
          absl::Status status = ValidateDigest(digest);
          if (status.ok() && (total += digest.size_bytes) > (int64_t{4} << 20)) {
            status = absl::ResourceExhaustedError(
                "the blobs asked for add up to more than 4 MiB; read the rest with ByteStream");
          }
          // Verified (hashed once per coordinator run) before it is served.
          if (status.ok()) status = store_->store()->Verify(digest);
          absl::StatusOr<std::string> bytes =
              status.ok() ? store_->store()->Get(digest) : absl::StatusOr<std::string>(status);
          if (bytes.ok()) out->set_data(*std::move(bytes));
          *out->mutable_status() = RpcStatusOf(bytes.status());
        }
        NoteIfLarge(*request, *response);
        return absl::OkStatus();
      });
}

grpc::ServerWriteReactor<bytestream::ReadResponse>* ReapiByteStream::Read(
    grpc::CallbackServerContext* context, const bytestream::ReadRequest* request) {
  using Reactor = grpc::ServerWriteReactor<bytestream::ReadResponse>;
  if (absl::Status allowed = AuthorizeReapiClient(*access_, *context, "use the content store");
      !allowed.ok()) {
    return RefuseCall<Reactor>(ToGrpcStatus(allowed));
  }
  // A download resumed from where it broke off reads from an offset.
  return new BlobReadReactor<bytestream::ReadResponse, ByteStreamChunk>(
      store_->store(), BlobOfResource(request->resource_name(), /*upload=*/false), store_->io(),
      ReadWindow{request->read_offset(), request->read_limit()});
}

grpc::ServerReadReactor<bytestream::WriteRequest>* ReapiByteStream::Write(
    grpc::CallbackServerContext* context, bytestream::WriteResponse* response) {
  if (absl::Status allowed = AuthorizeReapiClient(*access_, *context, "use the content store");
      !allowed.ok()) {
    return RefuseCall<grpc::ServerReadReactor<bytestream::WriteRequest>>(ToGrpcStatus(allowed));
  }
  return new BlobWriteReactor<bytestream::WriteRequest, bytestream::WriteResponse,
                              ByteStreamNaming>(store_->store(), store_->max_blob_bytes(), response,
                                                store_->io());
}

}  // namespace distcc_cuda::coordinator
