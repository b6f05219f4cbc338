// SPDX-License-Identifier: Apache-2.0
// The manifest of a toolkit folder (common/store/toolkit_manifest.h): what
// it lists, what a check of a folder finds, and a manifest from elsewhere
// parsed as hostile.
#include "common/store/toolkit_manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

void WriteNvcc(const std::string& path) {
  ASSERT_TRUE(WriteFileAtomically(path, "#!/bin/sh\necho 'release 13.2, V13.2.86'\n").ok());
  fs::permissions(path, fs::perms::owner_all);
}

TEST(ToolkitManifestTest, NamesWhatChangedWasAddedOrIsMissing) {
  const std::string home = testing::NewTempDir("manifest-") + "/cuda";
  WriteNvcc(home + "/bin/nvcc");
  ASSERT_TRUE(WriteFileAtomically(home + "/include/cuda.h", "#define CUDA_VERSION 13020\n").ok());
  fs::create_directory_symlink("lib", home + "/lib64");
  ASSERT_TRUE(WriteFileAtomically(home + "/lib/libcudart.so.13", "elf").ok());
  absl::StatusOr<std::string> manifest = ManifestOf(home);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_THAT(*manifest, AllOf(HasSubstr("link lib lib64\n"), HasSubstr(" x bin/nvcc\n"),
                               HasSubstr(" - include/cuda.h\n")));
  EXPECT_EQ(VerifyManifest(home).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteFileAtomically(home + "/" + kToolkitManifestName, *manifest).ok());
  EXPECT_TRUE(VerifyManifest(home).ok());

  ASSERT_TRUE(WriteFileAtomically(home + "/include/cuda.h", "#define CUDA_VERSION 13021\n").ok());
  EXPECT_THAT(VerifyManifest(home).message(), HasSubstr("include/cuda.h changed"));
  ASSERT_TRUE(WriteFileAtomically(home + "/include/cuda.h", "#define CUDA_VERSION 13020\n").ok());
  ASSERT_TRUE(WriteFileAtomically(home + "/bin/extra", "x").ok());
  EXPECT_THAT(VerifyManifest(home).message(), HasSubstr("bin/extra is not part of it"));
  fs::remove(home + "/bin/extra");
  fs::remove(home + "/lib/libcudart.so.13");
  EXPECT_THAT(VerifyManifest(home).message(), HasSubstr("lib/libcudart.so.13 is missing"));
  fs::create_symlink("/etc/passwd", home + "/lib/libcudart.so.13");
  EXPECT_THAT(ManifestOf(home).status().message(), HasSubstr("leads out of the toolkit"));
  fs::remove(home + "/lib/libcudart.so.13");
  fs::create_symlink("../../../etc/passwd", home + "/lib/libcudart.so.13");
  EXPECT_THAT(ManifestOf(home).status().message(), HasSubstr("leads out of the toolkit"));
  // Inside lexically, outside once the links are followed.
  fs::remove(home + "/lib/libcudart.so.13");
  fs::create_directory_symlink("..", home + "/up");
  fs::create_symlink("../up/../..", home + "/lib/libcudart.so.13");
  EXPECT_THAT(ManifestOf(home).status().message(), HasSubstr("leads out of the toolkit"));
}

constexpr char kHash[] = "945153fa0671b3a5015ce258a63972816a426309a12c4828146cf8e8b836336b";

TEST(ToolkitManifestTest, AManifestFromElsewhereIsParsedAsHostile) {
  const std::string head = "distcc-cuda toolkit manifest 1\n";
  const std::string file = absl::StrCat("file ", kHash, " 101019 - include/cuda_runtime.h\n");
  absl::StatusOr<std::vector<ToolkitEntry>> entries = ParseToolkitManifest(
      head + file + "link lib lib64\n" + absl::StrCat("file ", kHash, " 7 x bin/nvcc\n"));
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[0].path, "include/cuda_runtime.h");
  EXPECT_EQ((*entries)[0].digest.size_bytes, 101019);
  EXPECT_TRUE((*entries)[1].link);
  EXPECT_EQ((*entries)[1].target, "lib");
  EXPECT_TRUE((*entries)[2].executable);
  const std::vector<std::string> refused = {
      "",                                                              // no format line
      "distcc-cuda toolkit manifest 2\n",                              // another format
      head + file.substr(0, file.size() - 1),                          // no last newline
      head + absl::StrCat("file ", kHash, " 7 - ../../etc/passwd\n"),  // climbs out
      head + absl::StrCat("file ", kHash, " 7 - /etc/passwd\n"),       // absolute
      head + absl::StrCat("file ", kHash, " 7 - a//b\n"),              // not plain
      head + absl::StrCat("file ", kHash, " -7 - a\n"),                // a negative size
      head + absl::StrCat("file ", kHash, " 7 y a\n"),                 // a mode of neither
      head + "file 12 7 - a\n",                                        // not a digest
      head + absl::StrCat("file ", kHash, " 7 - a b\n"),               // a space
      head + "link /etc lib64\n",                                      // absolute target
      head + "link ../../.. lib64\n",                                  // target out
      head + "link . here\n",                                          // itself
      head + file + file,                                              // twice
      head + "link lib lib64\n" + absl::StrCat("file ", kHash, " 7 - lib64/x\n"),  // below a link
      head +
          absl::StrCat("file ", kHash, " 7 - a\n", "file ", kHash, " 7 - a/b\n"),  // below a file
      head + absl::StrCat("file ", kHash, " 7 - .distcc-cuda-toolkit\n"),  // the manifest itself
      head + "tar everything\n",
  };
  for (const std::string& text : refused) {
    EXPECT_EQ(ParseToolkitManifest(text).status().code(), absl::StatusCode::kInvalidArgument)
        << text;
  }
  std::string large = head;
  for (int i = 0; i <= kMaxToolkitEntries; ++i) {
    absl::StrAppend(&large, "file ", kHash, " 7 - f", i, "\n");
  }
  EXPECT_THAT(ParseToolkitManifest(large).status().message(), HasSubstr("more than 100000"));
}

}  // namespace
}  // namespace distcc_cuda
