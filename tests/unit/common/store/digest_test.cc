// SPDX-License-Identifier: Apache-2.0
#include "common/store/digest.h"

#include <cstdint>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

constexpr char kEmptySha256[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr char kAbcSha256[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  ASSERT_TRUE(out.good()) << path;
}

struct VectorCase {
  std::string name;
  std::string data;
  std::string sha256;
};

// Test vectors from FIPS 180-2.
std::vector<VectorCase> Vectors() {
  return {
      {"Empty", "", kEmptySha256},
      {"Abc", "abc", kAbcSha256},
      {"TwoBlocks", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"MillionA", std::string(1000000, 'a'),
       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
}

void PrintTo(const VectorCase& c, std::ostream* os) { *os << c.name; }

class DigestVectorTest : public ::testing::TestWithParam<VectorCase> {};

TEST_P(DigestVectorTest, DigestOfGivesKnownHashAndSize) {
  Digest digest = DigestOf(GetParam().data);
  EXPECT_EQ(digest.hash, GetParam().sha256);
  EXPECT_EQ(digest.size_bytes, static_cast<int64_t>(GetParam().data.size()));
}

TEST_P(DigestVectorTest, Sha256InPiecesMatchesOneShot) {
  const std::string& data = GetParam().data;
  Sha256 sha;
  // Uneven pieces that straddle the 64-byte block boundary.
  for (size_t i = 0; i < data.size(); i += 37) sha.Update(absl::string_view(data).substr(i, 37));
  EXPECT_EQ(sha.FinishHex(), GetParam().sha256);
}

TEST_P(DigestVectorTest, DigestOfFileEqualsDigestOfContent) {
  std::string path = testing::NewTempDir("digest") + "/blob";
  WriteFile(path, GetParam().data);
  absl::StatusOr<Digest> digest = DigestOfFile(path);
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_EQ(*digest, DigestOf(GetParam().data));
}

INSTANTIATE_TEST_SUITE_P(Fips180, DigestVectorTest, ::testing::ValuesIn(Vectors()),
                         [](const ::testing::TestParamInfo<VectorCase>& info) {
                           return info.param.name;
                         });

TEST(DigestOfFileTest, FileLargerThanOneReadChunk) {
  // Larger than the 64 KiB read buffer and not a multiple of it.
  std::string content;
  for (int i = 0; i < 200001; ++i) content.push_back(static_cast<char>(i * 31 % 251));
  std::string path = testing::NewTempDir("digest") + "/big";
  WriteFile(path, content);
  absl::StatusOr<Digest> digest = DigestOfFile(path);
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_EQ(*digest, DigestOf(content));
}

TEST(DigestOfFileTest, BinaryContentWithNulBytes) {
  std::string content("a\0b\0\0c\xff", 7);
  std::string path = testing::NewTempDir("digest") + "/binary";
  WriteFile(path, content);
  absl::StatusOr<Digest> digest = DigestOfFile(path);
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_EQ(digest->size_bytes, 7);
  EXPECT_EQ(*digest, DigestOf(content));
}

TEST(DigestOfFileTest, MissingFileIsNotFound) {
  std::string path = testing::NewTempDir("digest") + "/missing";
  absl::StatusOr<Digest> digest = DigestOfFile(path);
  ASSERT_FALSE(digest.ok());
  EXPECT_EQ(digest.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(digest.status().message(), HasSubstr(path));
}

TEST(DigestTest, ToStringIsHashSlashSize) {
  EXPECT_EQ(DigestOf("abc").ToString(), std::string(kAbcSha256) + "/3");
}

TEST(DigestTest, EqualityComparesHashAndSize) {
  EXPECT_EQ(DigestOf("abc"), (Digest{kAbcSha256, 3}));
  EXPECT_NE(DigestOf("abc"), (Digest{kAbcSha256, 4}));
  EXPECT_NE(DigestOf("abc"), DigestOf("abd"));
}

TEST(DigestTest, OrdersByHashThenSize) {
  Digest a{std::string(64, 'a'), 9};
  Digest b{std::string(64, 'b'), 1};
  EXPECT_LT(a, b);
  EXPECT_FALSE(b < a);
  EXPECT_LT((Digest{a.hash, 1}), (Digest{a.hash, 2}));
  EXPECT_FALSE(a < a);
}

TEST(DigestTest, ProtoRoundTrip) {
  Digest digest = DigestOf("abc");
  v1::Digest proto = ToProto(digest);
  EXPECT_EQ(proto.hash(), kAbcSha256);
  EXPECT_EQ(proto.size_bytes(), 3);
  EXPECT_EQ(FromProto(proto), digest);
}

struct ValidateCase {
  std::string name;
  Digest digest;
  bool ok;
};

void PrintTo(const ValidateCase& c, std::ostream* os) { *os << c.name; }

class ValidateDigestTest : public ::testing::TestWithParam<ValidateCase> {};

TEST_P(ValidateDigestTest, AcceptsOnlyWellFormed) {
  absl::Status status = ValidateDigest(GetParam().digest);
  if (GetParam().ok) {
    EXPECT_TRUE(status.ok()) << status;
  } else {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_FALSE(status.message().empty());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ValidateDigestTest,
    ::testing::Values(ValidateCase{"Abc", {kAbcSha256, 3}, true},
                      ValidateCase{"EmptyBlob", {kEmptySha256, 0}, true},
                      ValidateCase{"AllDigits", {std::string(64, '0'), 1}, true},
                      ValidateCase{"LargeSize", {kAbcSha256, int64_t{1} << 40}, true},
                      ValidateCase{"EmptyHash", {"", 0}, false},
                      ValidateCase{"Short", {std::string(63, 'a'), 1}, false},
                      ValidateCase{"Long", {std::string(65, 'a'), 1}, false},
                      ValidateCase{
                          "Uppercase",
                          {"BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD", 3},
                          false},
                      ValidateCase{"NotHex", {std::string(63, 'a') + "g", 1}, false},
                      ValidateCase{"PathTraversal", {"../" + std::string(61, 'a'), 1}, false},
                      ValidateCase{"NegativeSize", {kAbcSha256, -1}, false}),
    [](const ::testing::TestParamInfo<ValidateCase>& info) { return info.param.name; });

}  // namespace
}  // namespace distcc_cuda
