// SPDX-License-Identifier: Apache-2.0
// The cluster CA, role certificates and the checks a program runs on its TLS
// files at start.
#include "common/transport/certificates.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include "common/base/files.h"
#include "common/transport/tls_credentials.h"
#include "tests/support/test_certificates.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

// A parsed certificate for looking inside it with OpenSSL.
struct ParsedCertificate {
  explicit ParsedCertificate(const std::string& pem) {
    BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
    certificate = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
  }
  ~ParsedCertificate() { X509_free(certificate); }
  std::string Serial() const {
    BIGNUM* serial = ASN1_INTEGER_to_BN(X509_get0_serialNumber(certificate), nullptr);
    char* hex = BN_bn2hex(serial);
    std::string text = hex;
    OPENSSL_free(hex);
    BN_free(serial);
    return text;
  }
  X509* certificate = nullptr;
};

CertificateAuthority NewCa(const std::string& cluster = "test-cluster") {
  absl::StatusOr<CertificateAuthority> ca = NewCertificateAuthority(cluster);
  EXPECT_TRUE(ca.ok()) << ca.status();
  return ca.ok() ? *ca : CertificateAuthority{};
}

IssuedCertificate Issue(const CertificateAuthority& ca, PeerRole role, const std::string& name,
                        std::vector<std::string> hosts = {}) {
  return testing::IssueForTest(ca, role, name, std::move(hosts));
}

TEST(PeerRoleTest, NamesParseBackAndOthersAreRefused) {
  for (PeerRole role : {PeerRole::kClient, PeerRole::kWorker, PeerRole::kCoordinator}) {
    absl::StatusOr<PeerRole> parsed = ParseRole(RoleName(role));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, role);
  }
  EXPECT_EQ(RoleName(PeerRole::kWorker), "worker");
  absl::StatusOr<PeerRole> bad = ParseRole("admin");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("client, worker and coordinator"));
}

TEST(CertificatesTest, IssuedCertificateCarriesItsRoleAndNameAndVerifiesAgainstItsCa) {
  CertificateAuthority ca = NewCa();
  const std::pair<PeerRole, std::vector<std::string>> cases[] = {
      {PeerRole::kClient, {}}, {PeerRole::kWorker, {}}, {PeerRole::kCoordinator, {"127.0.0.1"}}};
  for (const auto& [role, hosts] : cases) {
    IssuedCertificate issued = Issue(ca, role, "holder-1", hosts);
    absl::StatusOr<CertificateIdentity> identity = IdentityOfCertificate(issued.certificate_pem);
    ASSERT_TRUE(identity.ok()) << identity.status();
    EXPECT_EQ(identity->role, role);
    EXPECT_EQ(identity->name, "holder-1");
    EXPECT_TRUE(CheckCertificate(ca.certificate_pem, issued.certificate_pem, absl::Now()).ok());
    EXPECT_TRUE(CheckKeyMatches(issued.certificate_pem, issued.key_pem).ok());
  }
}

TEST(CertificatesTest, CaIsACaAndLeavesAreNot) {
  CertificateAuthority ca = NewCa();
  IssuedCertificate client = Issue(ca, PeerRole::kClient, "alice");
  ParsedCertificate ca_certificate(ca.certificate_pem);
  ParsedCertificate leaf(client.certificate_pem);
  ASSERT_NE(ca_certificate.certificate, nullptr);
  ASSERT_NE(leaf.certificate, nullptr);
  EXPECT_EQ(X509_check_ca(ca_certificate.certificate), 1);
  EXPECT_EQ(X509_check_ca(leaf.certificate), 0);
  EXPECT_EQ(X509_check_issued(ca_certificate.certificate, leaf.certificate), X509_V_OK);
  // The CA's own certificate is no role certificate: it cannot stand in for one.
  absl::StatusOr<CertificateIdentity> identity = IdentityOfCertificate(ca.certificate_pem);
  EXPECT_TRUE(absl::IsInvalidArgument(identity.status())) << identity.status();
  EXPECT_THAT(identity.status().message(), HasSubstr("OU is 'cluster-ca'"));
}

TEST(CertificatesTest, ExtendedKeyUsageFollowsTheRole) {
  CertificateAuthority ca = NewCa();
  ParsedCertificate coordinator(
      Issue(ca, PeerRole::kCoordinator, "coord", {"10.0.0.5"}).certificate_pem);
  ParsedCertificate worker(Issue(ca, PeerRole::kWorker, "w1").certificate_pem);
  ASSERT_NE(coordinator.certificate, nullptr);
  ASSERT_NE(worker.certificate, nullptr);
  EXPECT_EQ(X509_get_extended_key_usage(coordinator.certificate), XKU_SSL_SERVER | XKU_SSL_CLIENT);
  EXPECT_EQ(X509_get_extended_key_usage(worker.certificate), XKU_SSL_CLIENT);
}

TEST(CertificatesTest, CoordinatorCertificateNamesItsHostsAsIpOrDns) {
  CertificateAuthority ca = NewCa();
  IssuedCertificate issued =
      Issue(ca, PeerRole::kCoordinator, "coord", {"10.0.0.5", "[::1]", "coord.example.com"});
  ParsedCertificate parsed(issued.certificate_pem);
  ASSERT_NE(parsed.certificate, nullptr);
  EXPECT_EQ(X509_check_ip_asc(parsed.certificate, "10.0.0.5", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(parsed.certificate, "::1", 0), 1);
  EXPECT_EQ(X509_check_host(parsed.certificate, "coord.example.com", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_ip_asc(parsed.certificate, "10.0.0.6", 0), 0);
  EXPECT_EQ(X509_check_host(parsed.certificate, "other.example.com", 0, 0, nullptr), 0);
  // An address must not pass as a DNS name, nor a name as an address.
  EXPECT_EQ(X509_check_host(parsed.certificate, "10.0.0.5", 0, 0, nullptr), 0);
}

TEST(CertificatesTest, CoordinatorCertificateNeedsAHost) {
  CertificateAuthority ca = NewCa();
  IssueOptions options;
  options.role = PeerRole::kCoordinator;
  options.name = "coord";
  absl::StatusOr<IssuedCertificate> issued = IssueCertificate(ca, options);
  EXPECT_TRUE(absl::IsInvalidArgument(issued.status())) << issued.status();
  EXPECT_THAT(issued.status().message(), HasSubstr("--host"));
}

TEST(CertificatesTest, SerialsAreRandom) {
  CertificateAuthority ca = NewCa();
  std::string first = ParsedCertificate(Issue(ca, PeerRole::kClient, "a").certificate_pem).Serial();
  std::string second =
      ParsedCertificate(Issue(ca, PeerRole::kClient, "a").certificate_pem).Serial();
  EXPECT_NE(first, second);
  // 128 random bits: at least 120 of them survive as hex digits.
  EXPECT_GE(first.size(), 30u) << first;
}

TEST(CertificatesTest, BadNamesAreRefused) {
  CertificateAuthority ca = NewCa();
  for (const std::string& name :
       {std::string(""), std::string("two words"), std::string("a/b"), std::string("../up"),
        std::string("-flag"), std::string(".hidden"), std::string("semi;colon"),
        std::string("caf\xc3\xa9"), std::string(65, 'x')}) {
    IssueOptions options;
    options.role = PeerRole::kWorker;
    options.name = name;
    absl::StatusOr<IssuedCertificate> issued = IssueCertificate(ca, options);
    EXPECT_TRUE(absl::IsInvalidArgument(issued.status()))
        << "'" << name << "': " << issued.status();
    EXPECT_THAT(issued.status().message(), HasSubstr("letters, digits"));
  }
  for (const std::string& name : {std::string("w1"), std::string("alice.smith_2"),
                                  std::string("GPU-node-07"), std::string(64, 'x')}) {
    EXPECT_TRUE(ValidateCertificateName(name).ok()) << name;
  }
  EXPECT_TRUE(absl::IsInvalidArgument(NewCertificateAuthority("my cluster").status()));
}

TEST(CertificatesTest, BadHostsAreRefused) {
  CertificateAuthority ca = NewCa();
  for (const std::string& host :
       std::vector<std::string>{"coord.example.com,DNS:evil.example.com", "*.example.com", "10.0.0",
                                "under_score.com", "", "-lead.example.com"}) {
    IssueOptions options;
    options.role = PeerRole::kCoordinator;
    options.name = "coord";
    options.hosts = {host};
    absl::StatusOr<IssuedCertificate> issued = IssueCertificate(ca, options);
    EXPECT_TRUE(absl::IsInvalidArgument(issued.status()))
        << "'" << host << "': " << issued.status();
  }
}

TEST(CertificatesTest, ValidityMustBePositive) {
  CertificateAuthority ca = NewCa();
  IssueOptions options;
  options.name = "alice";
  options.validity = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(IssueCertificate(ca, options).status()));
}

TEST(CertificatesTest, CertificateOfAnotherCaDoesNotVerify) {
  CertificateAuthority ca = NewCa("one");
  CertificateAuthority other = NewCa("two");
  IssuedCertificate stranger = Issue(other, PeerRole::kClient, "mallory");
  absl::Status checked =
      CheckCertificate(ca.certificate_pem, stranger.certificate_pem, absl::Now());
  EXPECT_TRUE(absl::IsPermissionDenied(checked)) << checked;
  EXPECT_THAT(checked.message(), HasSubstr("not issued by this CA"));
}

TEST(CertificatesTest, ExpiredAndNotYetValidCertificatesAreNamedSo) {
  CertificateAuthority ca = NewCa();
  IssueOptions options;
  options.name = "alice";
  options.validity = absl::Hours(24);
  absl::StatusOr<IssuedCertificate> issued = IssueCertificate(ca, options);
  ASSERT_TRUE(issued.ok()) << issued.status();
  absl::Status later =
      CheckCertificate(ca.certificate_pem, issued->certificate_pem, absl::Now() + absl::Hours(48));
  EXPECT_TRUE(absl::IsFailedPrecondition(later)) << later;
  EXPECT_THAT(later.message(), HasSubstr("expired on"));
  absl::Status earlier =
      CheckCertificate(ca.certificate_pem, issued->certificate_pem, absl::Now() - absl::Hours(1));
  EXPECT_TRUE(absl::IsFailedPrecondition(earlier)) << earlier;
  EXPECT_THAT(earlier.message(), HasSubstr("is not valid before"));
}

TEST(CertificatesTest, AKeyThatIsNotTheCertificatesIsRefused) {
  CertificateAuthority ca = NewCa();
  IssuedCertificate alice = Issue(ca, PeerRole::kClient, "alice");
  IssuedCertificate bob = Issue(ca, PeerRole::kClient, "bob");
  EXPECT_TRUE(absl::IsInvalidArgument(CheckKeyMatches(alice.certificate_pem, bob.key_pem)));
  EXPECT_TRUE(absl::IsInvalidArgument(CheckKeyMatches(alice.certificate_pem, "not a key")));
  EXPECT_TRUE(absl::IsInvalidArgument(IdentityOfCertificate("not a certificate").status()));
}

TEST(CertificatesTest, IssuingWithAMismatchedCaKeyIsRefused) {
  CertificateAuthority one = NewCa("one");
  CertificateAuthority two = NewCa("two");
  CertificateAuthority mixed{one.certificate_pem, two.key_pem};
  IssueOptions options;
  options.name = "alice";
  absl::StatusOr<IssuedCertificate> issued = IssueCertificate(mixed, options);
  EXPECT_TRUE(absl::IsInvalidArgument(issued.status())) << issued.status();
  EXPECT_THAT(issued.status().message(), HasSubstr("does not belong"));
}

// --- On disk ----------------------------------------------------------------

unsigned ModeOf(const std::string& path) {
  struct stat info;
  EXPECT_EQ(stat(path.c_str(), &info), 0) << path;
  return info.st_mode & 0777;
}

TEST(CertificateFilesTest, InitWritesThePrivateKeyPrivatelyAndRefusesToReplaceTheCa) {
  std::string dir = testing::NewTempDir("ca-") + "/pki";
  absl::StatusOr<CertificateFiles> files = InitCertificateAuthority(dir, "lab");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->certificate_path, dir + "/ca.crt");
  EXPECT_EQ(files->key_path, dir + "/ca.key");
  EXPECT_EQ(ModeOf(files->key_path), 0600u);
  EXPECT_EQ(ModeOf(dir), 0700u) << "a folder made for the CA's key is private";
  absl::StatusOr<std::string> before = ReadFile(files->key_path);
  ASSERT_TRUE(before.ok());

  absl::StatusOr<CertificateFiles> again = InitCertificateAuthority(dir, "lab");
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
  EXPECT_THAT(again.status().message(), HasSubstr("certs issue"));
  EXPECT_EQ(*ReadFile(files->key_path), *before) << "the old CA key was replaced";
}

TEST(CertificateFilesTest, IssueWritesNamedFilesOnceFromTheCaInTheFolder) {
  std::string dir = testing::NewTempDir("ca-");
  ASSERT_TRUE(InitCertificateAuthority(dir, "lab").ok());
  IssueOptions options;
  options.role = PeerRole::kWorker;
  options.name = "gpu-07";
  absl::StatusOr<CertificateFiles> files = IssueCertificateFiles(dir, options);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->certificate_path, dir + "/gpu-07.crt");
  EXPECT_EQ(ModeOf(files->key_path), 0600u);

  absl::StatusOr<std::optional<TlsMaterial>> loaded = LoadTlsMaterial(
      {dir + "/ca.crt", files->certificate_path, files->key_path}, PeerRole::kWorker);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->identity.name, "gpu-07");
  EXPECT_EQ((*loaded)->identity.role, PeerRole::kWorker);

  absl::StatusOr<CertificateFiles> again = IssueCertificateFiles(dir, options);
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();

  options.name = "ca";
  EXPECT_TRUE(absl::IsInvalidArgument(IssueCertificateFiles(dir, options).status()));
}

TEST(CertificateFilesTest, IssueWithoutACaSaysToMakeOne) {
  IssueOptions options;
  options.name = "alice";
  absl::StatusOr<CertificateFiles> files =
      IssueCertificateFiles(testing::NewTempDir("no-ca-"), options);
  EXPECT_TRUE(absl::IsNotFound(files.status())) << files.status();
  EXPECT_THAT(files.status().message(), HasSubstr("certs init"));
}

TEST(WriteNewFileTest, NeverReplacesAFile) {
  std::string path = testing::NewTempDir("new-file-") + "/f";
  ASSERT_TRUE(WriteNewFile(path, "first", 0600).ok());
  absl::Status again = WriteNewFile(path, "second", 0600);
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
  EXPECT_EQ(*ReadFile(path), "first");
  EXPECT_EQ(ModeOf(path), 0600u);
}

// --- LoadTlsMaterial --------------------------------------------------------

class LoadTlsMaterialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::NewTempDir("tls-files-");
    ca_ = NewCa("lab");
    ASSERT_TRUE(WriteFileAtomically(dir_ + "/ca.crt", ca_.certificate_pem).ok());
  }

  // Writes `issued` as DIR/NAME.crt and DIR/NAME.key; returns its TlsFiles.
  TlsFiles Write(const IssuedCertificate& issued) {
    TlsFiles files{dir_ + "/ca.crt", dir_ + "/" + issued.name + ".crt",
                   dir_ + "/" + issued.name + ".key"};
    EXPECT_TRUE(WriteFileAtomically(files.cert, issued.certificate_pem).ok());
    EXPECT_TRUE(WriteFileAtomically(files.key, issued.key_pem).ok());
    return files;
  }

  std::string dir_;
  CertificateAuthority ca_;
};

TEST_F(LoadTlsMaterialTest, NoFilesMeansNoTls) {
  absl::StatusOr<std::optional<TlsMaterial>> loaded = LoadTlsMaterial({}, PeerRole::kClient);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->has_value());
}

TEST_F(LoadTlsMaterialTest, SomeFilesWithoutTheOthersNamesTheMissingFlags) {
  TlsFiles files = Write(Issue(ca_, PeerRole::kClient, "alice"));
  files.key.clear();
  absl::StatusOr<std::optional<TlsMaterial>> loaded = LoadTlsMaterial(files, PeerRole::kClient);
  EXPECT_TRUE(absl::IsInvalidArgument(loaded.status())) << loaded.status();
  EXPECT_THAT(loaded.status().message(), HasSubstr("--tls-key is not"));
  files.cert.clear();
  loaded = LoadTlsMaterial(files, PeerRole::kClient);
  EXPECT_THAT(loaded.status().message(), HasSubstr("--tls-ca is set but --tls-cert and --tls-key"));
}

TEST_F(LoadTlsMaterialTest, ARightCertificateLoads) {
  IssuedCertificate alice = Issue(ca_, PeerRole::kClient, "alice");
  absl::StatusOr<std::optional<TlsMaterial>> loaded =
      LoadTlsMaterial(Write(alice), PeerRole::kClient);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->identity.name, "alice");
  EXPECT_EQ((*loaded)->ca_pem, ca_.certificate_pem);
  EXPECT_EQ((*loaded)->certificate_pem, alice.certificate_pem);
  EXPECT_EQ((*loaded)->key_pem, alice.key_pem);
}

TEST_F(LoadTlsMaterialTest, CertificateOfAnotherRoleSaysWhichRoleIsNeededAndHowToGetIt) {
  TlsFiles files = Write(Issue(ca_, PeerRole::kClient, "alice"));
  absl::StatusOr<std::optional<TlsMaterial>> loaded = LoadTlsMaterial(files, PeerRole::kWorker);
  EXPECT_TRUE(absl::IsInvalidArgument(loaded.status())) << loaded.status();
  EXPECT_THAT(
      loaded.status().message(),
      HasSubstr("alice.crt is a client certificate (alice); a worker needs a worker "
                "certificate: distcc-cuda-coordinator certs issue --dir DIR --role worker"));
}

TEST_F(LoadTlsMaterialTest, CertificateOfAnotherCaIsRefused) {
  CertificateAuthority other = NewCa("elsewhere");
  TlsFiles files = Write(Issue(other, PeerRole::kClient, "mallory"));
  absl::StatusOr<std::optional<TlsMaterial>> loaded = LoadTlsMaterial(files, PeerRole::kClient);
  EXPECT_TRUE(absl::IsPermissionDenied(loaded.status())) << loaded.status();
  EXPECT_THAT(loaded.status().message(), HasSubstr("mallory.crt was not issued by this CA"));
  EXPECT_THAT(loaded.status().message(), HasSubstr(files.ca));
}

TEST_F(LoadTlsMaterialTest, KeyOfAnotherCertificateIsRefused) {
  TlsFiles alice = Write(Issue(ca_, PeerRole::kClient, "alice"));
  TlsFiles bob = Write(Issue(ca_, PeerRole::kClient, "bob"));
  alice.key = bob.key;
  absl::StatusOr<std::optional<TlsMaterial>> loaded = LoadTlsMaterial(alice, PeerRole::kClient);
  EXPECT_TRUE(absl::IsInvalidArgument(loaded.status())) << loaded.status();
  EXPECT_THAT(loaded.status().message(), HasSubstr("bob.key is not the private key"));
}

TEST_F(LoadTlsMaterialTest, MissingFileNamesItsFlag) {
  TlsFiles files = Write(Issue(ca_, PeerRole::kClient, "alice"));
  files.cert = dir_ + "/nobody.crt";
  absl::StatusOr<std::optional<TlsMaterial>> loaded = LoadTlsMaterial(files, PeerRole::kClient);
  EXPECT_TRUE(absl::IsNotFound(loaded.status())) << loaded.status();
  EXPECT_THAT(loaded.status().message(), HasSubstr("--tls-cert"));
  EXPECT_THAT(loaded.status().message(), HasSubstr("nobody.crt"));
}

}  // namespace
}  // namespace distcc_cuda
