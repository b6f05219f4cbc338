// SPDX-License-Identifier: Apache-2.0
#include "common/transport/certificates.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <ctime>
#include <filesystem>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/base/status.h"

namespace distcc_cuda {
namespace {

template <typename T, void (*Free)(T*)>
struct OpenSslDeleter {
  void operator()(T* p) const { Free(p); }
};
using X509Ptr = std::unique_ptr<X509, OpenSslDeleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, OpenSslDeleter<EVP_PKEY, EVP_PKEY_free>>;
using BioPtr = std::unique_ptr<BIO, OpenSslDeleter<BIO, BIO_free_all>>;
using StorePtr = std::unique_ptr<X509_STORE, OpenSslDeleter<X509_STORE, X509_STORE_free>>;
using StoreContextPtr =
    std::unique_ptr<X509_STORE_CTX, OpenSslDeleter<X509_STORE_CTX, X509_STORE_CTX_free>>;
using BignumPtr = std::unique_ptr<BIGNUM, OpenSslDeleter<BIGNUM, BN_free>>;
using NamesPtr = std::unique_ptr<GENERAL_NAMES, OpenSslDeleter<GENERAL_NAMES, GENERAL_NAMES_free>>;

constexpr char kOrganization[] = "distcc-cuda";
constexpr char kCaUnit[] = "cluster-ca";
constexpr absl::Duration kCaValidity = absl::Hours(24 * 3652);
// Certificates start a little in the past, so that a peer whose clock is
// slightly behind does not reject a certificate issued a moment ago.
constexpr long kBackdateSeconds = 300;

// OpenSSL's queued errors, oldest first, emptying the queue.
std::string OpenSslErrors() {
  std::vector<std::string> errors;
  while (unsigned long code = ERR_get_error()) {
    std::array<char, 256> text;
    ERR_error_string_n(code, text.data(), text.size());
    errors.push_back(text.data());
  }
  return errors.empty() ? "no detail from OpenSSL" : absl::StrJoin(errors, "; ");
}

absl::Status OpenSslFailure(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, " failed: ", OpenSslErrors()));
}

// Never asks for a passphrase on the terminal: our keys have none.
int NoPassphrase(char*, int, int, void*) { return -1; }

BioPtr ReadBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

absl::StatusOr<X509Ptr> ParseCertificate(const std::string& pem) {
  BioPtr bio = ReadBio(pem);
  X509Ptr certificate(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
  if (certificate == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError("is not a PEM certificate (-----BEGIN CERTIFICATE-----)");
  }
  return certificate;
}

absl::StatusOr<KeyPtr> ParseKey(const std::string& pem) {
  BioPtr bio = ReadBio(pem);
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "is not an unencrypted PEM private key (-----BEGIN PRIVATE KEY-----)");
  }
  return key;
}

std::string BioContent(BIO* bio) {
  char* data = nullptr;
  long size = BIO_get_mem_data(bio, &data);
  return std::string(data, size > 0 ? size : 0);
}

absl::StatusOr<std::string> CertificatePem(X509* certificate) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_X509(bio.get(), certificate)) return OpenSslFailure("PEM_write_bio_X509");
  return BioContent(bio.get());
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr)) {
    return OpenSslFailure("PEM_write_bio_PrivateKey");
  }
  return BioContent(bio.get());
}

absl::StatusOr<KeyPtr> NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslFailure("EC P-256 key generation");
  return key;
}

// The subject in RFC 2253 form, for messages: "CN=alice,OU=client,O=...".
std::string SubjectOf(X509* certificate) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(bio.get(), X509_get_subject_name(certificate), 0, XN_FLAG_RFC2253);
  return BioContent(bio.get());
}

std::vector<std::string> NameEntries(X509_NAME* name, int nid) {
  std::vector<std::string> values;
  for (int i = X509_NAME_get_index_by_NID(name, nid, -1); i >= 0;
       i = X509_NAME_get_index_by_NID(name, nid, i)) {
    unsigned char* utf8 = nullptr;
    int length = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i)));
    if (length < 0) continue;
    values.emplace_back(reinterpret_cast<char*>(utf8), length);
    OPENSSL_free(utf8);
  }
  return values;
}

std::string FormatAsn1Time(const ASN1_TIME* time) {
  std::tm tm{};
  if (!ASN1_TIME_to_tm(time, &tm)) return "an unreadable date";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromTimeT(timegm(&tm)),
                          absl::UTCTimeZone());
}

absl::Status SetSubject(X509* certificate, absl::string_view unit, const std::string& common_name) {
  X509_NAME* name = X509_get_subject_name(certificate);
  const std::pair<const char*, std::string> entries[] = {
      {"O", kOrganization}, {"OU", std::string(unit)}, {"CN", common_name}};
  for (const auto& [field, text] : entries) {
    if (!X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                                    reinterpret_cast<const unsigned char*>(text.c_str()), -1, -1,
                                    0)) {
      return OpenSslFailure("X509_NAME_add_entry_by_txt");
    }
  }
  return absl::OkStatus();
}

// Adds an extension from OpenSSL's configuration syntax. `value` is always
// one of our constants, never user input (hosts go through AddHosts).
absl::Status AddExtension(X509* certificate, X509* issuer, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, issuer, certificate, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
  if (extension == nullptr) return OpenSslFailure(absl::StrCat("extension ", value));
  int added = X509_add_ext(certificate, extension, -1);
  X509_EXTENSION_free(extension);
  if (!added) return OpenSslFailure(absl::StrCat("X509_add_ext ", value));
  return absl::OkStatus();
}

// A DNS name of letters, digits and hyphens in dot-separated labels; no
// wildcards.
bool IsDnsName(absl::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  bool all_numeric = true;
  for (absl::string_view label : absl::StrSplit(host, '.')) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      if (!absl::ascii_isalnum(c) && c != '-') return false;
      if (!absl::ascii_isdigit(c)) all_numeric = false;
    }
  }
  // "10.0.0" is neither an address nor a name anyone means.
  return !all_numeric;
}

absl::Status AddHosts(X509* certificate, const std::vector<std::string>& hosts) {
  if (hosts.empty()) return absl::OkStatus();
  NamesPtr names(sk_GENERAL_NAME_new_null());
  for (const std::string& given : hosts) {
    std::string host = given;
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    std::array<unsigned char, 16> address;
    bool is_ip = inet_pton(AF_INET, host.c_str(), address.data()) == 1 ||
                 inet_pton(AF_INET6, host.c_str(), address.data()) == 1;
    GENERAL_NAME* name = GENERAL_NAME_new();
    if (is_ip) {
      ASN1_OCTET_STRING* ip = a2i_IPADDRESS(host.c_str());
      if (ip == nullptr) {
        GENERAL_NAME_free(name);
        return OpenSslFailure(absl::StrCat("a2i_IPADDRESS ", host));
      }
      GENERAL_NAME_set0_value(name, GEN_IPADD, ip);
    } else {
      if (!IsDnsName(host)) {
        GENERAL_NAME_free(name);
        return absl::InvalidArgumentError(absl::StrCat(
            "host '", given,
            "' is neither an IP address nor a DNS name (letters, digits, '-' and '.'); pass "
            "--host with the name or address clients and workers dial"));
      }
      ASN1_IA5STRING* dns = ASN1_IA5STRING_new();
      ASN1_STRING_set(dns, host.data(), static_cast<int>(host.size()));
      GENERAL_NAME_set0_value(name, GEN_DNS, dns);
    }
    sk_GENERAL_NAME_push(names.get(), name);
  }
  if (!X509_add1_ext_i2d(certificate, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT)) {
    return OpenSslFailure("subjectAltName");
  }
  return absl::OkStatus();
}

absl::Status SetRandomSerial(X509* certificate) {
  std::array<unsigned char, 16> bytes;
  if (RAND_bytes(bytes.data(), bytes.size()) != 1) return OpenSslFailure("RAND_bytes");
  BignumPtr serial(BN_bin2bn(bytes.data(), bytes.size(), nullptr));
  if (serial == nullptr ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(certificate)) == nullptr) {
    return OpenSslFailure("serial number");
  }
  return absl::OkStatus();
}

// A v3 certificate for `key` with a random serial, the given subject and
// validity; extensions and the signature are the caller's.
absl::StatusOr<X509Ptr> NewCertificate(EVP_PKEY* key, absl::string_view unit,
                                       const std::string& common_name, absl::Duration validity) {
  X509Ptr certificate(X509_new());
  if (certificate == nullptr || !X509_set_version(certificate.get(), 2)) {
    return OpenSslFailure("X509_new");
  }
  RETURN_IF_ERROR(SetRandomSerial(certificate.get()));
  RETURN_IF_ERROR(SetSubject(certificate.get(), unit, common_name));
  if (!X509_gmtime_adj(X509_getm_notBefore(certificate.get()), -kBackdateSeconds) ||
      !X509_gmtime_adj(X509_getm_notAfter(certificate.get()),
                       static_cast<long>(absl::ToInt64Seconds(validity)))) {
    return OpenSslFailure("validity");
  }
  if (!X509_set_pubkey(certificate.get(), key)) return OpenSslFailure("X509_set_pubkey");
  return certificate;
}

absl::Status WritePair(const std::string& certificate_path, const std::string& certificate_pem,
                       const std::string& key_path, const std::string& key_pem) {
  RETURN_IF_ERROR(WriteNewFile(key_path, key_pem, 0600));
  absl::Status written = WriteNewFile(certificate_path, certificate_pem, 0644);
  if (!written.ok()) {
    // A key without its certificate would only block the next attempt.
    unlink(key_path.c_str());
    return written;
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view RoleName(PeerRole role) {
  switch (role) {
    case PeerRole::kClient:
      return "client";
    case PeerRole::kWorker:
      return "worker";
    case PeerRole::kCoordinator:
      return "coordinator";
  }
  return "unknown";
}

absl::StatusOr<PeerRole> ParseRole(absl::string_view name) {
  for (PeerRole role : {PeerRole::kClient, PeerRole::kWorker, PeerRole::kCoordinator}) {
    if (name == RoleName(role)) return role;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", name, "' is not a role; the roles are client, worker and coordinator"));
}

absl::Status ValidateCertificateName(absl::string_view name, absl::string_view what) {
  bool valid = !name.empty() && name.size() <= 64 && name.front() != '.' && name.front() != '-';
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') valid = false;
  }
  if (!valid) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " '", name,
                     "' is not allowed: use 1 to 64 letters, digits, '.', '_' or '-', not "
                     "starting with '.' or '-'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CertificateAuthority> NewCertificateAuthority(const std::string& cluster_name) {
  RETURN_IF_ERROR(ValidateCertificateName(cluster_name, "cluster name"));
  ASSIGN_OR_RETURN(KeyPtr key, NewKey());
  ASSIGN_OR_RETURN(X509Ptr certificate,
                   NewCertificate(key.get(), kCaUnit, cluster_name, kCaValidity));
  X509* self = certificate.get();
  if (!X509_set_issuer_name(self, X509_get_subject_name(self))) {
    return OpenSslFailure("X509_set_issuer_name");
  }
  RETURN_IF_ERROR(AddExtension(self, self, NID_basic_constraints, "critical,CA:TRUE"));
  RETURN_IF_ERROR(AddExtension(self, self, NID_key_usage, "critical,keyCertSign,cRLSign"));
  RETURN_IF_ERROR(AddExtension(self, self, NID_subject_key_identifier, "hash"));
  if (!X509_sign(self, key.get(), EVP_sha256())) return OpenSslFailure("X509_sign");
  CertificateAuthority ca;
  ASSIGN_OR_RETURN(ca.certificate_pem, CertificatePem(self));
  ASSIGN_OR_RETURN(ca.key_pem, KeyPem(key.get()));
  return ca;
}

absl::StatusOr<IssuedCertificate> IssueCertificate(const CertificateAuthority& ca,
                                                   const IssueOptions& options) {
  RETURN_IF_ERROR(ValidateCertificateName(options.name));
  if (options.validity <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a certificate's validity must be positive, not ", absl::FormatDuration(options.validity)));
  }
  if (options.role == PeerRole::kCoordinator && options.hosts.empty()) {
    return absl::InvalidArgumentError(
        "a coordinator certificate needs the hosts clients and workers dial it by (--host "
        "coordinator.example.com --host 10.0.0.5): they refuse a coordinator whose certificate "
        "does not name the address they dialled");
  }
  absl::StatusOr<X509Ptr> ca_certificate = ParseCertificate(ca.certificate_pem);
  if (!ca_certificate.ok()) return Annotate(ca_certificate.status(), "the CA certificate");
  absl::StatusOr<KeyPtr> ca_key = ParseKey(ca.key_pem);
  if (!ca_key.ok()) return Annotate(ca_key.status(), "the CA key");
  if (X509_check_ca(ca_certificate->get()) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("the certificate ",
                                                   SubjectOf(ca_certificate->get()),
                                                   " is not a CA; pass the cluster's ca.crt"));
  }
  if (X509_check_private_key(ca_certificate->get(), ca_key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "the CA key does not belong to the CA certificate; pass the ca.key written with ca.crt");
  }

  ASSIGN_OR_RETURN(KeyPtr key, NewKey());
  ASSIGN_OR_RETURN(X509Ptr certificate, NewCertificate(key.get(), RoleName(options.role),
                                                       options.name, options.validity));
  X509* leaf = certificate.get();
  X509* issuer = ca_certificate->get();
  if (!X509_set_issuer_name(leaf, X509_get_subject_name(issuer))) {
    return OpenSslFailure("X509_set_issuer_name");
  }
  RETURN_IF_ERROR(AddExtension(leaf, issuer, NID_basic_constraints, "critical,CA:FALSE"));
  RETURN_IF_ERROR(AddExtension(leaf, issuer, NID_key_usage, "critical,digitalSignature"));
  // The coordinator also dials out as a client in no current flow, but a
  // server certificate that can authenticate as a client costs nothing.
  RETURN_IF_ERROR(AddExtension(
      leaf, issuer, NID_ext_key_usage,
      options.role == PeerRole::kCoordinator ? "serverAuth,clientAuth" : "clientAuth"));
  RETURN_IF_ERROR(AddExtension(leaf, issuer, NID_subject_key_identifier, "hash"));
  RETURN_IF_ERROR(AddExtension(leaf, issuer, NID_authority_key_identifier, "keyid:always"));
  // Clients and workers need no subjectAltName: the coordinator checks their
  // chain and reads their role from the subject, never a host name.
  RETURN_IF_ERROR(AddHosts(leaf, options.hosts));
  if (!X509_sign(leaf, ca_key->get(), EVP_sha256())) return OpenSslFailure("X509_sign");

  IssuedCertificate issued;
  issued.role = options.role;
  issued.name = options.name;
  ASSIGN_OR_RETURN(issued.certificate_pem, CertificatePem(leaf));
  ASSIGN_OR_RETURN(issued.key_pem, KeyPem(key.get()));
  return issued;
}

absl::StatusOr<CertificateIdentity> IdentityOfCertificate(const std::string& certificate_pem) {
  ASSIGN_OR_RETURN(X509Ptr certificate, ParseCertificate(certificate_pem));
  X509_NAME* subject = X509_get_subject_name(certificate.get());
  std::vector<std::string> organizations = NameEntries(subject, NID_organizationName);
  std::vector<std::string> units = NameEntries(subject, NID_organizationalUnitName);
  std::vector<std::string> names = NameEntries(subject, NID_commonName);
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate ", SubjectOf(certificate.get()),
                     " is not a distcc-cuda role certificate (", why,
                     "); issue one with distcc-cuda-coordinator certs issue --role ROLE NAME"));
  };
  if (organizations.size() != 1 || organizations[0] != kOrganization) {
    return refuse(absl::StrCat("its O is not ", kOrganization));
  }
  if (units.size() != 1 || names.size() != 1) return refuse("it needs exactly one OU and one CN");
  absl::StatusOr<PeerRole> role = ParseRole(units[0]);
  if (!role.ok()) {
    return refuse(absl::StrCat("its OU is '", units[0], "', not client, worker or coordinator"));
  }
  return CertificateIdentity{*role, names[0]};
}

absl::Status CheckCertificate(const std::string& ca_pem, const std::string& certificate_pem,
                              absl::Time now) {
  absl::StatusOr<X509Ptr> ca = ParseCertificate(ca_pem);
  if (!ca.ok()) return Annotate(ca.status(), "the CA certificate");
  ASSIGN_OR_RETURN(X509Ptr certificate, ParseCertificate(certificate_pem));
  StorePtr store(X509_STORE_new());
  StoreContextPtr context(X509_STORE_CTX_new());
  if (store == nullptr || context == nullptr || !X509_STORE_add_cert(store.get(), ca->get()) ||
      !X509_STORE_CTX_init(context.get(), store.get(), certificate.get(), nullptr)) {
    return OpenSslFailure("setting up certificate verification");
  }
  X509_STORE_CTX_set_time(context.get(), 0, absl::ToTimeT(now));
  int verified = X509_verify_cert(context.get());
  ERR_clear_error();
  if (verified == 1) return absl::OkStatus();
  int error = X509_STORE_CTX_get_error(context.get());
  bool is_ca = X509_STORE_CTX_get_error_depth(context.get()) > 0;
  X509* culprit = is_ca ? ca->get() : certificate.get();
  std::string which = is_ca ? "its CA certificate " : "";
  if (error == X509_V_ERR_CERT_HAS_EXPIRED) {
    return absl::FailedPreconditionError(
        absl::StrCat(which, "expired on ", FormatAsn1Time(X509_get0_notAfter(culprit))));
  }
  if (error == X509_V_ERR_CERT_NOT_YET_VALID) {
    return absl::FailedPreconditionError(absl::StrCat(which, "is not valid before ",
                                                      FormatAsn1Time(X509_get0_notBefore(culprit)),
                                                      " (is this machine's clock right?)"));
  }
  return absl::PermissionDeniedError(
      absl::StrCat("was not issued by this CA (", X509_verify_cert_error_string(error), ")"));
}

absl::Status CheckValidAt(const std::string& certificate_pem, absl::Time now) {
  ASSIGN_OR_RETURN(X509Ptr certificate, ParseCertificate(certificate_pem));
  time_t at = absl::ToTimeT(now);
  if (X509_cmp_time(X509_get0_notAfter(certificate.get()), &at) < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("expired on ", FormatAsn1Time(X509_get0_notAfter(certificate.get()))));
  }
  if (X509_cmp_time(X509_get0_notBefore(certificate.get()), &at) > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("is not valid before ", FormatAsn1Time(X509_get0_notBefore(certificate.get())),
                     " (is this machine's clock right?)"));
  }
  return absl::OkStatus();
}

absl::Status CheckKeyMatches(const std::string& certificate_pem, const std::string& key_pem) {
  ASSIGN_OR_RETURN(X509Ptr certificate, ParseCertificate(certificate_pem));
  ASSIGN_OR_RETURN(KeyPtr key, ParseKey(key_pem));
  if (X509_check_private_key(certificate.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("is not the private key of the certificate");
  }
  return absl::OkStatus();
}

absl::StatusOr<CertificateFiles> InitCertificateAuthority(const std::string& dir,
                                                          const std::string& cluster_name) {
  RETURN_IF_ERROR(ValidateCertificateName(cluster_name, "cluster name"));
  CertificateFiles files{dir + "/ca.crt", dir + "/ca.key"};
  for (const std::string& path : {files.certificate_path, files.key_path}) {
    if (std::filesystem::exists(path)) {
      return absl::AlreadyExistsError(absl::StrCat(
          path, " already exists: ", dir,
          " holds a CA already. Issue certificates from it (distcc-cuda-coordinator certs issue "
          "--dir ",
          dir,
          " ...), or choose another --dir for a new cluster; a new CA would make every "
          "certificate of the old one useless"));
    }
  }
  bool existed = std::filesystem::exists(dir);
  RETURN_IF_ERROR(MakeDirectories(dir));
  // The folder holds the CA's key: keep others out of one we made.
  if (!existed) chmod(dir.c_str(), 0700);
  ASSIGN_OR_RETURN(CertificateAuthority ca, NewCertificateAuthority(cluster_name));
  RETURN_IF_ERROR(
      WritePair(files.certificate_path, ca.certificate_pem, files.key_path, ca.key_pem));
  return files;
}

absl::StatusOr<CertificateFiles> IssueCertificateFiles(const std::string& dir,
                                                       const IssueOptions& options) {
  RETURN_IF_ERROR(ValidateCertificateName(options.name));
  if (options.name == "ca") {
    return absl::InvalidArgumentError(
        "the name 'ca' is taken by the CA's own files (ca.crt, ca.key); choose another");
  }
  CertificateAuthority ca;
  for (auto [path, pem] :
       {std::pair{dir + "/ca.crt", &ca.certificate_pem}, std::pair{dir + "/ca.key", &ca.key_pem}}) {
    absl::StatusOr<std::string> content = ReadFile(path);
    if (absl::IsNotFound(content.status())) {
      return absl::NotFoundError(absl::StrCat(path,
                                              " does not exist; make the cluster's CA first: "
                                              "distcc-cuda-coordinator certs init --dir ",
                                              dir));
    }
    if (!content.ok()) return content.status();
    *pem = std::move(*content);
  }
  CertificateFiles files{absl::StrCat(dir, "/", options.name, ".crt"),
                         absl::StrCat(dir, "/", options.name, ".key")};
  for (const std::string& path : {files.certificate_path, files.key_path}) {
    if (std::filesystem::exists(path)) {
      return absl::AlreadyExistsError(absl::StrCat(
          path, " already exists; choose another name, or remove ", files.certificate_path, " and ",
          files.key_path, " to replace it (the old certificate stays valid until it expires)"));
    }
  }
  absl::StatusOr<IssuedCertificate> issued = IssueCertificate(ca, options);
  if (!issued.ok()) {
    if (absl::IsInvalidArgument(issued.status()) &&
        absl::StartsWith(issued.status().message(), "the CA")) {
      return Annotate(issued.status(), dir);
    }
    return issued.status();
  }
  RETURN_IF_ERROR(
      WritePair(files.certificate_path, issued->certificate_pem, files.key_path, issued->key_pem));
  return files;
}

}  // namespace distcc_cuda
