// SPDX-License-Identifier: Apache-2.0
// The cluster's certificate authority and the role certificates it issues:
// every client, worker and coordinator holds one certificate from the
// cluster's CA whose subject names its role (OU) and its name (CN). See the
// Trust model in DESIGN.md.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace distcc_cuda {

// What the holder of a certificate may do: a client submits builds and uses
// the content store, a worker registers, leases and reports, the coordinator
// serves both.
enum class PeerRole { kClient, kWorker, kCoordinator };

// "client", "worker" or "coordinator".
absl::string_view RoleName(PeerRole role);

// The role named by `name` (as RoleName writes it). INVALID_ARGUMENT
// otherwise, listing the three names.
absl::StatusOr<PeerRole> ParseRole(absl::string_view name);

// OK if `name` can name a certificate holder or a cluster: 1 to 64 of
// [A-Za-z0-9._-], not starting with '.' or '-'. INVALID_ARGUMENT otherwise,
// saying what is allowed; `what` names the thing in the message ("name").
absl::Status ValidateCertificateName(absl::string_view name, absl::string_view what = "name");

// A cluster CA in memory: its self-signed certificate and its private key,
// both PEM.
struct CertificateAuthority {
  std::string certificate_pem;
  std::string key_pem;
};

struct IssueOptions {
  PeerRole role = PeerRole::kClient;
  // The holder's name (CN); see ValidateCertificateName.
  std::string name;
  // DNS names or IP addresses (IPv4, IPv6, IPv6 in brackets) for the
  // subjectAltName. The coordinator's must include the host that clients and
  // workers dial, since they check it; clients and workers need none.
  std::vector<std::string> hosts;
  // From now (less five minutes, for clocks that differ a little).
  absl::Duration validity = absl::Hours(24 * 730);
};

// A role certificate and its private key, both PEM.
struct IssuedCertificate {
  PeerRole role = PeerRole::kClient;
  std::string name;
  std::string certificate_pem;
  std::string key_pem;
};

// Who a certificate says its holder is.
struct CertificateIdentity {
  PeerRole role = PeerRole::kClient;
  std::string name;
};

// Makes a new CA: an EC P-256 key and a self-signed certificate
// (O=distcc-cuda, OU=cluster-ca, CN=`cluster_name`; CA:TRUE, keyCertSign and
// cRLSign), valid for ten years. INVALID_ARGUMENT for a bad cluster name;
// INTERNAL if OpenSSL fails.
absl::StatusOr<CertificateAuthority> NewCertificateAuthority(const std::string& cluster_name);

// Issues a certificate for `options.role` signed by `ca`: a new EC P-256 key,
// subject O=distcc-cuda, OU=<role>, CN=<name>, a 128-bit random serial,
// extendedKeyUsage serverAuth and clientAuth for the coordinator, clientAuth
// for clients and workers, and the hosts as subjectAltName. INVALID_ARGUMENT
// for a bad name or host, a coordinator without hosts, or a validity that is
// not positive; INVALID_ARGUMENT if `ca` does not hold a CA certificate and
// its key.
absl::StatusOr<IssuedCertificate> IssueCertificate(const CertificateAuthority& ca,
                                                   const IssueOptions& options);

// The role and name in a certificate's subject (OU and CN). INVALID_ARGUMENT
// if `certificate_pem` is not a PEM certificate, or its OU is not a role.
// Does not verify the certificate; see CheckCertificate.
absl::StatusOr<CertificateIdentity> IdentityOfCertificate(const std::string& certificate_pem);

// OK if `certificate_pem` was signed by the CA certificate `ca_pem` and is
// valid at `now`. FAILED_PRECONDITION "expired on ..." or "is not valid
// before ..." for a certificate outside its validity; PERMISSION_DENIED "was
// not issued by this CA (...)" when the signature does not verify;
// INVALID_ARGUMENT if either is not a PEM certificate. Messages leave out
// which file the certificate came from: callers put it in front.
absl::Status CheckCertificate(const std::string& ca_pem, const std::string& certificate_pem,
                              absl::Time now);

// OK if `certificate_pem` is a PEM certificate valid at `now`, whoever
// issued it (another PKI's, as an engine's): FAILED_PRECONDITION "expired
// on ..." or "is not valid before ..."; INVALID_ARGUMENT if it is not a PEM
// certificate. Callers put which file it came from in front.
absl::Status CheckValidAt(const std::string& certificate_pem, absl::Time now);

// OK if `key_pem` is the private key of `certificate_pem`; INVALID_ARGUMENT
// if it is not, or is not a PEM private key.
absl::Status CheckKeyMatches(const std::string& certificate_pem, const std::string& key_pem);

// Paths of the files one command wrote.
struct CertificateFiles {
  std::string certificate_path;
  std::string key_path;
};

// Makes a new CA (see NewCertificateAuthority) and writes DIR/ca.crt and
// DIR/ca.key (mode 0600), creating DIR. ALREADY_EXISTS if either file is
// there: a CA is made once per cluster, and replacing it would orphan every
// certificate it issued.
absl::StatusOr<CertificateFiles> InitCertificateAuthority(const std::string& dir,
                                                          const std::string& cluster_name);

// Issues a certificate with the CA in DIR/ca.crt and DIR/ca.key and writes it
// to DIR/<name>.crt and DIR/<name>.key (mode 0600). NOT_FOUND if the CA files
// are missing; ALREADY_EXISTS if either output file is there; the errors of
// IssueCertificate.
absl::StatusOr<CertificateFiles> IssueCertificateFiles(const std::string& dir,
                                                       const IssueOptions& options);

}  // namespace distcc_cuda
