// SPDX-License-Identifier: Apache-2.0
#include "coordinator/trust/access_control.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_context.h>
#include <grpcpp/server_context.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace distcc_cuda::coordinator {
namespace {

bool Allows(std::initializer_list<PeerRole> allowed, PeerRole role) {
  return std::find(allowed.begin(), allowed.end(), role) != allowed.end();
}

std::string RoleList(std::initializer_list<PeerRole> allowed) {
  std::vector<std::string> names;
  for (PeerRole role : allowed) names.emplace_back(RoleName(role));
  return absl::StrJoin(names, " or ");
}

}  // namespace

absl::StatusOr<Principal> AccessControl::Authorize(const grpc::CallbackServerContext& context,
                                                   std::initializer_list<PeerRole> allowed,
                                                   absl::string_view action) const {
  std::optional<std::string> certificate;
  if (mode_ == Mode::kMutualTls) {
    std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    if (auth != nullptr) {
      std::vector<grpc::string_ref> values =
          auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
      if (!values.empty()) certificate.emplace(values.front().data(), values.front().size());
    }
  }
  return AuthorizeCertificate(certificate, allowed, action);
}

absl::StatusOr<Principal> AccessControl::AuthorizeCertificate(
    const std::optional<std::string>& peer_certificate_pem, std::initializer_list<PeerRole> allowed,
    absl::string_view action) const {
  if (mode_ != Mode::kMutualTls) {
    // Without certificates every peer may be a client and a worker, never
    // anything more.
    for (PeerRole role : allowed) {
      if (role == PeerRole::kClient || role == PeerRole::kWorker) {
        bool local = mode_ == Mode::kLocalTrust;
        return UnlessRevoked(Principal{local, role, local ? "local" : "anonymous"});
      }
    }
    return absl::PermissionDeniedError(absl::StrCat(
        "without TLS no peer may ", action, "; that needs a ", RoleList(allowed), " certificate"));
  }
  if (!peer_certificate_pem) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the call carries no client certificate, and ", action, " needs a ", RoleList(allowed),
        " certificate from the cluster's CA; pass --tls-ca, --tls-cert and --tls-key"));
  }
  absl::StatusOr<CertificateIdentity> identity = IdentityOf(*peer_certificate_pem);
  if (!identity.ok()) return absl::PermissionDeniedError(identity.status().message());
  if (!Allows(allowed, identity->role)) {
    return absl::PermissionDeniedError(
        absl::StrCat("a ", RoleName(identity->role), " certificate (", identity->name, ") cannot ",
                     action, "; that needs a ", RoleList(allowed), " certificate"));
  }
  return UnlessRevoked(Principal{true, identity->role, identity->name});
}

absl::StatusOr<Principal> AccessControl::UnlessRevoked(Principal principal) const {
  if (principal.role != PeerRole::kWorker || revocations_ == nullptr) return principal;
  std::optional<Revocation> revoked = revocations_->Find(principal.name);
  if (!revoked) return principal;
  return absl::PermissionDeniedError(absl::StrCat(
      "worker '", principal.name, "' is revoked since ",
      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixSeconds(revoked->since_unix_seconds),
                       absl::UTCTimeZone()),
      " (", revoked->reason,
      "); every result it produced was dropped. Once the machine is trusted again, lift it on "
      "the coordinator (distcc-cuda-coordinator revoke --lift ",
      principal.name, ") or issue it a certificate under a new name"));
}

absl::StatusOr<CertificateIdentity> AccessControl::IdentityOf(
    const std::string& certificate_pem) const {
  {
    absl::MutexLock lock(&identities_mu_);
    auto it = identities_.find(certificate_pem);
    if (it != identities_.end()) return it->second;
  }
  absl::StatusOr<CertificateIdentity> identity = IdentityOfCertificate(certificate_pem);
  absl::MutexLock lock(&identities_mu_);
  if (identities_.size() >= kRememberedCertificates) identities_.clear();
  identities_.emplace(certificate_pem, identity);
  return identity;
}

}  // namespace distcc_cuda::coordinator
