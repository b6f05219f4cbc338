// SPDX-License-Identifier: Apache-2.0
// The manifest of a toolkit folder (common/store/toolkit_manifest.h): what
// it lists, what a check of a folder finds, and a manifest from elsewhere
// parsed as hostile.
#include "common/store/toolkit_manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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
      head + absl::StrCat("file ", kHash, " 7 x bin/nvcc\n") + file +
      absl::StrCat("file ", kHash, " 7 - lib/libcudart.so.13\n") + "link lib lib64\n");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 4u);
  EXPECT_EQ((*entries)[1].path, "include/cuda_runtime.h");
  EXPECT_EQ((*entries)[1].digest.size_bytes, 101019);
  EXPECT_TRUE((*entries)[3].link);
  EXPECT_EQ((*entries)[3].target, "lib");
  EXPECT_TRUE((*entries)[0].executable);
  EXPECT_FALSE((*entries)[1].executable);
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
      head + absl::StrCat("file ", kHash, " 7 - bin/\x1b]0;x\x07\n"),  // escape codes
      head + absl::StrCat("file ", kHash, " 7 - bin/caf\xc3\xa9\n"),   // not ASCII
      head + absl::StrCat("file ", kHash, " 7 4755 bin/su\n"),         // a setuid mode
      head + absl::StrCat("file ", kHash, " 1099511627777 - a\n"),     // above 1 TiB
      head + "link lib64 lib\n",                                       // to nothing
      head + "link b a\nlink a b\n",                                   // a cycle
      head + absl::StrCat("file ", kHash, " 7 - d/f\n", "link up/../.. out\n",
                          "link d up\n"),  // through another link
      head + absl::StrCat("file ", kHash, " 7 - b\n", "file ", kHash, " 7 - a\n"),  // not in order
      head + absl::StrCat("file ", kHash, " 7 - d/f\n", "link d//f x\n"),           // an empty name
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

// A manifest of `lines`, in the order of their paths (as ManifestOf writes).
std::string Manifest(std::vector<std::string> lines) {
  std::sort(lines.begin(), lines.end(), [](const std::string& a, const std::string& b) {
    return a.substr(a.rfind(' ') + 1) < b.substr(b.rfind(' ') + 1);
  });
  std::string text = "distcc-cuda toolkit manifest 1\n";
  for (const std::string& line : lines) absl::StrAppend(&text, line, "\n");
  return text;
}

TEST(ToolkitManifestTest, LinksResolveAsTheKernelWouldThroughFoldersOfTheManifestOnly) {
  const std::string cudart =
      absl::StrCat("file ", kHash, " 7 - targets/x86_64-linux/lib/libcudart.so.13");
  const std::string nvcc = absl::StrCat("file ", kHash, " 7 x bin/nvcc");
  // What a real toolkit holds: a link to a folder, a chain of two links.
  absl::StatusOr<std::vector<ToolkitEntry>> real =
      ParseToolkitManifest(Manifest({cudart, nvcc, "link targets/x86_64-linux/lib lib64",
                                     "link libcudart.so.13 targets/x86_64-linux/lib/libcudart.so",
                                     "link targets/x86_64-linux/lib/libcudart.so libcudart.so",
                                     "link ../bin/nvcc targets/nvcc"}));
  EXPECT_TRUE(real.ok()) << real.status();
  // Inside by its text, out once followed: the deep link the issue found
  // (up -> d1) and the file written through the link that climbs through it.
  std::string deep;
  std::string up;
  for (int i = 1; i <= 24; ++i) absl::StrAppend(&deep, "d", i, "/");
  for (int i = 1; i <= 23; ++i) absl::StrAppend(&up, i > 1 ? "/" : "", "..");
  const std::string deep_link = "link " + up + " " + deep + "up";
  const std::string climb = "link " + deep + "up/../../../../victim evil.part";
  const std::string evil = absl::StrCat("file ", kHash, " 7 x evil");
  EXPECT_THAT(ParseToolkitManifest(Manifest({nvcc, deep_link, evil, climb})).status().message(),
              HasSubstr("up, which is not a folder of the toolkit but a link"));
  // The same lines in the attacker's order (the link before the file):
  // refused for that already.
  const std::string head = "distcc-cuda toolkit manifest 1\n";
  EXPECT_THAT(
      ParseToolkitManifest(head + nvcc + "\n" + deep_link + "\n" + climb + "\n" + evil + "\n")
          .status()
          .message(),
      HasSubstr("lists evil after evil.part"));
  // The deep link itself, one more "..": the toolkit's own folder.
  EXPECT_THAT(ParseToolkitManifest(Manifest({nvcc, "link ../" + up + " " + deep + "up"}))
                  .status()
                  .message(),
              HasSubstr("leads to the toolkit's own folder"));
  // A chain longer than kMaxToolkitLinkChain.
  std::vector<std::string> chain = {nvcc, "link bin/nvcc l0"};
  for (int i = 1; i <= kMaxToolkitLinkChain + 1; ++i)
    chain.push_back(absl::StrCat("link l", i - 1, " l", i));
  EXPECT_THAT(ParseToolkitManifest(Manifest(chain)).status().message(),
              HasSubstr("more than 8 links"));
}

TEST(ToolkitManifestTest, AHostileManifestIsRefusedInTimeLinearInItsSize) {
  const std::string head = "distcc-cuda toolkit manifest 1\n";
  // 80,000 names in one path, and 16 MiB of empty lines: both refused at
  // once (the old checks took 27 s for 40,000 names, 300 MiB for the lines).
  std::string names;
  for (int i = 0; i < 80000; ++i) absl::StrAppend(&names, i > 0 ? "/" : "", "a");
  absl::Time start = absl::Now();
  EXPECT_EQ(ParseToolkitManifest(head + absl::StrCat("file ", kHash, " 7 - ", names, "\n"))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseToolkitManifest(head + std::string(kMaxToolkitManifestBytes - head.size(), '\n'))
                .status()
                .message(),
            "the toolkit manifest lists more than 100000 entries");
  // The largest manifest allowed: 100,000 entries of the deepest paths, in
  // a few seconds at most on a slow machine.
  std::string deep;  // with a folder before and a name after: the deepest path allowed
  for (int i = 0; i < kMaxToolkitPathDepth - 2; ++i) absl::StrAppend(&deep, "d/");
  std::vector<std::string> lines;
  for (int i = 0; i < kMaxToolkitEntries; ++i) {
    lines.push_back(absl::StrCat("file ", kHash, " 7 - ", i % 97, "/", deep, i));
  }
  const std::string large = Manifest(std::move(lines));
  start = absl::Now();
  absl::StatusOr<std::vector<ToolkitEntry>> parsed = ParseToolkitManifest(large);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  // One name deeper than the limit allows.
  EXPECT_EQ(ParseToolkitManifest(head + absl::StrCat("file ", kHash, " 7 - a/", deep, "x/y\n"))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ToolkitManifestTest, WhatAToolkitTakesOnDiskCountsFoldersLinksAndWholeBlocks) {
  absl::StatusOr<std::vector<ToolkitEntry>> entries = ParseToolkitManifest(
      Manifest({absl::StrCat("file ", kHash, " 5000 x a/b/nvcc"),
                "file e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 0 - a/empty",
                "link a/b/nvcc nvcc"}));
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_EQ(ToolkitBytes(*entries), 5000);
  const ToolkitDiskCost cost = DiskCostOf(*entries);
  // 2 blocks of nvcc, 1 of the empty file, 1 of the link, 1 each of a and a/b.
  EXPECT_EQ(cost.bytes, 6 * 4096);
  EXPECT_EQ(cost.inodes, 5);
  std::vector<std::string> many;
  for (int i = 0; i <= kMaxToolkitFolders; ++i)
    many.push_back(absl::StrCat("file ", kHash, " 7 - f", i, "/x"));
  EXPECT_THAT(ParseToolkitManifest(Manifest(many)).status().message(),
              HasSubstr("make more than 20000 folders"));
}

TEST(ToolkitManifestTest, APartLeavesOutLinksToWhatItLeavesOut) {
  const std::string home = testing::NewTempDir("manifest-part-") + "/cuda";
  WriteNvcc(home + "/bin/nvcc");
  ASSERT_TRUE(WriteFileAtomically(home + "/extras/demo.txt", "x").ok());
  fs::create_symlink("../extras/demo.txt", home + "/bin/demo");
  fs::create_directory_symlink("extras", home + "/samples");
  absl::StatusOr<std::string> part =
      ManifestOf(home, [](const std::string& path) { return path.rfind("extras", 0) != 0; });
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_THAT(*part, HasSubstr(" bin/nvcc\n"));
  EXPECT_THAT(*part, ::testing::Not(HasSubstr("demo")));
  EXPECT_THAT(*part, ::testing::Not(HasSubstr("samples")));
  EXPECT_TRUE(ParseToolkitManifest(*part).ok());
}

}  // namespace
}  // namespace distcc_cuda
