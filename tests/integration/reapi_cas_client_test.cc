// SPDX-License-Identifier: Apache-2.0
// ReapiCasClient, the client a bot fetches inputs and uploads outputs with,
// against a real REAPI content store on loopback (the coordinator's): small
// blobs in batches, large ones through ByteStream in chunks, downloads
// checked against their digests, and message blobs read within bounds.
#include "common/reapi/reapi_cas_client.h"

#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/store/cas_store.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "google/bytestream/bytestream.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

class ReapiCasClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::NewTempDir("reapi-cas-client-");
    coordinator::CoordinatorOptions options;
    options.state_dir = root_ + "/coordinator";
    options.reapi_listen = "127.0.0.1:0";
    auto started = coordinator::Coordinator::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(*started);
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", coordinator_->reapi_port()),
                                       grpc::InsecureChannelCredentials());
    client_ = std::make_unique<ReapiCasClient>(channel, "bots/main");
    auto store = CasStore::Open(root_ + "/local", 0);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  // ByteStream.Read of `digest` from `offset`, at most `limit` bytes.
  grpc::Status ReadWindow(const Digest& digest, int64_t offset, int64_t limit, std::string& out) {
    google::bytestream::ReadRequest request;
    request.set_resource_name(absl::StrCat("main/blobs/", digest.hash, "/", digest.size_bytes));
    request.set_read_offset(offset);
    request.set_read_limit(limit);
    grpc::ClientContext context;
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", coordinator_->reapi_port()),
                                       grpc::InsecureChannelCredentials());
    auto stream = google::bytestream::ByteStream::NewStub(channel)->Read(&context, request);
    out.clear();
    google::bytestream::ReadResponse chunk;
    while (stream->Read(&chunk)) out += chunk.data();
    return stream->Finish();
  }

  std::string root_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::unique_ptr<ReapiCasClient> client_;
  std::unique_ptr<CasStore> store_;
};

TEST_F(ReapiCasClientTest, UploadsWhatIsMissingAndDownloadsItBack) {
  const std::string small = "__global__ void k() {}\n";
  // Over one chunk: streamed through ByteStream.Write in three.
  std::string large(int64_t{2} * kMaxChunkBytes + 12345, 'x');
  for (size_t i = 0; i < large.size(); i += 4096) large[i] = static_cast<char>('a' + i % 26);
  const std::string file = root_ + "/large.bin";
  {
    std::ofstream out(file, std::ios::binary);
    out << large;
  }
  absl::StatusOr<std::vector<Digest>> before =
      client_->FindMissing({DigestOf(small), DigestOf(large)});
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->size(), 2u);

  absl::StatusOr<int> sent = client_->UploadMissing(
      {BlobSource{DigestOf(small), "", small}, BlobSource{DigestOf(large), file, ""}});
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(*sent, 2);
  absl::StatusOr<std::vector<Digest>> after =
      client_->FindMissing({DigestOf(small), DigestOf(large)});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_THAT(*after, IsEmpty());
  // Nothing is sent twice.
  absl::StatusOr<int> again = client_->UploadMissing({BlobSource{DigestOf(small), "", small}});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, 0);

  absl::StatusOr<std::string> bytes = client_->DownloadBytes(DigestOf(small));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, small);
  ASSERT_TRUE(client_->DownloadToStore(DigestOf(large), *store_).ok());
  absl::StatusOr<std::string> stored = store_->Get(DigestOf(large));
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(*stored, large);
}

TEST_F(ReapiCasClientTest, AFileShorterThanItsDigestIsDataLossNotABlob) {
  const std::string content = std::string(kMaxChunkBytes + 10, 'y');
  const std::string file = root_ + "/shrunk.bin";
  {
    std::ofstream out(file, std::ios::binary);
    out << content.substr(0, 100);
  }
  absl::StatusOr<int> sent = client_->UploadMissing({BlobSource{DigestOf(content), file, ""}});
  ASSERT_FALSE(sent.ok());
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kDataLoss) << sent.status();
  absl::StatusOr<std::vector<Digest>> missing = client_->FindMissing({DigestOf(content)});
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_EQ(missing->size(), 1u);
}

TEST_F(ReapiCasClientTest, ReadsAMessageBlobAndRefusesWhatIsNotOne) {
  reapi::Command command;
  command.add_arguments("/usr/local/cuda/bin/nvcc");
  command.add_output_files("k.o");
  const std::string serialized = command.SerializeAsString();
  const std::string garbage = "\xff\xff\xff\xff not a message";
  ASSERT_TRUE(client_
                  ->UploadMissing({BlobSource{DigestOf(serialized), "", serialized},
                                   BlobSource{DigestOf(garbage), "", garbage}})
                  .ok());

  reapi::Command read;
  ASSERT_TRUE(
      client_->ReadMessage(ToReapi(DigestOf(serialized)), "the command", *store_, read).ok());
  EXPECT_EQ(read.arguments(0), "/usr/local/cuda/bin/nvcc");

  absl::Status bad = client_->ReadMessage(ToReapi(DigestOf(garbage)), "the command", *store_, read);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_THAT(bad.message(), HasSubstr("is not a build.bazel.remote.execution.v2.Command"));

  absl::Status missing =
      client_->ReadMessage(ToReapi(DigestOf("never uploaded")), "the command", *store_, read);
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition) << missing;
  EXPECT_TRUE(NamesMissingBlobs(missing)) << missing;
  EXPECT_THAT(missing.message(), HasSubstr("the engine lacks the command"));

  reapi::Digest huge = ToReapi(DigestOf("x"));
  huge.set_size_bytes(int64_t{64} << 20);
  absl::Status too_large = client_->ReadMessage(huge, "the command", *store_, read);
  EXPECT_EQ(too_large.code(), absl::StatusCode::kInvalidArgument) << too_large;
  EXPECT_THAT(too_large.message(), HasSubstr("the most one may be is"));
}

TEST_F(ReapiCasClientTest, AByteStreamReadResumesFromAnOffsetWithinALimit) {
  std::string blob(int64_t{2} * kMaxChunkBytes + 777, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 7 % 251);
  ASSERT_TRUE(client_->UploadMissing({BlobSource{DigestOf(blob), "", blob}}).ok());
  const Digest digest = DigestOf(blob);
  std::string got;
  // A download broken off after 1.5 MiB asks for the rest.
  const int64_t resume = kMaxChunkBytes + kMaxChunkBytes / 2;
  grpc::Status tail = ReadWindow(digest, resume, 0, got);
  ASSERT_TRUE(tail.ok()) << tail.error_message();
  EXPECT_EQ(got, blob.substr(resume));
  grpc::Status window = ReadWindow(digest, 1000, 5000, got);
  ASSERT_TRUE(window.ok()) << window.error_message();
  EXPECT_EQ(got, blob.substr(1000, 5000));
  grpc::Status whole = ReadWindow(digest, 0, 0, got);
  ASSERT_TRUE(whole.ok()) << whole.error_message();
  EXPECT_EQ(got, blob);

  grpc::Status past = ReadWindow(digest, digest.size_bytes + 1, 0, got);
  EXPECT_EQ(past.error_code(), grpc::StatusCode::OUT_OF_RANGE) << past.error_message();
  EXPECT_TRUE(got.empty());
  grpc::Status negative = ReadWindow(digest, 0, -1, got);
  EXPECT_EQ(negative.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << negative.error_message();
}

TEST_F(ReapiCasClientTest, AWindowOfABlobDamagedOnDiskIsNotSentToItsEnd) {
  std::string blob(kMaxChunkBytes + 4096, 'z');
  ASSERT_TRUE(client_->UploadMissing({BlobSource{DigestOf(blob), "", blob}}).ok());
  const Digest digest = DigestOf(blob);
  std::string got;
  // Read once whole: verified, then damaged behind the coordinator's back.
  ASSERT_TRUE(ReadWindow(digest, 0, 0, got).ok());
  const std::string path = absl::StrCat(root_, "/coordinator/cas/", digest.hash.substr(0, 2), "/",
                                        digest.hash, "_", digest.size_bytes);
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  std::filesystem::permissions(path, std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);
  {
    std::fstream damage(path, std::ios::in | std::ios::out | std::ios::binary);
    damage.seekp(static_cast<std::streamoff>(blob.size()) - 10);
    damage.put('!');
  }
  // The window ends before the damage; the rest is hashed all the same.
  grpc::Status window = ReadWindow(digest, 0, 100, got);
  EXPECT_EQ(window.error_code(), grpc::StatusCode::DATA_LOSS) << window.error_message();
  EXPECT_TRUE(got.empty());
}

}  // namespace
}  // namespace distcc_cuda
