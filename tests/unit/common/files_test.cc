// SPDX-License-Identifier: Apache-2.0
#include "common/files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

TEST(FolderLockTest, OneHolderAtATimeNamedByPid) {
  const std::string folder = testing::NewTempDir("lock-") + "/state";
  absl::StatusOr<FolderLock> first = FolderLock::Acquire(folder, "another coordinator");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*ReadFile(folder + "/lock"), std::to_string(getpid()) + "\n");
  absl::StatusOr<FolderLock> second = FolderLock::Acquire(folder, "another coordinator");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr(folder + " is in use by another coordinator (pid " +
                        std::to_string(getpid()) + ")"));
  // Moved, still held; destroyed, free.
  FolderLock moved = std::move(*first);
  EXPECT_FALSE(FolderLock::Acquire(folder, "x").ok());
  { FolderLock gone = std::move(moved); }
  EXPECT_TRUE(FolderLock::Acquire(folder, "x").ok());
}

TEST(WriteFileAtomicallyTest, WritesAndReplacesWholeFiles) {
  const std::string path = testing::NewTempDir("atomic-") + "/deep/file";
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());
  EXPECT_EQ(*ReadFile(path), "second");
  EXPECT_TRUE(SyncFolder(testing::NewTempDir("sync-")).ok());
  EXPECT_FALSE(SyncFolder(path + "/absent").ok());
}

// A read that fails part-way (here: a folder, EISDIR) is a status, not an
// exception: CI once saw libstdc++ throw from a /proc file whose process exited.
TEST(ReadFileTest, AFailedReadIsAnErrorStatusNotAnException) {
  const std::string folder = testing::NewTempDir("read-");
  absl::StatusOr<std::string> read = ReadFile(folder);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(folder));
  EXPECT_EQ(ReadFile(folder + "/absent").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteFileAtomically(folder + "/big", std::string(300000, 'x')).ok());
  EXPECT_EQ(ReadFile(folder + "/big")->size(), 300000u);
}

}  // namespace
}  // namespace distcc_cuda
