// SPDX-License-Identifier: Apache-2.0
#include "common/input_tree.h"

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

v1::InputFile Input(const std::string& path, const std::string& content, bool executable = false) {
  v1::InputFile input;
  input.set_path(path);
  *input.mutable_digest() = ToProto(DigestOf(content));
  input.set_is_executable(executable);
  return input;
}

google::protobuf::RepeatedPtrField<v1::InputFile> Inputs(std::vector<v1::InputFile> files) {
  google::protobuf::RepeatedPtrField<v1::InputFile> inputs;
  for (v1::InputFile& file : files) *inputs.Add() = std::move(file);
  return inputs;
}

// A store of Directory blobs, as the CAS would hold them.
struct Blobs {
  std::map<Digest, std::string> held;
  int reads = 0;
  void Add(const InputTree& tree) {
    for (const auto& [digest, bytes] : tree.directories) held[digest] = bytes;
  }
  Digest Put(const v1::Directory& directory) {
    std::string bytes = directory.SerializeAsString();
    Digest digest = DigestOf(bytes);
    held[digest] = bytes;
    return digest;
  }
  FetchDirectory Fetch() {
    return [this](const Digest& digest) -> absl::StatusOr<std::string> {
      ++reads;
      auto it = held.find(digest);
      if (it == held.end()) return absl::FailedPreconditionError("not in the store");
      return it->second;
    };
  }
};

TEST(InputTreeTest, FilesComeBackFromTheirTreeAsTheyWentIn) {
  auto inputs = Inputs({Input("src/k.cu", "kernel"), Input("include/cute/tensor.hpp", "tensor"),
                        Input("include/cute/arch/mma.hpp", "mma"), Input("tool.sh", "#!", true),
                        Input("include/a.h", "a")});
  absl::StatusOr<InputTree> tree = BuildInputTree(inputs);
  ASSERT_TRUE(tree.ok()) << tree.status();
  // One blob per folder: ., include, include/cute, include/cute/arch, src.
  EXPECT_EQ(tree->directories.size(), 5u);
  Blobs blobs;
  blobs.Add(*tree);
  InputTreeExpander expander(blobs.Fetch());
  absl::StatusOr<std::vector<v1::InputFile>> files = expander.Expand(tree->root);
  ASSERT_TRUE(files.ok()) << files.status();
  std::vector<std::string> listed;
  for (const v1::InputFile& file : *files) {
    listed.push_back(absl::StrCat(file.path(), " ", file.digest().hash().substr(0, 8), " ",
                                  file.digest().size_bytes(), file.is_executable() ? " x" : ""));
  }
  auto line = [](const std::string& path, const std::string& content, bool x = false) {
    Digest digest = DigestOf(content);
    return absl::StrCat(path, " ", digest.hash.substr(0, 8), " ", digest.size_bytes, x ? " x" : "");
  };
  EXPECT_THAT(listed, ::testing::ElementsAre(
                          line("include/a.h", "a"), line("include/cute/arch/mma.hpp", "mma"),
                          line("include/cute/tensor.hpp", "tensor"), line("src/k.cu", "kernel"),
                          line("tool.sh", "#!", true)));
  EXPECT_EQ(expander.FoldersRead().size(), 5u);
}

TEST(InputTreeTest, TheRootNamesTheFilesNotTheirOrder) {
  absl::StatusOr<InputTree> one = BuildInputTree(Inputs({Input("a/x.h", "x"), Input("b.cu", "b")}));
  absl::StatusOr<InputTree> two = BuildInputTree(Inputs({Input("b.cu", "b"), Input("a/x.h", "x")}));
  absl::StatusOr<InputTree> edited =
      BuildInputTree(Inputs({Input("b.cu", "b"), Input("a/x.h", "x, edited")}));
  absl::StatusOr<InputTree> executable =
      BuildInputTree(Inputs({Input("b.cu", "b", true), Input("a/x.h", "x")}));
  ASSERT_TRUE(one.ok() && two.ok() && edited.ok() && executable.ok());
  EXPECT_EQ(one->root, two->root);
  EXPECT_NE(one->root, edited->root);
  EXPECT_NE(one->root, executable->root);
  // Folder "a" (stored before the root) is the same blob while its file is.
  EXPECT_EQ(one->directories.front(), executable->directories.front());
  EXPECT_NE(one->directories.front(), edited->directories.front());
}

// Units that include the same headers share their folders' blobs: after
// the first unit's tree, the others read only their own root and source.
TEST(InputTreeTest, TreesThatShareFoldersReadThemOnce) {
  std::vector<v1::InputFile> headers;
  for (int i = 0; i < 50; ++i) {
    headers.push_back(Input(absl::StrCat("include/cutlass/h", i, ".hpp"), absl::StrCat(i)));
  }
  Blobs blobs;
  std::vector<Digest> roots;
  for (int unit = 0; unit < 10; ++unit) {
    std::vector<v1::InputFile> files = headers;
    files.push_back(Input(absl::StrCat("gemm_", unit, ".cu"), absl::StrCat("unit ", unit)));
    absl::StatusOr<InputTree> tree = BuildInputTree(Inputs(files));
    ASSERT_TRUE(tree.ok());
    blobs.Add(*tree);
    roots.push_back(tree->root);
  }
  // 10 roots, one include/ and one include/cutlass/.
  EXPECT_EQ(blobs.held.size(), 12u);
  InputTreeExpander expander(blobs.Fetch());
  for (const Digest& root : roots) {
    absl::StatusOr<std::vector<v1::InputFile>> files = expander.Expand(root);
    ASSERT_TRUE(files.ok()) << files.status();
    EXPECT_EQ(files->size(), 51u);
  }
  EXPECT_EQ(blobs.reads, 12);
}

TEST(InputTreeTest, PathsThatNameNoPlainFileAreRefused) {
  for (const std::string& path :
       {std::string(""), std::string("/etc/passwd"), std::string("a/../b"), std::string("./a"),
        std::string("a//b"), std::string("a/"), std::string("a\0b", 3)}) {
    absl::StatusOr<InputTree> tree = BuildInputTree(Inputs({Input(path, "x")}));
    EXPECT_EQ(tree.status().code(), absl::StatusCode::kInvalidArgument) << path;
  }
  EXPECT_THAT(BuildInputTree(Inputs({Input("a.h", "x"), Input("a.h", "y")})).status().message(),
              HasSubstr("'a.h' is listed twice"));
  EXPECT_THAT(BuildInputTree(Inputs({Input("a", "x"), Input("a/b.h", "y")})).status().message(),
              HasSubstr("'a/b.h' lies under a file of the same name"));
  EXPECT_THAT(BuildInputTree(Inputs({Input("a/b.h", "y"), Input("a", "x")})).status().message(),
              HasSubstr("'a' is also a folder of inputs"));
}

// Every Directory is bytes from the network: each rule is checked.
TEST(InputTreeTest, MalformedFoldersAreRefusedNamingTheFolder) {
  v1::FileNode good;
  good.set_name("a.h");
  *good.mutable_digest() = ToProto(DigestOf("a"));
  auto expand = [](Blobs& blobs, const Digest& root) {
    InputTreeExpander expander(blobs.Fetch());
    return expander.Expand(root).status();
  };
  struct Case {
    std::string what;
    std::function<void(v1::Directory&)> make;
    std::string error;
  };
  std::vector<Case> cases = {
      {"dot-dot",
       [&](v1::Directory& d) {
         *d.add_files() = good;
         d.mutable_files(0)->set_name("..");
       },
       "names a file '..'"},
      {"slash",
       [&](v1::Directory& d) {
         *d.add_files() = good;
         d.mutable_files(0)->set_name("x/y");
       },
       "names a file 'x/y'"},
      {"twice",
       [&](v1::Directory& d) {
         *d.add_files() = good;
         *d.add_files() = good;
       },
       "out of order or twice (at 'a.h')"},
      {"unsorted",
       [&](v1::Directory& d) {
         *d.add_files() = good;
         *d.add_files() = good;
         d.mutable_files(0)->set_name("z.h");
       },
       "out of order or twice (at 'a.h')"},
      {"bad digest",
       [&](v1::Directory& d) {
         *d.add_files() = good;
         d.mutable_files(0)->mutable_digest()->set_hash("../../etc");
       },
       "file 'a.h'"},
      {"file and folder",
       [&](v1::Directory& d) {
         *d.add_files() = good;
         v1::DirectoryNode* node = d.add_directories();
         node->set_name("a.h");
         *node->mutable_digest() = ToProto(DigestOf(""));
       },
       "both a file and a folder named 'a.h'"},
      {"empty folder name",
       [&](v1::Directory& d) {
         v1::DirectoryNode* node = d.add_directories();
         *node->mutable_digest() = ToProto(DigestOf(""));
       },
       "names a folder ''"},
  };
  for (const Case& c : cases) {
    Blobs blobs;
    v1::Directory directory;
    c.make(directory);
    Digest root = blobs.Put(directory);
    absl::Status status = expand(blobs, root);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.error)) << c.what;
    EXPECT_THAT(std::string(status.message()), HasSubstr("folder '.'")) << c.what;
  }
  Blobs blobs;
  Digest not_a_directory = DigestOf("\xff\xff\xff");
  blobs.held[not_a_directory] = "\xff\xff\xff";
  EXPECT_THAT(expand(blobs, not_a_directory).message(), HasSubstr("is not a Directory message"));
  // A sub-folder the store lacks: the fetch's own error comes back.
  v1::Directory root;
  v1::DirectoryNode* node = root.add_directories();
  node->set_name("include");
  *node->mutable_digest() = ToProto(DigestOf("never stored"));
  Blobs lacking;
  absl::Status missing = expand(lacking, lacking.Put(root));
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition) << missing;
}

// 40 levels of a folder listing the same sub-folder twice: 41 blobs that
// describe 2^40 files. The walk stops at its bounds.
TEST(InputTreeTest, ATreeBombStopsAtTheLimits) {
  Blobs blobs;
  v1::Directory leaf;
  v1::FileNode* file = leaf.add_files();
  file->set_name("x.h");
  *file->mutable_digest() = ToProto(DigestOf("x"));
  Digest below = blobs.Put(leaf);
  for (int level = 0; level < 40; ++level) {
    v1::Directory twice;
    for (const char* name : {"a", "b"}) {
      v1::DirectoryNode* node = twice.add_directories();
      node->set_name(name);
      *node->mutable_digest() = ToProto(below);
    }
    below = blobs.Put(twice);
  }
  InputTreeExpander expander(blobs.Fetch());
  absl::StatusOr<std::vector<v1::InputFile>> files = expander.Expand(below);
  EXPECT_EQ(files.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(files.status().message(), HasSubstr("more than 50000"));
  EXPECT_LE(blobs.reads, 41);

  InputTreeLimits shallow;
  shallow.max_depth = 10;
  files = expander.Expand(below, shallow);
  EXPECT_THAT(files.status().message(), HasSubstr("11 folders deep; at most 10"));

  InputTreeLimits few;
  few.max_files = 3;
  few.max_folders = 1000000;
  files = expander.Expand(below, few);
  EXPECT_THAT(files.status().message(), HasSubstr("more than 3 files"));
}

}  // namespace
}  // namespace distcc_cuda
