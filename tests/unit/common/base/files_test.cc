// SPDX-License-Identifier: Apache-2.0
#include "common/base/files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

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

// Every path of up to 8 of 'a', '.' and '/' (9,841 of them): the fast
// paths agree with std::filesystem exactly, so the checks that use them
// give the verdicts they gave with std::filesystem alone.
TEST(PlainPathTest, FastPathsAgreeWithStdFilesystemOnEveryShortPath) {
  std::vector<std::string> paths = {""};
  for (size_t begin = 0, length = 0; length < 8; ++length) {
    const size_t end = paths.size();
    for (size_t i = begin; i < end; ++i) {
      for (char c : {'a', '.', '/'}) paths.push_back(paths[i] + c);
    }
    begin = end;
  }
  ASSERT_EQ(paths.size(), 9841u);
  int plain_relative = 0;
  for (const std::string& path : paths) {
    const std::string normal = std::filesystem::path(path).lexically_normal().string();
    EXPECT_EQ(LexicallyNormal(path), normal) << "'" << path << "'";
    if (IsPlainRelativePath(path)) {
      ++plain_relative;
      EXPECT_EQ(normal, path);
      EXPECT_TRUE(StaysInside(path)) << path;
    }
    if (IsPlainAbsolutePath(path)) {
      EXPECT_EQ(normal, path);
    }
    EXPECT_FALSE(IsPlainRelativePath(path) && IsPlainAbsolutePath(path)) << path;
    for (const char* base : {"", "/", "/src", "/src/", "a/b", "/a/../b", "x//y"}) {
      EXPECT_EQ(NormalJoin(base, path),
                (std::filesystem::path(base) / path).lexically_normal().string())
          << "'" << base << "' / '" << path << "'";
    }
  }
  // "a", "a/a", "a.", ".a", "..a", "a..", "a/.a", ...: names, never "." or "..".
  EXPECT_GT(plain_relative, 100);
  EXPECT_TRUE(IsPlainRelativePath("include/cute/tensor.hpp"));
  EXPECT_TRUE(IsPlainRelativePath("...")) << "a name, not a climb";
  for (const char* path : {"", ".", "..", "a/..", "a//b", "a/./b", "a/", "/a", "../a"}) {
    EXPECT_FALSE(IsPlainRelativePath(path)) << path;
  }
  EXPECT_TRUE(IsPlainAbsolutePath("/"));
  EXPECT_TRUE(IsPlainAbsolutePath("/usr/include"));
  for (const char* path : {"", "//", "/usr/", "/usr/../etc", "usr", "/./usr"}) {
    EXPECT_FALSE(IsPlainAbsolutePath(path)) << path;
  }
}

}  // namespace
}  // namespace distcc_cuda
