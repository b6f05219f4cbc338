// SPDX-License-Identifier: Apache-2.0
// A compile unit's inputs as a Merkle tree (the Remote Execution API's
// model): one Directory blob per folder, naming its files by digest and its
// sub-folders by their own Directory's digest, so a tree is named by its
// root's digest. Units that include the same headers share those folders'
// blobs, which are stored and sent once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/store/digest.h"
#include "distcc_cuda/v1/build.pb.h"
#include "distcc_cuda/v1/cas.pb.h"

namespace distcc_cuda {

struct InputTree {
  Digest root;
  // Every Directory blob of the tree (the root's among them), each once.
  std::vector<std::pair<Digest, std::string>> directories;
};

// The tree of `inputs` (paths relative to the tree's root). INVALID_ARGUMENT
// for a path that is empty, absolute or has an empty, "." or ".." part, a
// path given twice, or a name that is both a file and a folder. The same
// files give the same root, in whatever order they are listed.
absl::StatusOr<InputTree> BuildInputTree(
    const google::protobuf::RepeatedPtrField<v1::InputFile>& inputs);

// What expanding one tree may cost: a tree names folders by digest, so a
// few small blobs can describe a folder listed under itself many times over
// (a "tree bomb"); the walk stops at these bounds instead.
struct InputTreeLimits {
  int64_t max_files = 50000;           // files listed, counted over the whole walk
  int64_t max_folders = 50000;         // folders visited, the same folder again counted again
  int max_depth = 64;                  // folders within folders
  int64_t max_folder_bytes = 4 << 20;  // one Directory blob
};

// Returns a Directory blob's bytes, or an error that names what is missing.
using FetchDirectory = std::function<absl::StatusOr<std::string>(const Digest& digest)>;

// Expands trees into their files. Every Directory it reads is checked (its
// names are single path components, each list is sorted with no name twice,
// no name is both a file and a folder, every digest is well formed), and
// kept, so trees that share folders read and parse each folder once.
class InputTreeExpander {
 public:
  explicit InputTreeExpander(FetchDirectory fetch) : fetch_(std::move(fetch)) {}

  // The files of the tree at `root`, sorted by path. INVALID_ARGUMENT for a
  // malformed folder or a walk past `limits`, naming the folder; the fetch's
  // own error for a folder it cannot find.
  absl::StatusOr<std::vector<v1::InputFile>> Expand(const Digest& root,
                                                    const InputTreeLimits& limits = {});

  // How many files the tree at `root` holds (a folder listed twice counted
  // twice), without walking its paths: each folder's size is kept, so a
  // tree bomb costs one read per distinct folder. INVALID_ARGUMENT for a
  // malformed folder or a tree past `limits`; the fetch's error for a
  // folder it cannot find.
  absl::StatusOr<int64_t> CountFiles(const Digest& root, const InputTreeLimits& limits = {});

  // The bytes of the files of the tree at `root` (by their digests' sizes;
  // a file listed twice counted twice), as CountFiles counts them and with
  // its errors.
  absl::StatusOr<int64_t> CountBytes(const Digest& root, const InputTreeLimits& limits = {});

  // Calls `visit` with the path (from the root) and node of each file of
  // the tree at `root` that lies in a folder this expander has not yet
  // walked at that place: trees that share folders at the same paths (the
  // headers every unit of a build includes) visit those files once. Checks
  // the tree's size first (CountFiles); stops at `visit`'s first error.
  using VisitFile = std::function<absl::Status(const std::string& path, const v1::FileNode& file)>;
  absl::Status VisitNewFiles(const Digest& root, const VisitFile& visit,
                             const InputTreeLimits& limits = {});

  // The file at `path` in the tree at `root`, or null when the tree has no
  // file there. Errors as CountFiles's.
  absl::StatusOr<const v1::FileNode*> Find(const Digest& root, absl::string_view path,
                                           const InputTreeLimits& limits = {});

  // The root of the tree at `root` (null: the empty tree) with `files`
  // added: the digest BuildInputTree gives the list of all of them, so a
  // unit names the same inputs by the same digest whether it lists them or
  // sends a tree. Only the folders on the added files' paths are read and
  // rewritten, in memory. INVALID_ARGUMENT for a path that is not a
  // relative path of plain names, that the tree or `files` already has, or
  // that lies under a file or is a folder.
  absl::StatusOr<Digest> RootWith(const Digest* root,
                                  const google::protobuf::RepeatedPtrField<v1::InputFile>& files,
                                  const InputTreeLimits& limits = {});

  // The Directory blobs read so far, distinct.
  std::vector<Digest> FoldersRead() const;

 private:
  struct Walk;
  struct Size {
    int64_t files = 0;
    int64_t folders = 0;
    int height = 0;  // folders on the longest path down, this one included
    int64_t bytes = 0;
  };
  absl::StatusOr<const v1::Directory*> Read(const Digest& digest, const std::string& where,
                                            const InputTreeLimits& limits);
  absl::Status Visit(const Digest& digest, const std::string& prefix, int depth, Walk& walk);
  absl::StatusOr<Size> SizeOf(const Digest& digest, const std::string& where, int depth,
                              const InputTreeLimits& limits);
  absl::Status VisitNew(const Digest& digest, const std::string& prefix, const VisitFile& visit,
                        const InputTreeLimits& limits);

  FetchDirectory fetch_;
  std::map<Digest, std::unique_ptr<v1::Directory>> checked_;
  std::map<Digest, Size> sizes_;
  std::set<std::pair<Digest, std::string>> walked_;  // (folder, its path) by VisitNewFiles
};

// Replaces `unit`'s input_root with the files of its tree, after the files
// the unit lists itself: what a worker (or --verify) lays out. A unit
// without a root is left as it is. Errors as InputTreeExpander::Expand's.
absl::Status ExpandUnitInputs(v1::CompileUnit& unit, const FetchDirectory& fetch,
                              const InputTreeLimits& limits = {});

}  // namespace distcc_cuda
