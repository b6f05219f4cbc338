// SPDX-License-Identifier: Apache-2.0
// Who may call what on the coordinator: each handler asks AccessControl
// first, before it reads its request. Roles come from the peer's verified
// certificate under mutual TLS; without TLS the coordinator either serves
// loopback only (local trust) or was told to trust everyone (--insecure).
#pragma once

#include <grpcpp/support/server_callback.h>

#include <initializer_list>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/transport/certificates.h"
#include "common/transport/listen_address.h"
#include "coordinator/trust/revocations.h"

namespace grpc {
class CallbackServerContext;
}

namespace distcc_cuda::coordinator {

// The caller of one RPC, as far as the coordinator knows.
struct Principal {
  // True when a certificate or the loopback-only listener vouches for the
  // caller; false under --insecure.
  bool authenticated = false;
  // The role the caller acts in for this call.
  PeerRole role = PeerRole::kClient;
  // The certificate's CN under mutual TLS; "local" under local trust;
  // "anonymous" under --insecure.
  std::string name;
};

class AccessControl {
 public:
  enum class Mode {
    // Roles and names come from the peer's certificate, which the TLS
    // handshake verified against the cluster's CA.
    kMutualTls,
    // No credentials, the listener is on loopback only: every peer is a
    // local user and may act as a client and as a worker.
    kLocalTrust,
    // No credentials on a reachable address (--insecure): every peer may act
    // as a client and as a worker, unauthenticated.
    kInsecure,
  };

  // Workers named in `revocations` (may be null) are refused whatever they
  // call.
  explicit AccessControl(Mode mode, const WorkerRevocations* revocations = nullptr)
      : mode_(mode), revocations_(revocations) {}

  Mode mode() const { return mode_; }

  // The principal of the call in `context` if it may act in one of the
  // `allowed` roles to do `action` (for messages: "register a worker").
  // UNAUTHENTICATED when, under mutual TLS, the call carries no certificate;
  // PERMISSION_DENIED naming the role it has and the one it needs, or, for
  // a worker whose name was revoked, why and since when.
  absl::StatusOr<Principal> Authorize(const grpc::CallbackServerContext& context,
                                      std::initializer_list<PeerRole> allowed,
                                      absl::string_view action) const;

  // As Authorize, for the peer certificate `peer_certificate_pem` (nullopt:
  // none), without a gRPC call.
  absl::StatusOr<Principal> AuthorizeCertificate(
      const std::optional<std::string>& peer_certificate_pem,
      std::initializer_list<PeerRole> allowed, absl::string_view action) const;

 private:
  // The identity in a certificate, read once per certificate: every call
  // carries its peer's, and reading one (PEM, then X.509) took a sixth of the
  // coordinator's RPC threads' time in a build of small units. The TLS
  // handshake verified it; its text alone decides what it says.
  absl::StatusOr<CertificateIdentity> IdentityOf(const std::string& certificate_pem) const;

  // Certificates read so far; forgotten all at once at this many (a cluster
  // has a few dozen).
  static constexpr size_t kRememberedCertificates = 1024;

  // PERMISSION_DENIED for a worker whose name is revoked.
  absl::StatusOr<Principal> UnlessRevoked(Principal principal) const;

  const Mode mode_;
  const WorkerRevocations* revocations_;
  mutable absl::Mutex identities_mu_;
  mutable absl::flat_hash_map<std::string, absl::StatusOr<CertificateIdentity>> identities_
      ABSL_GUARDED_BY(identities_mu_);
};

// A reactor that ends its call at once with `status`, for a streaming
// handler that refuses the call before it starts. `Reactor` is one of
// grpc::ServerReadReactor<T> or grpc::ServerWriteReactor<T>.
template <typename Reactor>
Reactor* RefuseCall(const grpc::Status& status) {
  class Refused final : public Reactor {
   public:
    explicit Refused(const grpc::Status& status) { this->Finish(status); }
    void OnDone() override { delete this; }
  };
  return new Refused(status);
}

}  // namespace distcc_cuda::coordinator
