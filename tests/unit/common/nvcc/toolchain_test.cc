// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/toolchain.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/store/digest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

v1::ToolchainFingerprint Found(const std::string& release, const std::string& version) {
  v1::ToolchainFingerprint toolchain;
  toolchain.set_nvcc_release(release);
  toolchain.set_nvcc_version(version);
  toolchain.set_nvcc_build("cuda_" + release + ".r" + release + "/compiler.1_0");
  toolchain.set_nvcc_path("/usr/local/cuda/bin/nvcc");
  return toolchain;
}

TEST(RequiredReleaseTest, MatchesReleaseOrExactVersion) {
  struct Case {
    std::string required;
    bool ok;
  };
  const v1::ToolchainFingerprint toolchain = Found("12.8", "12.8.93");
  for (const Case& c : std::vector<Case>{{"", true},
                                         {"12.8", true},
                                         {"12.8.93", true},
                                         {"12.8.61", false},
                                         {"13.0", false},
                                         {"12", false},
                                         {"12.80", false}}) {
    absl::Status status = CheckRequiredRelease(toolchain, c.required);
    EXPECT_EQ(status.ok(), c.ok) << c.required << ": " << status;
  }
}

TEST(RequiredReleaseTest, MismatchNamesWhatWasFoundWhereAndHowToFixIt) {
  absl::Status status = CheckRequiredRelease(Found("13.0", "13.0.88"), "12.8");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("nvcc 12.8 is required"));
  EXPECT_THAT(status.message(), HasSubstr("/usr/local/cuda/bin/nvcc is release 13.0 (V13.0.88"));
  EXPECT_THAT(status.message(), HasSubstr("--nvcc"));
  EXPECT_THAT(status.message(), HasSubstr("CUDA_HOME"));
}

TEST(RequiredReleaseTest, MalformedRequirementIsRejected) {
  for (const char* bad : {"12", "cuda-12.8", "12.8.x", "twelve"}) {
    absl::Status status = CheckRequiredRelease(Found("12.8", "12.8.93"), bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("write it as 12.8")) << bad;
  }
}

TEST(ToolchainFingerprintTest, ReadsReleaseVersionAndPathAndDiffersByRelease) {
  std::string dir = testing::NewTempDir("toolchain-");
  auto a = ComputeToolchainFingerprint(testing::FakeNvccWithRelease(dir, "12.8"));
  auto b = ComputeToolchainFingerprint(testing::FakeNvccWithRelease(dir, "13.1"));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->nvcc_release(), "12.8");
  EXPECT_EQ(a->nvcc_version(), "12.8.0");
  EXPECT_EQ(a->nvcc_build(), "fake_cuda_12.8");
  EXPECT_EQ(a->nvcc_path(), dir + "/cuda-12.8/bin/nvcc");
  EXPECT_NE(a->digest(), b->digest());
  EXPECT_TRUE(CheckRequiredRelease(*a, "12.8").ok());
  EXPECT_FALSE(CheckRequiredRelease(*b, "12.8").ok());
}

// Some images put `exec /usr/local/cuda-13.0/bin/nvcc "$@"` in
// /usr/local/bin/nvcc. A launcher that finds that wrapper first on PATH must
// fingerprint the same toolkit as a worker given the real nvcc, or no worker
// takes its units.
TEST(ToolchainFingerprintTest, AWrapperScriptHasTheFingerprintOfTheToolkitItRuns) {
  const std::string nvcc = testing::RealNvccPath();
  if (nvcc.empty()) GTEST_SKIP() << "needs a real nvcc at /usr/local/cuda/bin/nvcc";
  std::string dir = testing::NewTempDir("toolchain-wrapper-");
  const std::string wrapper = testing::WriteNvccWrapper(dir + "/bin/nvcc", nvcc);
  auto real = ComputeToolchainFingerprint(nvcc);
  auto wrapped = ComputeToolchainFingerprint(wrapper);
  ASSERT_TRUE(real.ok()) << real.status();
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  EXPECT_NE(wrapped->cicc_sha256(), "missing");
  EXPECT_EQ(wrapped->cicc_sha256(), real->cicc_sha256());
  EXPECT_EQ(wrapped->nvcc_sha256(), real->nvcc_sha256());
  EXPECT_EQ(wrapped->digest(), real->digest());
  EXPECT_EQ(wrapped->nvcc_path(), wrapper) << "the path is the one the user named";
}

TEST(ToolchainFingerprintTest, HashesAreRememberedUntilAToolkitFileChanges) {
  std::string dir = testing::NewTempDir("toolchain-cache-");
  const std::string nvcc = testing::FakeNvccWithRelease(dir, "12.8");
  const std::string cicc = dir + "/cuda-12.8/nvvm/bin/cicc";
  ASSERT_TRUE(WriteFileAtomically(cicc, "cicc one").ok());
  const std::string cache = dir + "/cache";
  auto first = ComputeToolchainFingerprint(nvcc, "g++", cache);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->cicc_sha256(), DigestOf("cicc one").hash);
  // What is read back is the remembered hash: replace it in the cache file.
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(cache)) {
    files.push_back(entry.path().string());
  }
  ASSERT_EQ(files.size(), 1u);
  absl::StatusOr<std::string> text = ReadFile(files[0]);
  ASSERT_TRUE(text.ok());
  std::string edited = *text;
  edited.replace(edited.find(first->cicc_sha256()), 64, std::string(64, 'a'));
  ASSERT_TRUE(WriteFileAtomically(files[0], edited).ok());
  auto second = ComputeToolchainFingerprint(nvcc, "g++", cache);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->cicc_sha256(), std::string(64, 'a')) << "the hashes were computed again";
  // A toolkit file changed: its signature differs, so it is hashed again.
  ASSERT_TRUE(WriteFileAtomically(cicc, "cicc two").ok());
  auto third = ComputeToolchainFingerprint(nvcc, "g++", cache);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->cicc_sha256(), DigestOf("cicc two").hash);
  EXPECT_NE(third->digest(), first->digest());
  // Without a cache folder nothing is remembered.
  EXPECT_EQ(ComputeToolchainFingerprint(nvcc)->cicc_sha256(), DigestOf("cicc two").hash);
}

// How many lines of `log` equal `line`.
int Lines(const std::string& log, const std::string& line) {
  absl::StatusOr<std::string> text = ReadFile(log);
  int count = 0;
  for (absl::string_view got : absl::StrSplit(text.ok() ? *text : "", '\n')) count += got == line;
  return count;
}

// The embedded worker and the build's client fingerprint the same nvcc in one
// process: asked together or one after the other, nvcc and the host compiler
// answer once, until one of them is replaced.
TEST(ToolchainFingerprintTest, SharedOnceAProcessUntilNvccOrTheHostCompilerChanges) {
  std::string dir = testing::NewTempDir("toolchain-shared-");
  const std::string log = dir + "/calls.log";
  const std::string fake = testing::FakeNvccWithRelease(dir, "12.8");
  const std::string nvcc =
      testing::WriteNvccWrapper(dir + "/bin/nvcc", fake, "echo \"nvcc $*\" >> " + log + "\n");
  const std::string host = dir + "/bin/g++";
  auto write_host = [&](const std::string& version) {
    ASSERT_TRUE(WriteFileAtomically(host, absl::StrCat("#!/bin/sh\necho \"g++ $*\" >> ", log,
                                                       "\necho 'g++ (fake) ", version, "'\n"))
                    .ok());
    ASSERT_EQ(chmod(host.c_str(), 0755), 0);
  };
  write_host("12.2.0");

  std::vector<absl::StatusOr<v1::ToolchainFingerprint>> together(8);
  {
    std::vector<std::thread> threads;
    for (auto& result : together) {
      threads.emplace_back([&] { result = SharedToolchainFingerprint(nvcc, host, ""); });
    }
    for (std::thread& thread : threads) thread.join();
  }
  for (const auto& result : together) {
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->digest(), together[0]->digest());
    EXPECT_EQ(result->host_compiler(), "g++ (fake) 12.2.0");
  }
  EXPECT_EQ(Lines(log, "nvcc --version"), 1) << "8 callers at once, one nvcc --version";
  EXPECT_EQ(Lines(log, "g++ --version"), 1);
  ASSERT_TRUE(SharedToolchainFingerprint(nvcc, host, "").ok());
  EXPECT_EQ(Lines(log, "nvcc --version"), 1) << "remembered";

  write_host("13.1.0");  // a new host compiler (a new file at the same path)
  auto upgraded = SharedToolchainFingerprint(nvcc, host, "");
  ASSERT_TRUE(upgraded.ok()) << upgraded.status();
  EXPECT_EQ(upgraded->host_compiler(), "g++ (fake) 13.1.0");
  EXPECT_NE(upgraded->digest(), together[0]->digest());
  EXPECT_EQ(Lines(log, "g++ --version"), 2);
  EXPECT_EQ(Lines(log, "nvcc --version"), 2) << "the whole fingerprint is taken again";

  // nvcc replaced by another release.
  testing::WriteNvccWrapper(nvcc, testing::FakeNvccWithRelease(dir, "13.1"),
                            "echo \"nvcc $*\" >> " + log + "\n");
  auto replaced = SharedToolchainFingerprint(nvcc, host, "");
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_EQ(replaced->nvcc_release(), "13.1");
  EXPECT_EQ(Lines(log, "nvcc --version"), 3);

  // ComputeToolchainFingerprint itself asks every time.
  ASSERT_TRUE(ComputeToolchainFingerprint(nvcc, host, "").ok());
  EXPECT_EQ(Lines(log, "nvcc --version"), 4);
}

TEST(ToolchainFingerprintTest, AFailedFingerprintIsNotShared) {
  std::string dir = testing::NewTempDir("toolchain-shared-failure-");
  const std::string nvcc = dir + "/bin/nvcc";
  ASSERT_TRUE(WriteFileAtomically(nvcc, "#!/bin/sh\necho 'no release here'\n").ok());
  ASSERT_EQ(chmod(nvcc.c_str(), 0755), 0);
  auto broken = SharedToolchainFingerprint(nvcc, "g++", "");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kFailedPrecondition);
  testing::WriteNvccWrapper(nvcc, testing::FakeNvccWithRelease(dir, "12.8"));
  auto mended = SharedToolchainFingerprint(nvcc, "g++", "");
  ASSERT_TRUE(mended.ok()) << mended.status();
  EXPECT_EQ(mended->nvcc_release(), "12.8");
}

TEST(ToolchainFingerprintTest, MissingNvccIsNamed) {
  auto missing = ComputeToolchainFingerprint("/nonexistent/bin/nvcc");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/bin/nvcc"));
}

}  // namespace
}  // namespace distcc_cuda
