// SPDX-License-Identifier: Apache-2.0
// Mutual TLS to another Remote Execution API engine (`distcc-cuda build
// --remote-executor grpcs://... --remote-tls-ca --remote-tls-cert
// --remote-tls-key`, issue 49): the real client binary against a scripted
// engine on loopback (tests/support/scripted_engine.h) that serves TLS with
// a certificate of its own PKI and requires a client certificate from it.
// With the engine's CA and a client certificate the build runs there;
// without the certificate, or trusting another CA, it stops before
// anything is scanned, saying which flag is missing; and every flag is
// checked before the engine is dialled.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "common/transport/certificates.h"
#include "common/transport/tls_credentials.h"
#include "tests/support/background_process.h"
#include "tests/support/scripted_engine.h"
#include "tests/support/test_certificates.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class EngineTlsTest : public ::testing::Test {
 protected:
  // One engine PKI and one TLS engine for the binary's tests.
  static void SetUpTestSuite() {
    root_ = new std::string(testing::NewTempDir("engine-tls-"));
    absl::StatusOr<CertificateAuthority> ca = NewCertificateAuthority("engine-pki");
    ASSERT_TRUE(ca.ok()) << ca.status();
    absl::StatusOr<CertificateAuthority> other = NewCertificateAuthority("another-pki");
    ASSERT_TRUE(other.ok()) << other.status();
    const TlsMaterial server =
        testing::MaterialForTest(*ca, PeerRole::kCoordinator, "engine", {"127.0.0.1"});
    const IssuedCertificate client = testing::IssueForTest(*ca, PeerRole::kClient, "alice");
    const IssuedCertificate stranger = testing::IssueForTest(*ca, PeerRole::kClient, "bob");
    for (const auto& [name, content] :
         std::vector<std::pair<std::string, std::string>>{{"ca.crt", ca->certificate_pem},
                                                          {"other-ca.crt", other->certificate_pem},
                                                          {"alice.crt", client.certificate_pem},
                                                          {"alice.key", client.key_pem},
                                                          {"bob.key", stranger.key_pem}}) {
      ASSERT_TRUE(WriteFileAtomically(*root_ + "/" + name, content).ok());
    }
    testing::WriteEnginePlan(*root_, 2, "libtls.so");
    engine_ = testing::ScriptedEngine::Start(ServerCredentials(server)).release();
  }

  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }

  // `distcc-cuda build` of the plan on the engine at `url` with `flags`.
  static ProcessResult Build(const std::string& url, const std::vector<std::string>& flags) {
    const std::string run = testing::NewTempDir("engine-tls-run-");
    std::vector<std::string> argv = {testing::BinaryPath("distcc-cuda"),
                                     "build",
                                     *root_ + "/src/kernels.toml",
                                     "-o",
                                     run + "/out",
                                     "--state-dir",
                                     run + "/state",
                                     "--nvcc",
                                     testing::FakeNvccPath(),
                                     "--remote-executor",
                                     url,
                                     "--remote-instance",
                                     "main",
                                     "--remote-memory",
                                     "8GiB",
                                     "--connect-timeout-s",
                                     "3"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return testing::RunToEnd(argv, absl::Minutes(2));
  }
  static std::string Tls() { return "grpcs://" + engine_->address(); }
  static std::string File(const std::string& name) { return *root_ + "/" + name; }

  static inline std::string* root_ = nullptr;
  static inline testing::ScriptedEngine* engine_ = nullptr;
};

TEST_F(EngineTlsTest, ABuildPresentsItsCertificateToAnEngineThatRequiresOne) {
  const size_t before = engine_->calls().size();
  ProcessResult built = Build(Tls(), {"--remote-tls-ca", File("ca.crt"), "--remote-tls-cert",
                                      File("alice.crt"), "--remote-tls-key", File("alice.key")});
  const std::string out = built.stdout_text + built.stderr_text;
  ASSERT_EQ(built.exit_code, 0) << out;
  EXPECT_THAT(out, HasSubstr("compiling on the engine at " + Tls())) << out;
  EXPECT_THAT(out, HasSubstr("units     2 (2 compiled, 0 cached, 0 failed)")) << out;
  EXPECT_EQ(engine_->calls().size(), before + 2);
}

TEST_F(EngineTlsTest, WithoutItsCertificateTheEngineRefusesAndTheErrorNamesTheFlags) {
  const size_t before = engine_->calls().size();
  ProcessResult refused = Build(Tls(), {"--remote-tls-ca", File("ca.crt")});
  EXPECT_EQ(refused.exit_code, 2) << refused.stderr_text;
  EXPECT_THAT(refused.stderr_text, HasSubstr("cannot reach the engine at " + Tls()));
  EXPECT_THAT(refused.stderr_text, HasSubstr("--remote-tls-cert and --remote-tls-key"));
  EXPECT_EQ(engine_->calls().size(), before);
}

TEST_F(EngineTlsTest, AnEngineWhoseCertificateAnotherCaIssuedIsNotTrusted) {
  const size_t before = engine_->calls().size();
  ProcessResult refused =
      Build(Tls(), {"--remote-tls-ca", File("other-ca.crt"), "--remote-tls-cert", File("alice.crt"),
                    "--remote-tls-key", File("alice.key")});
  EXPECT_EQ(refused.exit_code, 2) << refused.stderr_text;
  EXPECT_THAT(refused.stderr_text, HasSubstr("cannot reach the engine at " + Tls()));
  EXPECT_THAT(refused.stderr_text, HasSubstr("--remote-tls-ca " + File("other-ca.crt")));
  EXPECT_EQ(engine_->calls().size(), before);
}

TEST_F(EngineTlsTest, EachFlagIsCheckedBeforeTheEngineIsDialled) {
  struct Case {
    std::string url;
    std::vector<std::string> flags;
    std::string said;
  };
  const std::string plain = "grpc://" + engine_->address();
  const std::vector<Case> cases = {
      {plain,
       {"--remote-tls-ca", File("ca.crt")},
       "are for an engine reached over TLS, and " + plain +
           " is not: write its address as grpcs://"},
      {Tls(),
       {"--remote-tls-cert", File("alice.crt")},
       "--remote-tls-cert is set but --remote-tls-key is not"},
      {Tls(),
       {"--remote-tls-key", File("alice.key")},
       "--remote-tls-key is set but --remote-tls-cert is not"},
      {Tls(),
       {"--remote-tls-cert", File("alice.crt"), "--remote-tls-key", File("bob.key")},
       "--remote-tls-key " + File("bob.key") + " is not the private key of the certificate"},
      {Tls(), {"--remote-tls-ca", File("missing.crt")}, "--remote-tls-ca"},
      {Tls(),
       {"--remote-tls-ca", File("alice.key")},
       "--remote-tls-ca " + File("alice.key") + " is not a PEM certificate"},
  };
  for (const Case& bad : cases) {
    ProcessResult refused = Build(bad.url, bad.flags);
    EXPECT_EQ(refused.exit_code, 2) << bad.said << "\n" << refused.stderr_text;
    EXPECT_THAT(refused.stderr_text, HasSubstr(bad.said));
    EXPECT_THAT(refused.stderr_text, Not(HasSubstr("cannot reach the engine")));
  }
  EXPECT_THAT(Build(Tls(), {"--remote-tls-ca", File("missing.crt")}).stderr_text,
              HasSubstr("missing.crt"));
}

}  // namespace
}  // namespace distcc_cuda
