// SPDX-License-Identifier: Apache-2.0
// Mutual TLS for every connection: the files a program is given (--tls-ca,
// --tls-cert, --tls-key), checked once at start, and the one place where gRPC
// channels and server credentials are made from them.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/transport/certificates.h"

namespace grpc {
class Channel;
class ServerCredentials;
}  // namespace grpc

namespace distcc_cuda {

// Paths of the cluster's CA certificate and of this program's own
// certificate and key. All empty: no TLS.
struct TlsFiles {
  std::string ca;
  std::string cert;
  std::string key;
};

// What a program holds once its TLS files were checked.
struct TlsMaterial {
  std::string ca_pem;
  std::string certificate_pem;
  std::string key_pem;
  // Who the own certificate says this program is.
  CertificateIdentity identity;
};

// Reads and checks the three files: the certificate was issued by the CA,
// is valid now, names `expected_role`, and the key is its key. Returns
// nullopt when all three paths are empty. INVALID_ARGUMENT naming the missing
// flag when only some are set, or for a certificate of another role (saying
// how to issue the right one); NOT_FOUND for a missing file;
// PERMISSION_DENIED for a certificate from another CA; FAILED_PRECONDITION
// for one that expired or is not valid yet. Messages name the file.
absl::StatusOr<std::optional<TlsMaterial>> LoadTlsMaterial(const TlsFiles& files,
                                                           PeerRole expected_role);

// The material of an in-memory CA and certificate, unchecked (for tests).
TlsMaterial FromIssued(const CertificateAuthority& ca, const IssuedCertificate& issued);

// Server credentials that present `material`'s certificate and require every
// peer to present a certificate issued by its CA; the handshake fails for a
// peer that does not.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsMaterial& material);

// A channel to `address` (HOST:PORT): with `tls`, over TLS presenting its
// certificate and trusting only its CA, which must have issued the
// coordinator's certificate for HOST; without, in the clear. Every program
// opens its channels here.
std::shared_ptr<grpc::Channel> OpenChannel(const std::string& address,
                                           const std::optional<TlsMaterial>& tls);

}  // namespace distcc_cuda
