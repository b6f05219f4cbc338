// SPDX-License-Identifier: Apache-2.0
#include "common/transport/tls_credentials.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/files.h"
#include "common/base/status.h"

namespace distcc_cuda {
namespace {

std::string IssueHint(PeerRole role) {
  return absl::StrCat("distcc-cuda-coordinator certs issue --dir DIR --role ", RoleName(role),
                      role == PeerRole::kCoordinator ? " --host HOST" : "", " NAME");
}

}  // namespace

absl::StatusOr<std::optional<TlsMaterial>> LoadTlsMaterial(const TlsFiles& files,
                                                           PeerRole expected_role) {
  const std::pair<const char*, const std::string*> flags[] = {
      {"--tls-ca", &files.ca}, {"--tls-cert", &files.cert}, {"--tls-key", &files.key}};
  std::vector<std::string> given, missing;
  for (const auto& [flag, path] : flags) (path->empty() ? missing : given).push_back(flag);
  if (given.empty()) return std::nullopt;
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(absl::StrJoin(given, " and "), given.size() == 1 ? " is" : " are", " set but ",
                     absl::StrJoin(missing, " and "), missing.size() == 1 ? " is" : " are",
                     " not: mutual TLS needs all three (the cluster's ca.crt and this ",
                     RoleName(expected_role), "'s NAME.crt and NAME.key)"));
  }
  TlsMaterial material;
  std::string* contents[] = {&material.ca_pem, &material.certificate_pem, &material.key_pem};
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::string> read = ReadFile(*flags[i].second);
    if (!read.ok()) return Annotate(read.status(), flags[i].first);
    *contents[i] = std::move(*read);
  }

  absl::Status certificate =
      CheckCertificate(material.ca_pem, material.certificate_pem, absl::Now());
  if (!certificate.ok()) {
    std::string what = absl::StrCat(files.cert, " ", certificate.message());
    switch (certificate.code()) {
      case absl::StatusCode::kPermissionDenied:
        return absl::PermissionDeniedError(
            absl::StrCat(what, ", the CA in ", files.ca,
                         "; use a certificate issued from the folder that holds ", files.ca, ": ",
                         IssueHint(expected_role)));
      case absl::StatusCode::kFailedPrecondition:
        return absl::FailedPreconditionError(
            absl::StrCat(what, "; issue a new one: ", IssueHint(expected_role)));
      default:
        return absl::Status(certificate.code(), what);
    }
  }
  absl::StatusOr<CertificateIdentity> identity = IdentityOfCertificate(material.certificate_pem);
  if (!identity.ok()) return Annotate(identity.status(), files.cert);
  if (identity->role != expected_role) {
    return absl::InvalidArgumentError(
        absl::StrCat(files.cert, " is a ", RoleName(identity->role), " certificate (",
                     identity->name, "); a ", RoleName(expected_role), " needs a ",
                     RoleName(expected_role), " certificate: ", IssueHint(expected_role)));
  }
  material.identity = *identity;
  absl::Status key = CheckKeyMatches(material.certificate_pem, material.key_pem);
  if (!key.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(files.key, " ", key.message(), " ", files.cert,
                                                   "; pass the .key written with it"));
  }
  return material;
}

TlsMaterial FromIssued(const CertificateAuthority& ca, const IssuedCertificate& issued) {
  return TlsMaterial{ca.certificate_pem, issued.certificate_pem, issued.key_pem,
                     CertificateIdentity{issued.role, issued.name}};
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsMaterial& material) {
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = material.ca_pem;
  options.pem_key_cert_pairs.push_back({material.key_pem, material.certificate_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::Channel> OpenChannel(const std::string& address,
                                           const std::optional<TlsMaterial>& tls) {
  // A coordinator that restarts is back within seconds: gRPC's default
  // reconnect backoff (up to two minutes) would leave workers and clients
  // idle long after it is.
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 250);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  if (!tls) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), arguments);
  }
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls->ca_pem;
  options.pem_private_key = tls->key_pem;
  options.pem_cert_chain = tls->certificate_pem;
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(options), arguments);
}

}  // namespace distcc_cuda
