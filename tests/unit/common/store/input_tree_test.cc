// SPDX-License-Identifier: Apache-2.0
#include "common/store/input_tree.h"

#include <algorithm>
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
// The trees of 10 units that include the same 50 headers, each with its
// own source in the tree, into `blobs`; returns their roots.
std::vector<Digest> TenUnitsSharingHeaders(Blobs& blobs) {
  std::vector<v1::InputFile> headers;
  for (int i = 0; i < 50; ++i) {
    headers.push_back(Input(absl::StrCat("include/cutlass/h", i, ".hpp"), absl::StrCat(i)));
  }
  std::vector<Digest> roots;
  for (int unit = 0; unit < 10; ++unit) {
    std::vector<v1::InputFile> files = headers;
    files.push_back(Input(absl::StrCat("gemm_", unit, ".cu"), absl::StrCat("unit ", unit)));
    absl::StatusOr<InputTree> tree = BuildInputTree(Inputs(files));
    EXPECT_TRUE(tree.ok());
    if (!tree.ok()) return roots;
    blobs.Add(*tree);
    roots.push_back(tree->root);
  }
  return roots;
}

TEST(InputTreeTest, TreesThatShareFoldersReadThemOnce) {
  Blobs blobs;
  std::vector<Digest> roots = TenUnitsSharingHeaders(blobs);
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

// What the coordinator does with a build's trees instead of expanding
// them: count each, visit each shared folder's files once, find a path.
TEST(InputTreeTest, SharedFoldersAreCountedAndVisitedOnce) {
  Blobs blobs;
  std::vector<Digest> roots = TenUnitsSharingHeaders(blobs);
  ASSERT_EQ(roots.size(), 10u);
  InputTreeExpander expander(blobs.Fetch());
  std::vector<std::string> visited;
  for (const Digest& root : roots) {
    absl::StatusOr<int64_t> count = expander.CountFiles(root);
    ASSERT_TRUE(count.ok()) << count.status();
    EXPECT_EQ(*count, 51);
    ASSERT_TRUE(expander
                    .VisitNewFiles(root,
                                   [&](const std::string& path, const v1::FileNode&) {
                                     visited.push_back(path);
                                     return absl::OkStatus();
                                   })
                    .ok());
  }
  // The 50 headers once, and each unit's own source.
  EXPECT_EQ(visited.size(), 60u);
  // A tree's bytes: its 50 headers' ("0".."49": 90 bytes) and its source's.
  EXPECT_EQ(expander.CountBytes(roots[3]).value_or(-1), 90 + 6);
  EXPECT_EQ(std::count(visited.begin(), visited.end(), "include/cutlass/h7.hpp"), 1);
  EXPECT_EQ(blobs.reads, 12);

  absl::StatusOr<const v1::FileNode*> found = expander.Find(roots[3], "include/cutlass/h7.hpp");
  ASSERT_TRUE(found.ok() && *found != nullptr);
  EXPECT_EQ(FromProto((*found)->digest()), DigestOf("7"));
  for (const char* absent : {"include/cutlass/h77.hpp", "include/cute/h7.hpp", "include",
                             "gemm_4.cu", "include/cutlass/h7.hpp/x"}) {
    found = expander.Find(roots[3], absent);
    ASSERT_TRUE(found.ok()) << absent;
    EXPECT_EQ(*found, nullptr) << absent;
  }
  // A visit's error stops the walk and comes back as it was.
  InputTreeExpander fresh(blobs.Fetch());
  absl::Status refused =
      fresh.VisitNewFiles(roots[0], [](const std::string& path, const v1::FileNode&) {
        return absl::InvalidArgumentError(absl::StrCat("refused ", path));
      });
  EXPECT_THAT(std::string(refused.message()), HasSubstr("refused gemm_0.cu"));
}

// A tree with more files names them as the list of all of them would, so
// a unit's action digest does not depend on which files it sent as a tree.
TEST(InputTreeTest, ATreeWithMoreFilesIsNamedAsTheirList) {
  std::vector<v1::InputFile> shared = {Input("include/cute/tensor.hpp", "tensor"),
                                       Input("include/cute/arch/mma.hpp", "mma"),
                                       Input("include/a.h", "a"), Input("z/z.h", "z")};
  absl::StatusOr<InputTree> tree = BuildInputTree(Inputs(shared));
  ASSERT_TRUE(tree.ok());
  Blobs blobs;
  blobs.Add(*tree);
  InputTreeExpander expander(blobs.Fetch());
  const std::vector<std::vector<v1::InputFile>> added = {
      {},
      {Input("gemm.cu", "kernel")},
      {Input("include/cute/b.hpp", "b"), Input("src/deep/k.cu", "k", true)},
      {Input("include/cute/arch/aaa.hpp", "aaa"), Input("include/0.h", "0")},
  };
  for (const auto& own : added) {
    std::vector<v1::InputFile> all = shared;
    all.insert(all.end(), own.begin(), own.end());
    absl::StatusOr<InputTree> whole = BuildInputTree(Inputs(all));
    ASSERT_TRUE(whole.ok());
    absl::StatusOr<Digest> root = expander.RootWith(&tree->root, Inputs(own));
    ASSERT_TRUE(root.ok()) << root.status();
    EXPECT_EQ(*root, whole->root) << own.size() << " files added";
    absl::StatusOr<Digest> listed = expander.RootWith(nullptr, Inputs(all));
    ASSERT_TRUE(listed.ok());
    EXPECT_EQ(*listed, whole->root);
  }
  struct Case {
    v1::InputFile file;
    const char* error;
  };
  for (const Case& c : std::vector<Case>{
           {Input("include/a.h", "other"), "'include/a.h' is listed twice"},
           {Input("include/cute", "x"), "'include/cute' is also a folder of inputs"},
           {Input("include/a.h/b.h", "x"), "'include/a.h/b.h' lies under a file"},
           {Input("../etc/passwd", "x"), "is not a relative path of plain names"},
           {Input("/abs.h", "x"), "is not a relative path of plain names"},
           {Input("include//a.h", "x"), "is not a relative path of plain names"},
       }) {
    absl::Status status = expander.RootWith(&tree->root, Inputs({c.file})).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.file.path();
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.error)) << c.file.path();
  }
  EXPECT_THAT(std::string(expander.RootWith(nullptr, Inputs({Input("a.h", "1"), Input("a.h", "2")}))
                              .status()
                              .message()),
              HasSubstr("'a.h' is listed twice"));
}

// What a worker lays out: the unit's own files and its tree's.
TEST(InputTreeTest, AUnitsTreeIsExpandedBesideItsOwnFiles) {
  absl::StatusOr<InputTree> tree =
      BuildInputTree(Inputs({Input("include/a.h", "a"), Input("include/b.h", "b")}));
  ASSERT_TRUE(tree.ok());
  Blobs blobs;
  blobs.Add(*tree);
  v1::CompileUnit unit;
  *unit.add_inputs() = Input("k.cu", "kernel");
  *unit.mutable_input_root() = ToProto(tree->root);
  ASSERT_TRUE(ExpandUnitInputs(unit, blobs.Fetch()).ok());
  EXPECT_FALSE(unit.has_input_root());
  std::vector<std::string> paths;
  for (const v1::InputFile& input : unit.inputs()) paths.push_back(input.path());
  EXPECT_THAT(paths, ::testing::ElementsAre("k.cu", "include/a.h", "include/b.h"));
  // Without a root, nothing changes; a root the store lacks is the fetch's error.
  v1::CompileUnit listed = unit;
  ASSERT_TRUE(ExpandUnitInputs(listed, blobs.Fetch()).ok());
  EXPECT_EQ(listed.SerializeAsString(), unit.SerializeAsString());
  *listed.mutable_input_root() = ToProto(DigestOf("never stored"));
  EXPECT_EQ(ExpandUnitInputs(listed, blobs.Fetch()).code(), absl::StatusCode::kFailedPrecondition);
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

  // Counted without a walk: one read per distinct folder, 2^40 files.
  InputTreeExpander counter(blobs.Fetch());
  blobs.reads = 0;
  absl::StatusOr<int64_t> count = counter.CountFiles(below);
  EXPECT_THAT(count.status().message(), HasSubstr("more than 50000 files (1099511627776)"));
  EXPECT_EQ(blobs.reads, 41);
  InputTreeLimits roomy;
  roomy.max_files = int64_t{1} << 41;
  roomy.max_folders = int64_t{1} << 42;
  EXPECT_EQ(counter.CountFiles(below, roomy).value_or(-1), int64_t{1} << 40);
  // Its bytes the same way: 2^40 files of one byte.
  absl::StatusOr<int64_t> bytes = counter.CountBytes(below, roomy);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, int64_t{1} << 40);
  EXPECT_THAT(counter.CountFiles(below, shallow).status().message(),
              HasSubstr("40 folders deep; at most 10"));
  EXPECT_THAT(counter
                  .VisitNewFiles(below, [](const std::string&,
                                           const v1::FileNode&) { return absl::OkStatus(); })
                  .message(),
              HasSubstr("more than 50000 files"));
  EXPECT_EQ(blobs.reads, 41);
}

}  // namespace
}  // namespace distcc_cuda
