// SPDX-License-Identifier: Apache-2.0
// The coordinator's content store as the Remote Execution API serves one:
// Capabilities, ContentAddressableStorage and ByteStream, for REAPI clients
// (Bazel) on the coordinator's REAPI listen address. The same store, the
// same checks and limits as the coordinator's own CasService, whose work
// they share; every call needs the client role. Instance names are
// accepted and ignored: a coordinator is one instance.
#pragma once

#include <functional>

#include "build/bazel/remote/execution/v2/remote_execution.grpc.pb.h"
#include "coordinator/services/cas_service.h"
#include "coordinator/services/memory_release.h"
#include "coordinator/trust/access_control.h"
#include "google/bytestream/bytestream.grpc.pb.h"

namespace distcc_cuda::coordinator {

namespace reapi = ::build::bazel::remote::execution::v2;

// What the coordinator says it serves: SHA-256, execution, an action cache
// that clients read and never write, no symlinks.
class ReapiCapabilities final : public reapi::Capabilities::CallbackService {
 public:
  explicit ReapiCapabilities(const AccessControl* access) : access_(access) {}
  grpc::ServerUnaryReactor* GetCapabilities(grpc::CallbackServerContext* context,
                                            const reapi::GetCapabilitiesRequest* request,
                                            reapi::ServerCapabilities* response) override;

 private:
  const AccessControl* access_;
};

// FindMissingBlobs and the batch calls, over `store` (its checks and disk
// work: cas_service.h). GetTree is not served (UNIMPLEMENTED). A call whose
// request or answer is large is noted to `release` (when given) as it
// starts and ends, so that what it cost goes back to the system.
class ReapiContentStore final : public reapi::ContentAddressableStorage::CallbackService {
 public:
  ReapiContentStore(const AccessControl* access, CasService* store,
                    MemoryRelease* release = nullptr)
      : access_(access), store_(store), release_(release) {}
  grpc::ServerUnaryReactor* FindMissingBlobs(grpc::CallbackServerContext* context,
                                             const reapi::FindMissingBlobsRequest* request,
                                             reapi::FindMissingBlobsResponse* response) override;
  grpc::ServerUnaryReactor* BatchUpdateBlobs(grpc::CallbackServerContext* context,
                                             const reapi::BatchUpdateBlobsRequest* request,
                                             reapi::BatchUpdateBlobsResponse* response) override;
  grpc::ServerUnaryReactor* BatchReadBlobs(grpc::CallbackServerContext* context,
                                           const reapi::BatchReadBlobsRequest* request,
                                           reapi::BatchReadBlobsResponse* response) override;

 private:
  // Notes `request` and `response` to release_ when either is large.
  void NoteIfLarge(const google::protobuf::Message& request,
                   const google::protobuf::Message& response) const;

  const AccessControl* access_;
  CasService* store_;
  MemoryRelease* release_;
};

// Blobs streamed in ("{instance}/uploads/{uuid}/blobs/{hash}/{size}") and
// out ("{instance}/blobs/{hash}/{size}"), from offset 0; compressed blobs
// are not served.
class ReapiByteStream final : public google::bytestream::ByteStream::CallbackService {
 public:
  ReapiByteStream(const AccessControl* access, CasService* store)
      : access_(access), store_(store) {}
  grpc::ServerWriteReactor<google::bytestream::ReadResponse>* Read(
      grpc::CallbackServerContext* context,
      const google::bytestream::ReadRequest* request) override;
  grpc::ServerReadReactor<google::bytestream::WriteRequest>* Write(
      grpc::CallbackServerContext* context, google::bytestream::WriteResponse* response) override;

 private:
  const AccessControl* access_;
  CasService* store_;
};

// OK if the caller of `context` may act as a client: every REAPI call asks.
absl::Status AuthorizeReapiClient(const AccessControl& access,
                                  const grpc::CallbackServerContext& context,
                                  absl::string_view action);

// A unary call answered: its caller authorized for `action` (else its
// error), then `work` run on `io` (here where `io` is null or full), whose
// status ends the call.
grpc::ServerUnaryReactor* ServeReapiCall(const AccessControl& access,
                                         grpc::CallbackServerContext* context,
                                         absl::string_view action, BoundedExecutor* io,
                                         std::function<absl::Status()> work);

// The blob a ByteStream resource names: the "blobs/HASH/SIZE" that follows
// the instance name (and, to write, "uploads/UUID/"); INVALID_ARGUMENT for
// any other resource, saying which forms are served.
absl::StatusOr<Digest> BlobOfResource(absl::string_view resource, bool upload);

}  // namespace distcc_cuda::coordinator
