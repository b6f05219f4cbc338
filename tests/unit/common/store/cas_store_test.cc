// SPDX-License-Identifier: Apache-2.0
#include "common/store/cas_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  ASSERT_TRUE(out.good()) << path;
}

// Every regular file under `dir`, temporaries included.
std::vector<std::string> FilesUnder(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path().string());
  }
  return files;
}

class CasStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::NewTempDir("cas_store");
    absl::StatusOr<std::unique_ptr<CasStore>> store = CasStore::Open(dir_ + "/cas");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  std::string dir_;
  std::unique_ptr<CasStore> store_;
};

TEST_F(CasStoreTest, OpenCreatesTheRootFolder) {
  EXPECT_TRUE(fs::is_directory(dir_ + "/cas"));
  EXPECT_EQ(store_->root(), dir_ + "/cas");
}

TEST_F(CasStoreTest, OpenMakesRelativeRootAbsolute) {
  std::string cwd = fs::current_path().string();
  fs::current_path(dir_);
  absl::StatusOr<std::unique_ptr<CasStore>> store = CasStore::Open("relative/cas");
  fs::current_path(cwd);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->root(), dir_ + "/relative/cas");
}

// A batch as BatchUpdateBlobs stores it, over more than one group of open
// files: each blob gets its own verdict in order, the good ones are stored
// read-only, counted once and seen by a store opened again; a wrong one is
// refused naming both digests and leaves nothing behind, not even a
// temporary file; one already held or given twice is fine.
TEST_F(CasStoreTest, PutManyStoresEachBlobWithItsOwnVerdict) {
  ASSERT_TRUE(store_->Put(DigestOf("held"), "held").ok());
  std::vector<std::string> contents;
  for (int i = 0; i < 600; ++i) contents.push_back("folder " + std::to_string(i));
  std::vector<std::pair<Digest, absl::string_view>> batch;
  for (const std::string& content : contents) batch.emplace_back(DigestOf(content), content);
  batch.emplace_back(DigestOf("held"), "held");
  batch.emplace_back(DigestOf("folder 7"), "folder 7");  // twice in one batch
  batch.emplace_back(DigestOf("claimed"), "not what was claimed");
  batch.emplace_back(DigestOf("held"), "held, but other bytes");
  std::vector<absl::Status> results = store_->PutMany(batch);
  ASSERT_EQ(results.size(), batch.size());
  for (size_t i = 0; i < 602; ++i) EXPECT_TRUE(results[i].ok()) << i << ": " << results[i];
  EXPECT_EQ(results[602].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(results[602].message()), HasSubstr(DigestOf("claimed").hash));
  EXPECT_EQ(results[603].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(store_->Contains(DigestOf("claimed")));
  int64_t bytes = BlobDiskCost(4);
  for (const std::string& content : contents) bytes += BlobDiskCost(content.size());
  EXPECT_EQ(store_->size_bytes(), bytes);
  for (const std::string& path : FilesUnder(dir_ + "/cas")) {
    EXPECT_FALSE(absl::StartsWith(path, dir_ + "/cas/tmp/")) << path;
  }
  absl::StatusOr<std::unique_ptr<CasStore>> again = CasStore::Open(dir_ + "/cas");
  ASSERT_TRUE(again.ok()) << again.status();
  for (const std::string& content : contents) {
    const Digest digest = DigestOf(content);
    EXPECT_TRUE((*again)->Verify(digest).ok()) << content;
    struct stat info;
    ASSERT_EQ(stat((*again)->PathOf(digest).c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 0777, 0444u);
  }
  EXPECT_THAT(store_->PutMany({}), IsEmpty());
}

TEST_F(CasStoreTest, OpenTwiceSeesTheSameBlobs) {
  Digest digest = DigestOf("kept");
  ASSERT_TRUE(store_->Put(digest, "kept").ok());
  absl::StatusOr<std::unique_ptr<CasStore>> again = CasStore::Open(dir_ + "/cas");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE((*again)->Contains(digest));
}

// What a reopened store holds is counted on a thread of its own; a blob
// stored and one discarded while it counts are counted as they end up,
// whichever comes first, and the count is what is on disk.
TEST_F(CasStoreTest, AStoreOpenedAgainCountsWhatItHoldsBesideItsFirstCallers) {
  std::vector<std::pair<Digest, std::string>> blobs;
  int64_t total = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string bytes = absl::StrCat("blob ", i);
    blobs.emplace_back(DigestOf(bytes), bytes);
    total += BlobDiskCost(bytes.size());
  }
  std::vector<std::pair<Digest, absl::string_view>> batch(blobs.begin(), blobs.end() - 1);
  for (const absl::Status& status : store_->PutMany(batch)) ASSERT_TRUE(status.ok()) << status;
  const auto& [added, added_bytes] = blobs.back();  // stored while it counts
  const auto& [damaged, damaged_bytes] = blobs[1500];
  const int64_t expected = total - BlobDiskCost(damaged_bytes.size());
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<std::unique_ptr<CasStore>> again = CasStore::Open(dir_ + "/cas");
    ASSERT_TRUE(again.ok()) << again.status();
    if (round == 0) {
      ASSERT_TRUE((*again)->Put(added, added_bytes).ok());
      (*again)->Discard(damaged, "a test");
    }
    EXPECT_EQ((*again)->size_bytes(), expected) << "round " << round;
    EXPECT_FALSE((*again)->Contains(damaged));
    EXPECT_TRUE((*again)->Contains(added));
  }
}

// Overwrites a stored blob in place, as a failing disk or a stray write
// would, keeping its size.
void Damage(const std::string& path, const std::string& bytes) {
  fs::permissions(path, fs::perms::owner_write, fs::perm_options::add);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST_F(CasStoreTest, AStoreOpenedAgainFindsABlobDamagedAtTheSameSizeAndRemovesIt) {
  Digest digest = DigestOf("header v1");
  ASSERT_TRUE(store_->Put(digest, "header v1").ok());
  EXPECT_TRUE(store_->Verify(digest).ok());
  Damage(store_->PathOf(digest), "header v2");
  // Still the right size, so it looks present...
  absl::StatusOr<std::unique_ptr<CasStore>> reopened = CasStore::Open(dir_ + "/cas");
  ASSERT_TRUE(reopened.ok());
  EXPECT_TRUE((*reopened)->Contains(digest));
  // ...until its first read since the store opened hashes it.
  absl::Status verified = (*reopened)->Verify(digest);
  EXPECT_TRUE(absl::IsDataLoss(verified)) << verified;
  EXPECT_FALSE(fs::exists(store_->PathOf(digest)));
  EXPECT_TRUE(absl::IsNotFound((*reopened)->Verify(digest)));
  // Uploaded again, it is whole again.
  ASSERT_TRUE((*reopened)->Put(digest, "header v1").ok());
  EXPECT_TRUE((*reopened)->Verify(digest).ok());
}

// The first units of a build ask for the same headers at once: each blob
// is hashed by one caller, the others wait for its verdict. A damaged blob
// is found damaged once (DATA_LOSS), and then is not in the store.
TEST_F(CasStoreTest, CallersVerifyingTheSameBlobAtOnceHashItOnce) {
  const std::string big(32 << 20, 'h');  // hashing takes long enough to overlap
  const Digest good = DigestOf(big);
  std::string other = big;
  other[0] = 'x';
  const Digest damaged = DigestOf(other);
  ASSERT_TRUE(store_->Put(good, big).ok());
  ASSERT_TRUE(store_->Put(damaged, other).ok());
  Damage(store_->PathOf(damaged), big);  // the same size, other bytes
  absl::StatusOr<std::unique_ptr<CasStore>> reopened = CasStore::Open(dir_ + "/cas");
  ASSERT_TRUE(reopened.ok());
  constexpr int kCallers = 8;
  std::vector<absl::Status> goods(kCallers), damages(kCallers);
  absl::Notification go;
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      go.WaitForNotification();
      damages[i] = (*reopened)->Verify(damaged);
      goods[i] = (*reopened)->Verify(good);
    });
  }
  go.Notify();
  for (std::thread& caller : callers) caller.join();
  int data_loss = 0;
  for (int i = 0; i < kCallers; ++i) {
    EXPECT_TRUE(goods[i].ok()) << goods[i];
    data_loss += absl::IsDataLoss(damages[i]);
    EXPECT_TRUE(absl::IsDataLoss(damages[i]) || absl::IsNotFound(damages[i])) << damages[i];
  }
  EXPECT_EQ(data_loss, 1) << "the damaged blob was hashed by more than one caller";
  EXPECT_FALSE(fs::exists(store_->PathOf(damaged)));
}

TEST_F(CasStoreTest, MaterializeRefusesADamagedBlobAndRemovesIt) {
  Digest digest = DigestOf("int x;");
  ASSERT_TRUE(store_->Put(digest, "int x;").ok());
  Damage(store_->PathOf(digest), "int y;");
  const std::string copy = dir_ + "/tree/x.h";
  absl::Status placed = store_->Materialize(digest, copy, false);
  EXPECT_TRUE(absl::IsDataLoss(placed)) << placed;
  EXPECT_FALSE(fs::exists(copy));
  EXPECT_FALSE(store_->Contains(digest));
  ASSERT_TRUE(store_->Put(digest, "int x;").ok());
  ASSERT_TRUE(store_->Materialize(digest, copy, false).ok());
  EXPECT_EQ(ReadAll(copy), "int x;");
}

// A store with room on disk for 6.8 blobs of 150 bytes (each costs
// BlobDiskCost(150), 8 KiB) gets ten: it evicts the least recently used to
// stay under its limit, never a pinned one.
TEST_F(CasStoreTest, ABoundedStoreEvictsTheLeastRecentlyUsedButNeverAPinnedBlob) {
  const int64_t cost = BlobDiskCost(150);
  const int64_t limit = cost * 68 / 10;
  absl::StatusOr<std::unique_ptr<CasStore>> opened = CasStore::Open(dir_ + "/bounded", limit);
  ASSERT_TRUE(opened.ok());
  CasStore& store = **opened;
  auto blob = [](int i) { return std::string(150, static_cast<char>('a' + i)); };
  std::vector<Digest> digests;
  for (int i = 0; i < 10; ++i) digests.push_back(DigestOf(blob(i)));
  std::unique_ptr<CasPin> pin = store.Pin({digests[0]});
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(store.Put(digests[i], blob(i)).ok());
    absl::SleepFor(absl::Milliseconds(2));
  }
  // Six blobs: under the limit. Blob 1 is used now, so blob 2 is the oldest
  // unpinned one.
  EXPECT_EQ(store.size_bytes(), 6 * cost);
  ASSERT_TRUE(store.Verify(digests[1]).ok());
  ASSERT_TRUE(store.Put(digests[6], blob(6)).ok());
  // Over the limit: evicted down to 90% of it.
  EXPECT_LE(store.size_bytes(), limit / 10 * 9);
  EXPECT_TRUE(store.Contains(digests[0])) << "pinned";
  EXPECT_TRUE(store.Contains(digests[1])) << "recently used";
  EXPECT_FALSE(store.Contains(digests[2])) << "least recently used";
  EXPECT_TRUE(store.Contains(digests[6])) << "just added";
  for (int i = 7; i < 10; ++i) ASSERT_TRUE(store.Put(digests[i], blob(i)).ok());
  EXPECT_LE(store.size_bytes(), limit);
  EXPECT_TRUE(store.Contains(digests[0])) << "still pinned";
  EXPECT_GE(store.evicted_blobs(), 4);
  // Once unpinned, it goes like any other.
  pin.reset();
  for (int i = 2; i < 8; ++i) ASSERT_TRUE(store.Put(digests[i], blob(i)).ok());
  EXPECT_FALSE(store.Contains(digests[0]));
  // What is on disk is what the store counts, also when opened again: each
  // file at its cost, which is at least the blocks it takes.
  int64_t on_disk = 0;
  for (const std::string& file : FilesUnder(dir_ + "/bounded")) {
    if (absl::StartsWith(file, dir_ + "/bounded/tmp/")) continue;
    on_disk += BlobDiskCost(fs::file_size(file));
    struct stat info;
    ASSERT_EQ(stat(file.c_str(), &info), 0);
    EXPECT_LE(info.st_blocks * 512, BlobDiskCost(info.st_size)) << file;
  }
  EXPECT_EQ(on_disk, store.size_bytes());
  absl::StatusOr<std::unique_ptr<CasStore>> again = CasStore::Open(dir_ + "/bounded", limit);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->size_bytes(), on_disk);
  // A smaller limit at the next start is applied at once.
  absl::StatusOr<std::unique_ptr<CasStore>> smaller =
      CasStore::Open(dir_ + "/bounded", limit * 4 / 10);
  ASSERT_TRUE(smaller.ok());
  EXPECT_LE((*smaller)->size_bytes(), limit * 4 / 10);
}

TEST(BlobDiskCostTest, IsWholeBlocksAndOneMoreForTheFile) {
  EXPECT_EQ(BlobDiskCost(0), 8192);
  EXPECT_EQ(BlobDiskCost(1), 8192);
  EXPECT_EQ(BlobDiskCost(4096), 8192);
  EXPECT_EQ(BlobDiskCost(4097), 12288);
  EXPECT_EQ(BlobDiskCost(int64_t{1} << 30), (int64_t{1} << 30) + 4096);
}

// Thousands of tiny blobs (a hostile client's batch upload): the store's
// size is what they take on disk, not their 80 bytes each, so that its
// limit bounds the disk.
TEST_F(CasStoreTest, TheSizeOfTinyBlobsIsWhatTheyTakeOnDisk) {
  std::vector<std::string> contents;
  for (int i = 0; i < 3000; ++i) contents.push_back(absl::StrCat(std::string(72, 't'), i));
  std::vector<std::pair<Digest, absl::string_view>> batch;
  for (const std::string& content : contents) batch.emplace_back(DigestOf(content), content);
  for (const absl::Status& status : store_->PutMany(batch)) ASSERT_TRUE(status.ok()) << status;
  int64_t content_bytes = 0, allocated = 0;
  for (const std::string& content : contents) {
    content_bytes += content.size();
    struct stat info;
    ASSERT_EQ(stat(store_->PathOf(DigestOf(content)).c_str(), &info), 0);
    allocated += info.st_blocks * 512;
  }
  EXPECT_LT(content_bytes, 256 << 10);
  EXPECT_GE(store_->size_bytes(), allocated);
  EXPECT_GE(store_->size_bytes(), 3000 * 4096);
}

TEST(DefaultCasMaxBytesTest, IsATenthOfTheDiskBetweenOneAndFiftyGiB) {
  int64_t bytes = DefaultCasMaxBytes(testing::NewTempDir("cas-default") + "/not/yet/made");
  EXPECT_GE(bytes, int64_t{1} << 30);
  EXPECT_LE(bytes, int64_t{50} << 30);
}

TEST_F(CasStoreTest, PutThenContainsAndGet) {
  Digest digest = DigestOf("hello");
  EXPECT_FALSE(store_->Contains(digest));
  ASSERT_TRUE(store_->Put(digest, "hello").ok());
  EXPECT_TRUE(store_->Contains(digest));
  absl::StatusOr<std::string> content = store_->Get(digest);
  ASSERT_TRUE(content.ok()) << content.status();
  EXPECT_EQ(*content, "hello");
  EXPECT_EQ(ReadAll(store_->PathOf(digest)), "hello");
}

TEST_F(CasStoreTest, PathOfLiesUnderRoot) {
  Digest digest = DigestOf("hello");
  EXPECT_THAT(store_->PathOf(digest), ::testing::StartsWith(store_->root() + "/"));
  EXPECT_THAT(store_->PathOf(digest), HasSubstr(digest.hash));
}

TEST_F(CasStoreTest, PutSameBlobTwiceIsOk) {
  Digest digest = DigestOf("twice");
  ASSERT_TRUE(store_->Put(digest, "twice").ok());
  EXPECT_TRUE(store_->Put(digest, "twice").ok());
  EXPECT_EQ(*store_->Get(digest), "twice");
}

TEST_F(CasStoreTest, PutBytesReturnsItsDigest) {
  absl::StatusOr<Digest> digest = store_->PutBytes("some bytes");
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_EQ(*digest, DigestOf("some bytes"));
  EXPECT_TRUE(store_->Contains(*digest));
  EXPECT_EQ(*store_->Get(*digest), "some bytes");
}

TEST_F(CasStoreTest, PutFileReturnsItsDigestAndStoresContent) {
  std::string path = dir_ + "/input.cu";
  std::string content(3 << 20, 'x');  // several 1 MiB copy chunks
  content += "tail";
  WriteAll(path, content);
  absl::StatusOr<Digest> digest = store_->PutFile(path);
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_EQ(*digest, DigestOf(content));
  EXPECT_TRUE(store_->Contains(*digest));
  EXPECT_EQ(ReadAll(store_->PathOf(*digest)), content);
}

TEST_F(CasStoreTest, PutFileOfBlobAlreadyStored) {
  std::string path = dir_ + "/input.cu";
  WriteAll(path, "same");
  ASSERT_TRUE(store_->PutBytes("same").ok());
  absl::StatusOr<Digest> digest = store_->PutFile(path);
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_EQ(*digest, DigestOf("same"));
}

TEST_F(CasStoreTest, PutFileMissingIsNotFound) {
  absl::StatusOr<Digest> digest = store_->PutFile(dir_ + "/missing");
  ASSERT_FALSE(digest.ok());
  EXPECT_EQ(digest.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CasStoreTest, GetMissingIsNotFound) {
  absl::StatusOr<std::string> content = store_->Get(DigestOf("absent"));
  ASSERT_FALSE(content.ok());
  EXPECT_EQ(content.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(content.status().message(), HasSubstr(DigestOf("absent").hash));
}

// A wrong content for a digest: same size, other bytes; or another size.
struct MismatchCase {
  std::string name;
  std::string claimed;  // the content the digest is computed from
  std::string sent;     // the content actually sent
};

void PrintTo(const MismatchCase& c, std::ostream* os) { *os << c.name; }

class CasStoreMismatchTest : public CasStoreTest,
                             public ::testing::WithParamInterface<MismatchCase> {};

TEST_P(CasStoreMismatchTest, PutRejectedAndNothingStored) {
  Digest claimed = DigestOf(GetParam().claimed);
  absl::Status status = store_->Put(claimed, GetParam().sent);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_FALSE(store_->Contains(claimed));
  if (!GetParam().sent.empty()) {  // the empty blob is always present
    EXPECT_FALSE(store_->Contains(DigestOf(GetParam().sent)));
  }
  EXPECT_THAT(FilesUnder(store_->root()), IsEmpty());
}

INSTANTIATE_TEST_SUITE_P(Cases, CasStoreMismatchTest,
                         ::testing::Values(MismatchCase{"SameSizeOtherBytes", "abc", "abd"},
                                           MismatchCase{"Shorter", "abcdef", "abc"},
                                           MismatchCase{"Longer", "abc", "abcdef"},
                                           MismatchCase{"EmptySent", "abc", ""}),
                         [](const ::testing::TestParamInfo<MismatchCase>& info) {
                           return info.param.name;
                         });

TEST_F(CasStoreTest, MismatchMessageNamesBothDigests) {
  Digest claimed = DigestOf("abc");
  absl::Status status = store_->Put(claimed, "abd");
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(claimed.ToString()));
  EXPECT_THAT(status.message(), HasSubstr(DigestOf("abd").ToString()));
}

TEST_F(CasStoreTest, WrongContentForStoredBlobRejectedAndBlobKept) {
  Digest digest = DigestOf("abc");
  ASSERT_TRUE(store_->Put(digest, "abc").ok());
  EXPECT_EQ(store_->Put(digest, "abd").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*store_->Get(digest), "abc");
}

TEST_F(CasStoreTest, PutWithMalformedDigestRejected) {
  EXPECT_EQ(store_->Put(Digest{"ABC", 3}, "abc").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(FilesUnder(store_->root()), IsEmpty());
}

TEST_F(CasStoreTest, ChunkedWriteCommitsBlob) {
  std::string content = "hello, chunked world";
  Digest digest = DigestOf(content);
  absl::StatusOr<std::unique_ptr<BlobWriter>> writer = store_->StartWrite(digest);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Append(0, content.substr(0, 5)).ok());
  ASSERT_TRUE((*writer)->Append(5, content.substr(5, 7)).ok());
  ASSERT_TRUE((*writer)->Append(12, content.substr(12)).ok());
  EXPECT_EQ((*writer)->bytes_written(), static_cast<int64_t>(content.size()));
  EXPECT_FALSE(store_->Contains(digest));  // not before Commit
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_TRUE(store_->Contains(digest));
  EXPECT_EQ(*store_->Get(digest), content);
}

TEST_F(CasStoreTest, ChunkedWriteAcceptsEmptyChunk) {
  Digest digest = DigestOf("ab");
  auto writer = std::move(store_->StartWrite(digest)).value();
  ASSERT_TRUE(writer->Append(0, "a").ok());
  ASSERT_TRUE(writer->Append(1, "").ok());
  ASSERT_TRUE(writer->Append(1, "b").ok());
  EXPECT_TRUE(writer->Commit().ok());
}

TEST_F(CasStoreTest, CommitTwiceIsOk) {
  Digest digest = DigestOf("x");
  auto writer = std::move(store_->StartWrite(digest)).value();
  ASSERT_TRUE(writer->Append(0, "x").ok());
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_TRUE(writer->Commit().ok());
  EXPECT_TRUE(store_->Contains(digest));
}

TEST_F(CasStoreTest, AppendAfterCommitRejected) {
  Digest digest = DigestOf("x");
  auto writer = std::move(store_->StartWrite(digest)).value();
  ASSERT_TRUE(writer->Append(0, "x").ok());
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_FALSE(writer->Append(1, "y").ok());
  EXPECT_EQ(*store_->Get(digest), "x");
}

struct OffsetCase {
  std::string name;
  int64_t offset;  // of the second chunk, after 3 bytes were written
};

void PrintTo(const OffsetCase& c, std::ostream* os) { *os << c.name; }

class CasStoreOffsetTest : public CasStoreTest, public ::testing::WithParamInterface<OffsetCase> {};

TEST_P(CasStoreOffsetTest, OutOfOrderOffsetRejected) {
  Digest digest = DigestOf("abcdef");
  auto writer = std::move(store_->StartWrite(digest)).value();
  ASSERT_TRUE(writer->Append(0, "abc").ok());
  absl::Status status = writer->Append(GetParam().offset, "def");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(writer->bytes_written(), 3);
  // The writer is still usable at the right offset.
  ASSERT_TRUE(writer->Append(3, "def").ok());
  EXPECT_TRUE(writer->Commit().ok());
  EXPECT_EQ(*store_->Get(digest), "abcdef");
}

INSTANTIATE_TEST_SUITE_P(Cases, CasStoreOffsetTest,
                         ::testing::Values(OffsetCase{"Repeated", 0}, OffsetCase{"Overlapping", 2},
                                           OffsetCase{"Gap", 4}, OffsetCase{"Negative", -1}),
                         [](const ::testing::TestParamInfo<OffsetCase>& info) {
                           return info.param.name;
                         });

TEST_F(CasStoreTest, TooManyBytesRejected) {
  Digest digest = DigestOf("abc");
  auto writer = std::move(store_->StartWrite(digest)).value();
  ASSERT_TRUE(writer->Append(0, "ab").ok());
  absl::Status status = writer->Append(2, "cd");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(writer->bytes_written(), 2);
}

TEST_F(CasStoreTest, CommitWithTooFewBytesRejected) {
  Digest digest = DigestOf("abc");
  auto writer = std::move(store_->StartWrite(digest)).value();
  ASSERT_TRUE(writer->Append(0, "ab").ok());
  EXPECT_EQ(writer->Commit().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(store_->Contains(digest));
}

TEST_F(CasStoreTest, CommitWithWrongBytesRejected) {
  Digest digest = DigestOf("abc");
  auto writer = std::move(store_->StartWrite(digest)).value();
  ASSERT_TRUE(writer->Append(0, "xyz").ok());
  absl::Status status = writer->Commit();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(digest.ToString()));
  EXPECT_FALSE(store_->Contains(digest));
  writer.reset();
  EXPECT_THAT(FilesUnder(store_->root()), IsEmpty());
}

TEST_F(CasStoreTest, UncommittedWriterDiscarded) {
  Digest digest = DigestOf("abcdef");
  {
    auto writer = std::move(store_->StartWrite(digest)).value();
    ASSERT_TRUE(writer->Append(0, "abc").ok());
  }
  EXPECT_FALSE(store_->Contains(digest));
  EXPECT_THAT(FilesUnder(store_->root()), IsEmpty());
}

TEST_F(CasStoreTest, FullyWrittenButUncommittedWriterDiscarded) {
  Digest digest = DigestOf("abc");
  {
    auto writer = std::move(store_->StartWrite(digest)).value();
    ASSERT_TRUE(writer->Append(0, "abc").ok());
  }
  EXPECT_FALSE(store_->Contains(digest));
  EXPECT_THAT(FilesUnder(store_->root()), IsEmpty());
}

TEST_F(CasStoreTest, StartWriteWithMalformedDigestRejected) {
  absl::StatusOr<std::unique_ptr<BlobWriter>> writer = store_->StartWrite(Digest{"zz", 1});
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CasStoreTest, TwoWritersForDifferentBlobsAtOnce) {
  auto first = std::move(store_->StartWrite(DigestOf("first"))).value();
  auto second = std::move(store_->StartWrite(DigestOf("second"))).value();
  ASSERT_TRUE(first->Append(0, "fir").ok());
  ASSERT_TRUE(second->Append(0, "second").ok());
  ASSERT_TRUE(first->Append(3, "st").ok());
  ASSERT_TRUE(second->Commit().ok());
  ASSERT_TRUE(first->Commit().ok());
  EXPECT_EQ(*store_->Get(DigestOf("first")), "first");
  EXPECT_EQ(*store_->Get(DigestOf("second")), "second");
}

// The report found /etc/shadow's copy world-readable in both stores.
TEST_F(CasStoreTest, TheStoreIsPrivateToItsOwner) {
  struct stat info;
  ASSERT_EQ(stat(store_->root().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
}

// A compile that overwrote one of its inputs once changed the worker's
// stored header for every later unit: inputs are copies.
TEST_F(CasStoreTest, MaterializeIsACopyThatCannotReachTheStore) {
  Digest digest = *store_->PutBytes("header text");
  std::string destination = dir_ + "/sandbox/include/deep/a.h";
  ASSERT_TRUE(store_->Materialize(digest, destination, /*executable=*/false).ok());
  EXPECT_EQ(ReadAll(destination), "header text");
  struct stat placed, stored;
  ASSERT_EQ(stat(destination.c_str(), &placed), 0);
  ASSERT_EQ(stat(store_->PathOf(digest).c_str(), &stored), 0);
  EXPECT_NE(placed.st_ino, stored.st_ino);
  EXPECT_FALSE(placed.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) << "inputs are read-only";
  // Even root writing through the placed file leaves the blob alone.
  ASSERT_EQ(chmod(destination.c_str(), 0644), 0);
  {
    std::ofstream overwrite(destination, std::ios::trunc);
    overwrite << "EVIL";
  }
  EXPECT_EQ(*store_->Get(digest), "header text");
}

TEST_F(CasStoreTest, MaterializeExecutableAsCopy) {
  Digest digest = *store_->PutBytes("#!/bin/sh\nexit 0\n");
  std::string destination = dir_ + "/sandbox/bin/tool";
  ASSERT_TRUE(store_->Materialize(digest, destination, /*executable=*/true).ok());
  EXPECT_EQ(ReadAll(destination), "#!/bin/sh\nexit 0\n");
  struct stat placed, stored;
  ASSERT_EQ(stat(destination.c_str(), &placed), 0);
  ASSERT_EQ(stat(store_->PathOf(digest).c_str(), &stored), 0);
  EXPECT_NE(placed.st_ino, stored.st_ino);
  EXPECT_TRUE(placed.st_mode & S_IXUSR);
  EXPECT_FALSE(stored.st_mode & S_IXUSR) << "the store's copy stays non-executable";
}

// nvcc hashes the source's modification time into some internal device
// names: copies made at different times must look alike.
TEST_F(CasStoreTest, MaterializedCopiesAllHaveTheSameModificationTime) {
  Digest digest = *store_->PutBytes("__global__ void k() {}");
  ASSERT_TRUE(store_->Materialize(digest, dir_ + "/first/k.cu", false).ok());
  absl::SleepFor(absl::Milliseconds(1100));
  ASSERT_TRUE(store_->Materialize(digest, dir_ + "/second/k.cu", false).ok());
  for (const char* copy : {"/first/k.cu", "/second/k.cu"}) {
    struct stat placed;
    ASSERT_EQ(stat((dir_ + copy).c_str(), &placed), 0);
    EXPECT_EQ(placed.st_mtim.tv_sec, kMaterializedMtime) << copy;
    EXPECT_EQ(placed.st_mtim.tv_nsec, 0) << copy;
  }
}

// A write a dead process left half done is removed when the store opens;
// one of a live writer is not.
TEST_F(CasStoreTest, OpeningRemovesWritesOfDeadWritersOnly) {
  const std::string tmp = store_->root() + "/tmp";
  WriteAll(tmp + "/999999999-3", "half a blob");
  WriteAll(tmp + "/not-a-pid", "junk");
  const std::string mine = absl::StrCat(tmp, "/", getpid(), "-7");
  WriteAll(mine, "being written");
  ASSERT_TRUE(CasStore::Open(store_->root()).ok());
  EXPECT_FALSE(fs::exists(tmp + "/999999999-3"));
  EXPECT_FALSE(fs::exists(tmp + "/not-a-pid"));
  EXPECT_TRUE(fs::exists(mine));
}

TEST_F(CasStoreTest, MaterializeReplacesExistingFile) {
  Digest digest = *store_->PutBytes("new");
  std::string destination = dir_ + "/out.txt";
  WriteAll(destination, "old content");
  ASSERT_TRUE(store_->Materialize(digest, destination, false).ok());
  EXPECT_EQ(ReadAll(destination), "new");
}

TEST_F(CasStoreTest, MaterializeSameBlobTwiceIntoTwoPlaces) {
  Digest digest = *store_->PutBytes("shared");
  ASSERT_TRUE(store_->Materialize(digest, dir_ + "/a/x.h", false).ok());
  ASSERT_TRUE(store_->Materialize(digest, dir_ + "/b/x.h", false).ok());
  EXPECT_EQ(ReadAll(dir_ + "/a/x.h"), "shared");
  EXPECT_EQ(ReadAll(dir_ + "/b/x.h"), "shared");
}

TEST_F(CasStoreTest, MaterializeMissingIsNotFound) {
  std::string destination = dir_ + "/sandbox/a.h";
  absl::Status status = store_->Materialize(DigestOf("absent"), destination, false);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_FALSE(fs::exists(destination));
}

TEST_F(CasStoreTest, EmptyBlobIsAlwaysPresent) {
  Digest empty = DigestOf("");
  EXPECT_TRUE(store_->Contains(empty));
  absl::StatusOr<std::string> content = store_->Get(empty);
  ASSERT_TRUE(content.ok()) << content.status();
  EXPECT_EQ(*content, "");
}

TEST_F(CasStoreTest, EmptyBlobPutAndChunkedWrite) {
  EXPECT_EQ(*store_->PutBytes(""), DigestOf(""));
  auto writer = std::move(store_->StartWrite(DigestOf(""))).value();
  EXPECT_TRUE(writer->Commit().ok());
  EXPECT_TRUE(store_->Contains(DigestOf("")));
}

TEST_F(CasStoreTest, EmptyBlobMaterializesEmptyFile) {
  std::string destination = dir_ + "/sandbox/empty.h";
  ASSERT_TRUE(store_->Materialize(DigestOf(""), destination, false).ok());
  EXPECT_TRUE(fs::is_regular_file(destination));
  EXPECT_EQ(fs::file_size(destination), 0u);
}

// An empty executable keeps its execute bit.
TEST_F(CasStoreTest, EmptyBlobMaterializedExecutable) {
  std::string destination = dir_ + "/sandbox/empty_tool";
  ASSERT_TRUE(store_->Materialize(DigestOf(""), destination, true).ok());
  struct stat placed;
  ASSERT_EQ(stat(destination.c_str(), &placed), 0);
  EXPECT_TRUE(placed.st_mode & S_IXUSR);
}

// A malformed hash must not name a file outside the store.
TEST_F(CasStoreTest, GetWithMalformedDigestDoesNotReadOutsideTheStore) {
  // PathOf = root/<hash[0:2]>/<hash>_<size> with root = dir_/cas, so hash
  // "./../secret" names root/././../secret_6, i.e. dir_/secret_6.
  WriteAll(dir_ + "/secret_6", "secret");
  Digest malicious{"./../secret", 6};
  absl::StatusOr<std::string> content = store_->Get(malicious);
  EXPECT_FALSE(content.ok()) << "read " << store_->PathOf(malicious) << ": " << *content;
  EXPECT_FALSE(store_->Contains(malicious));
}

}  // namespace
}  // namespace distcc_cuda
