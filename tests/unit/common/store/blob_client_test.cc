// SPDX-License-Identifier: Apache-2.0
// BlobClient's downloads against a store that sends what it likes: no
// download takes more bytes than the digest says, whatever the protocol.
#include "common/store/blob_client.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/store/cas_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A store whose every read sends `chunks`, and counts what it sent.
class ScriptedBlobClient : public BlobClient {
 public:
  explicit ScriptedBlobClient(std::vector<std::string> chunks)
      : BlobClient(absl::Seconds(10)), chunks_(std::move(chunks)) {}
  absl::StatusOr<std::vector<Digest>> FindMissing(const std::vector<Digest>&) override {
    return std::vector<Digest>();
  }
  int chunks_taken() const { return taken_; }

 private:
  absl::Status UploadBatch(const std::vector<const BlobSource*>&) override {
    return absl::OkStatus();
  }
  absl::Status UploadStreamed(const BlobSource&) override { return absl::OkStatus(); }
  absl::Status Read(const Digest&,
                    const std::function<absl::Status(absl::string_view)>& sink) override {
    for (const std::string& chunk : chunks_) {
      ++taken_;
      if (absl::Status taken = sink(chunk); !taken.ok()) return taken;
    }
    return absl::OkStatus();
  }

  std::vector<std::string> chunks_;
  int taken_ = 0;
};

const std::string kBlob = "sixteen bytes ok";

TEST(BlobClientTest, ABlobOfTheDigestsSizeDownloadsEveryWay) {
  const std::string dir = testing::NewTempDir("blob-client-");
  ScriptedBlobClient client({"sixteen ", "bytes ok"});
  absl::StatusOr<std::string> bytes = client.DownloadBytes(DigestOf(kBlob));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, kBlob);
  ASSERT_TRUE(client.DownloadToFile(DigestOf(kBlob), dir + "/out").ok());
  EXPECT_TRUE(fs::exists(dir + "/out"));
  auto store = CasStore::Open(dir + "/cas");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(client.DownloadToStore(DigestOf(kBlob), **store).ok());
  EXPECT_TRUE((*store)->Contains(DigestOf(kBlob)));
}

TEST(BlobClientTest, AStoreThatSendsMoreThanTheDigestSaysIsStoppedAtOnce) {
  const std::string dir = testing::NewTempDir("blob-client-");
  // The blob's bytes, then a flood that would never end.
  std::vector<std::string> flood = {kBlob};
  for (int i = 0; i < 1000; ++i) flood.push_back(std::string(1 << 10, 'x'));
  auto store = CasStore::Open(dir + "/cas");
  ASSERT_TRUE(store.ok()) << store.status();
  {
    ScriptedBlobClient client(flood);
    absl::StatusOr<std::string> bytes = client.DownloadBytes(DigestOf(kBlob));
    ASSERT_FALSE(bytes.ok());
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(bytes.status().message(), HasSubstr("sent more than the 16 bytes"));
    // The first chunk past the size ends the read.
    EXPECT_EQ(client.chunks_taken(), 2);
  }
  {
    ScriptedBlobClient client(flood);
    absl::Status written = client.DownloadToFile(DigestOf(kBlob), dir + "/out");
    EXPECT_EQ(written.code(), absl::StatusCode::kDataLoss) << written;
    EXPECT_FALSE(fs::exists(dir + "/out"));
    EXPECT_FALSE(fs::exists(dir + "/out.part"));
    EXPECT_EQ(client.chunks_taken(), 2);
  }
  {
    ScriptedBlobClient client(flood);
    absl::Status stored = client.DownloadToStore(DigestOf(kBlob), **store);
    EXPECT_EQ(stored.code(), absl::StatusCode::kDataLoss) << stored;
    EXPECT_FALSE((*store)->Contains(DigestOf(kBlob)));
    EXPECT_EQ(client.chunks_taken(), 2);
  }
}

}  // namespace
}  // namespace distcc_cuda
