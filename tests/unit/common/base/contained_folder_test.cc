// SPDX-License-Identifier: Apache-2.0
// A folder that writes cannot leave (common/base/contained_folder.h): links
// planted anywhere on the way or at the name are never followed, files are
// created only where nothing is, and the mode is the writer's; with openat2
// and with the walk one name at a time alike.
#include "common/base/contained_folder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include "common/base/files.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;

class ContainedFolderTest : public ::testing::TestWithParam<ContainedFolder::Walk> {
 protected:
  void SetUp() override {
    root_ = testing::NewTempDir("contained-");
    ASSERT_TRUE(MakeDirectories(root_ + "/inside").ok());
    ASSERT_TRUE(MakeDirectories(root_ + "/outside").ok());
    victim_ = root_ + "/outside/victim";
    ASSERT_TRUE(WriteNewFile(victim_, "victim", 0600).ok());
    absl::StatusOr<ContainedFolder> folder = ContainedFolder::Open(root_ + "/inside", GetParam());
    ASSERT_TRUE(folder.ok()) << folder.status();
    folder_.emplace(*std::move(folder));
  }

  void ExpectVictimUntouched() {
    EXPECT_EQ(ReadFile(victim_).value_or(""), "victim");
    struct stat info {};
    ASSERT_EQ(stat(victim_.c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 07777, 0600u);
  }

  std::string root_;
  std::string victim_;
  std::optional<ContainedFolder> folder_;
};

TEST_P(ContainedFolderTest, MakesFoldersFilesAndLinksBeneathIt) {
  ASSERT_TRUE(folder_->MakeFolders("a/b/c", 0755).ok());
  absl::StatusOr<OwnedFd> file = folder_->CreateFile("a/b/c/f");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE(WriteAll(file->get(), "bytes", "f").ok());
  ASSERT_EQ(fchmod(file->get(), 0755), 0);
  ASSERT_TRUE(file->Close().ok());
  ASSERT_TRUE(folder_->MakeLink("a/l", "b/c/f").ok());
  EXPECT_EQ(ReadFile(root_ + "/inside/a/l").value_or(""), "bytes");
  struct stat info {};
  ASSERT_EQ(stat((root_ + "/inside/a/b").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0755u) << "the mode asked for, whatever the umask";
  EXPECT_TRUE(folder_->OpenFile("a/b/c/f").ok());
  EXPECT_TRUE(folder_->Remove("a/l").ok());
  EXPECT_TRUE(folder_->Remove("a/l").ok()) << "a missing name is removed already";
  EXPECT_TRUE(IsRegularFile(root_ + "/inside/a/b/c/f")) << "removing the link kept its target";
}

TEST_P(ContainedFolderTest, ALinkPlantedAtTheNameIsNeitherFollowedNorReplaced) {
  ASSERT_EQ(symlink(victim_.c_str(), (root_ + "/inside/f.part").c_str()), 0);
  absl::StatusOr<OwnedFd> file = folder_->CreateFile("f.part");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(folder_->OpenFile("f.part").status().code(), absl::StatusCode::kPermissionDenied);
  ExpectVictimUntouched();
}

TEST_P(ContainedFolderTest, ALinkPlantedOnTheWayIsNotFollowed) {
  ASSERT_EQ(symlink((root_ + "/outside").c_str(), (root_ + "/inside/up").c_str()), 0);
  EXPECT_EQ(folder_->CreateFile("up/victim").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(folder_->CreateFile("up/new").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(folder_->MakeFolders("up/deeper").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(folder_->MakeLink("up/l", "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(folder_->OpenFile("up/victim").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(fs::exists(root_ + "/outside/new"));
  EXPECT_FALSE(fs::exists(root_ + "/outside/deeper"));
  ExpectVictimUntouched();
}

TEST_P(ContainedFolderTest, PathsThatAreNotPlainAreRefused) {
  for (const std::string path :
       {"../outside/victim", "/etc/passwd", "a//b", "./a", "a/", "", "a/../../outside/victim"}) {
    EXPECT_EQ(folder_->CreateFile(path).status().code(), absl::StatusCode::kInvalidArgument)
        << path;
    EXPECT_EQ(folder_->MakeFolders(path).code(), absl::StatusCode::kInvalidArgument) << path;
  }
  EXPECT_EQ(folder_->CreateFile(std::string(300, 'n')).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "a name longer than NAME_MAX";
  ExpectVictimUntouched();
}

TEST_P(ContainedFolderTest, TheFolderItselfMustNotBeALink) {
  ASSERT_EQ(symlink((root_ + "/outside").c_str(), (root_ + "/link").c_str()), 0);
  EXPECT_EQ(ContainedFolder::Open(root_ + "/link").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ContainedFolder::Open(root_ + "/missing").status().code(), absl::StatusCode::kNotFound);
}

// openat2 where the kernel has it, and the walk of kernels before 5.6.
INSTANTIATE_TEST_SUITE_P(Walks, ContainedFolderTest,
                         ::testing::Values(ContainedFolder::Walk::kBeneath,
                                           ContainedFolder::Walk::kNameByName),
                         [](const ::testing::TestParamInfo<ContainedFolder::Walk>& info) {
                           return info.param == ContainedFolder::Walk::kBeneath ? "Openat2"
                                                                                : "NameByName";
                         });

}  // namespace
}  // namespace distcc_cuda
