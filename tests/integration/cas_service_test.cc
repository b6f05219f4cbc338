// SPDX-License-Identifier: Apache-2.0
// The ContentStore service over real gRPC on 127.0.0.1:0.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/store/cas_client.h"
#include "common/store/cas_store.h"
#include "coordinator/coordinator.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

class CasServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator::CoordinatorOptions options;
    options.state_dir = testing::NewTempDir("cas-service-");
    auto started = coordinator::Coordinator::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(*started);
    channel_ = grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials());
    stub_ = v1::ContentStore::NewStub(channel_);
    client_ = std::make_unique<CasClient>(
        std::shared_ptr<v1::ContentStore::StubInterface>(v1::ContentStore::NewStub(channel_)));
  }

  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ContentStore::Stub> stub_;
  std::unique_ptr<CasClient> client_;
};

std::string Pattern(size_t size) {
  std::string data(size, '\0');
  for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>((i * 131) ^ (i >> 11));
  return data;
}

TEST_F(CasServiceTest, UploadsOnlyWhatIsMissingAndReadsBack) {
  std::string small = "small blob";
  std::string large = Pattern((3 << 20) + 12345);  // streamed in 4 chunks
  std::vector<BlobSource> blobs = {{DigestOf(small), "", small}, {DigestOf(large), "", large}};
  absl::StatusOr<int> sent = client_->UploadMissing(blobs);
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(*sent, 2);
  sent = client_->UploadMissing(blobs);
  ASSERT_TRUE(sent.ok());
  EXPECT_EQ(*sent, 0) << "the second upload finds both blobs present";
  absl::StatusOr<std::string> back = client_->DownloadBytes(DigestOf(large));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, large);
  std::string file = testing::NewTempDir("cas-download-") + "/large.bin";
  ASSERT_TRUE(client_->DownloadToFile(DigestOf(large), file).ok());
  EXPECT_EQ(*ReadFile(file), large);
}

// A batch of more tiny blobs than the store's disk should take at once (a
// hostile client's 60,000 took 376 MB): the blobs within kMaxBatchDiskBytes
// are stored, the rest refused saying why, and the client's own upload of
// as many goes through in batches the store takes.
TEST_F(CasServiceTest, ABatchOfMoreTinyBlobsThanItsDiskBoundStoresOnlyThoseWithin) {
  const int within = static_cast<int>(kMaxBatchDiskBytes / BlobDiskCost(80));
  std::vector<std::string> contents;
  for (int i = 0; i < within + 200; ++i) {
    contents.push_back(absl::StrCat(std::string(70, 'x'), 1000000 + i));
  }
  v1::BatchUpdateBlobsRequest request;
  for (const std::string& content : contents) {
    auto* blob = request.add_blobs();
    *blob->mutable_digest() = ToProto(DigestOf(content));
    blob->set_data(content);
  }
  v1::BatchUpdateBlobsResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub_->BatchUpdateBlobs(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.results_size(), within + 200);
  for (int i = 0; i < within + 200; ++i) {
    const auto& result = response.results(i);
    if (i < within) {
      ASSERT_EQ(result.code(), 0) << i << ": " << result.message();
      continue;
    }
    ASSERT_EQ(result.code(), static_cast<int>(absl::StatusCode::kResourceExhausted)) << i;
    EXPECT_THAT(result.message(), HasSubstr("would take more than 128 MiB of the store's disk"));
  }
  // The client's own upload sends them in batches the store takes: the 200
  // refused, and as many again new.
  std::vector<BlobSource> blobs;
  for (const std::string& content : contents) blobs.push_back({DigestOf(content), "", content});
  for (int i = 0; i < within; ++i) {
    const std::string content = absl::StrCat(std::string(70, 'y'), 1000000 + i);
    blobs.push_back({DigestOf(content), "", content});
  }
  absl::StatusOr<int> sent = client_->UploadMissing(blobs);
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(*sent, within + 200);
}

TEST_F(CasServiceTest, BatchBlobWhoseContentDoesNotMatchIsRejected) {
  v1::BatchUpdateBlobsRequest request;
  auto* blob = request.add_blobs();
  *blob->mutable_digest() = ToProto(DigestOf("the real content"));
  blob->set_data("tampered content");
  v1::BatchUpdateBlobsResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->BatchUpdateBlobs(&context, request, &response).ok());
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_EQ(response.results(0).code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(response.results(0).message(), HasSubstr("does not match"));
  absl::StatusOr<std::vector<Digest>> missing =
      client_->FindMissing({DigestOf("the real content")});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->size(), 1u) << "a rejected blob must not be stored";
}

TEST_F(CasServiceTest, StreamedBlobWhoseContentDoesNotMatchIsRejected) {
  std::string real = Pattern(2 << 20);
  std::string tampered = real;
  tampered[1 << 20] ^= 1;
  absl::StatusOr<int> sent = client_->UploadMissing({{DigestOf(real), "", tampered}});
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sent.status().message(), HasSubstr("does not match"));
  absl::StatusOr<std::vector<Digest>> missing = client_->FindMissing({DigestOf(real)});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->size(), 1u);
}

TEST_F(CasServiceTest, ChunkLargerThanOneMebibyteIsRejected) {
  std::string data = Pattern((1 << 20) + 1);
  grpc::ClientContext context;
  v1::WriteBlobResponse response;
  auto writer = stub_->WriteBlob(&context, &response);
  v1::WriteBlobRequest request;
  *request.mutable_digest() = ToProto(DigestOf(data));
  request.set_data(data);
  writer->Write(request);
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("1 MiB"));
}

TEST_F(CasServiceTest, ReadingAMissingBlobIsNotFound) {
  absl::StatusOr<std::string> got = client_->DownloadBytes(DigestOf("never stored"));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CasServiceTest, MalformedDigestIsInvalidArgument) {
  absl::StatusOr<std::vector<Digest>> missing = client_->FindMissing({Digest{"xyz", 3}});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
}

// A batch is stored as a batch (CasStore::PutMany); each blob's digest is
// still checked before it names a file: a malformed one is refused on its
// own, writes nothing anywhere, and does not cost the good blobs beside it.
TEST_F(CasServiceTest, BatchBlobsWithMalformedDigestsAreRefusedOneByOne) {
  const std::string good = "a good blob";
  const std::string sha = DigestOf(good).hash;
  std::string upper = sha;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  struct Bad {
    std::string hash;
    int64_t size;
  };
  const std::vector<Bad> bad = {
      {"../../escaped", static_cast<int64_t>(good.size())},
      {"/tmp/absolute", static_cast<int64_t>(good.size())},
      {sha.substr(0, 63), static_cast<int64_t>(good.size())},
      {sha + "0", static_cast<int64_t>(good.size())},
      {upper, static_cast<int64_t>(good.size())},
      {std::string(64, 'g'), static_cast<int64_t>(good.size())},
      {"", static_cast<int64_t>(good.size())},
      {sha, -1},
  };
  v1::BatchUpdateBlobsRequest request;
  for (const Bad& b : bad) {
    auto* blob = request.add_blobs();
    blob->mutable_digest()->set_hash(b.hash);
    blob->mutable_digest()->set_size_bytes(b.size);
    blob->set_data(good);
  }
  auto* fine = request.add_blobs();
  *fine->mutable_digest() = ToProto(DigestOf(good));
  fine->set_data(good);
  v1::BatchUpdateBlobsResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->BatchUpdateBlobs(&context, request, &response).ok());
  ASSERT_EQ(response.results_size(), static_cast<int>(bad.size()) + 1);
  for (size_t i = 0; i < bad.size(); ++i) {
    EXPECT_EQ(response.results(i).code(), static_cast<int>(absl::StatusCode::kInvalidArgument))
        << "'" << bad[i].hash << "' size " << bad[i].size;
  }
  EXPECT_EQ(response.results(bad.size()).code(), 0) << response.results(bad.size()).message();
  absl::StatusOr<std::vector<Digest>> missing = client_->FindMissing({DigestOf(good)});
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_TRUE(missing->empty()) << "the good blob is stored";
  EXPECT_FALSE(std::filesystem::exists("/tmp/absolute")) << "nothing written where a hash pointed";
}

}  // namespace
}  // namespace distcc_cuda

namespace distcc_cuda {
namespace {

// --max-blob-size: a blob above it is refused by size, before any of its
// bytes are stored, streamed or batched.
TEST(CasServiceLimitTest, BlobAboveTheLimitIsRefusedNamingIt) {
  coordinator::CoordinatorOptions options;
  options.state_dir = testing::NewTempDir("cas-limit-");
  options.max_blob_bytes = 1000;
  auto started = coordinator::Coordinator::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  auto channel = grpc::CreateChannel((*started)->address(), grpc::InsecureChannelCredentials());
  CasClient client(
      std::shared_ptr<v1::ContentStore::StubInterface>(v1::ContentStore::NewStub(channel)));
  std::string small(1000, 's');
  std::string batched(1001, 'b');
  std::string streamed((3 << 20), 'x');  // past the batch size: streamed
  EXPECT_TRUE(client.UploadMissing({{DigestOf(small), "", small}}).ok());
  for (const std::string* blob : {&batched, &streamed}) {
    absl::StatusOr<int> sent = client.UploadMissing({{DigestOf(*blob), "", *blob}});
    ASSERT_FALSE(sent.ok()) << blob->size();
    EXPECT_THAT(sent.status().message(), HasSubstr("--max-blob-size")) << blob->size();
    absl::StatusOr<std::vector<Digest>> missing = client.FindMissing({DigestOf(*blob)});
    ASSERT_TRUE(missing.ok());
    EXPECT_EQ(missing->size(), 1u) << "nothing of it was stored";
  }
}

}  // namespace
}  // namespace distcc_cuda
