// SPDX-License-Identifier: Apache-2.0
#include "common/store/input_tree.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status.h"

namespace distcc_cuda {
namespace {

// One path component: not empty, not "." or "..", no '/' and no NUL.
bool IsPlainName(absl::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(absl::string_view("/\0", 2)) == absl::string_view::npos;
}

// A folder being built, its entries sorted by name as std::map keeps them.
struct Folder {
  std::map<std::string, v1::FileNode> files;
  std::map<std::string, std::unique_ptr<Folder>> folders;
};

// Serializes `folder` below its sub-folders, adding each Directory blob to
// `tree` once; returns the folder's digest.
Digest Store(const Folder& folder, InputTree& tree, std::map<Digest, bool>& stored) {
  v1::Directory directory;
  for (const auto& [name, file] : folder.files) *directory.add_files() = file;
  for (const auto& [name, child] : folder.folders) {
    v1::DirectoryNode* node = directory.add_directories();
    node->set_name(name);
    *node->mutable_digest() = ToProto(Store(*child, tree, stored));
  }
  std::string bytes = directory.SerializeAsString();
  Digest digest = DigestOf(bytes);
  if (stored.emplace(digest, true).second) tree.directories.emplace_back(digest, std::move(bytes));
  return digest;
}

}  // namespace

absl::StatusOr<InputTree> BuildInputTree(
    const google::protobuf::RepeatedPtrField<v1::InputFile>& inputs) {
  Folder root;
  for (const v1::InputFile& input : inputs) {
    std::vector<absl::string_view> parts = absl::StrSplit(input.path(), '/');
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", absl::CHexEscape(input.path()), "' ", why));
    };
    for (absl::string_view part : parts) {
      if (!IsPlainName(part)) return bad("is not a relative path of plain names");
    }
    Folder* folder = &root;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      std::string name(parts[i]);
      if (folder->files.count(name) != 0) return bad("lies under a file of the same name");
      std::unique_ptr<Folder>& child = folder->folders[name];
      if (child == nullptr) child = std::make_unique<Folder>();
      folder = child.get();
    }
    std::string name(parts.back());
    if (folder->folders.count(name) != 0) return bad("is also a folder of inputs");
    v1::FileNode node;
    node.set_name(name);
    *node.mutable_digest() = input.digest();
    node.set_is_executable(input.is_executable());
    if (!folder->files.emplace(name, std::move(node)).second) return bad("is listed twice");
  }
  InputTree tree;
  std::map<Digest, bool> stored;
  tree.root = Store(root, tree, stored);
  return tree;
}

struct InputTreeExpander::Walk {
  const InputTreeLimits& limits;
  std::vector<v1::InputFile> files;
  int64_t folders = 0;
};

absl::StatusOr<const v1::Directory*> InputTreeExpander::Read(const Digest& digest,
                                                             const std::string& where,
                                                             const InputTreeLimits& limits) {
  auto it = checked_.find(digest);
  if (it != checked_.end()) return it->second.get();
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("input tree: folder '", where, "' (", digest.ToString(), ") ", why));
  };
  RETURN_IF_ERROR(ValidateDigest(digest));
  if (digest.size_bytes > limits.max_folder_bytes) {
    return bad(absl::StrCat("is a blob of ", digest.size_bytes, " bytes; a folder may take ",
                            limits.max_folder_bytes));
  }
  ASSIGN_OR_RETURN(std::string bytes, fetch_(digest));
  auto directory = std::make_unique<v1::Directory>();
  if (!directory->ParseFromString(bytes)) return bad("is not a Directory message");
  const std::string* last = nullptr;
  for (const v1::FileNode& file : directory->files()) {
    if (!IsPlainName(file.name())) {
      return bad(absl::StrCat("names a file '", absl::CHexEscape(file.name()),
                              "', which is not a plain name"));
    }
    if (last != nullptr && !(*last < file.name())) {
      return bad(absl::StrCat("lists its files out of order or twice (at '", file.name(), "')"));
    }
    last = &file.name();
    if (absl::Status valid = ValidateDigest(FromProto(file.digest())); !valid.ok()) {
      return bad(absl::StrCat("file '", file.name(), "': ", valid.message()));
    }
  }
  last = nullptr;
  for (const v1::DirectoryNode& folder : directory->directories()) {
    if (!IsPlainName(folder.name())) {
      return bad(absl::StrCat("names a folder '", absl::CHexEscape(folder.name()),
                              "', which is not a plain name"));
    }
    if (last != nullptr && !(*last < folder.name())) {
      return bad(
          absl::StrCat("lists its folders out of order or twice (at '", folder.name(), "')"));
    }
    last = &folder.name();
    auto same = std::lower_bound(
        directory->files().begin(), directory->files().end(), folder.name(),
        [](const v1::FileNode& file, const std::string& name) { return file.name() < name; });
    if (same != directory->files().end() && same->name() == folder.name()) {
      return bad(absl::StrCat("has both a file and a folder named '", folder.name(), "'"));
    }
  }
  const v1::Directory* kept = directory.get();
  checked_.emplace(digest, std::move(directory));
  return kept;
}

absl::Status InputTreeExpander::Visit(const Digest& digest, const std::string& prefix, int depth,
                                      Walk& walk) {
  const std::string where = prefix.empty() ? "." : prefix.substr(0, prefix.size() - 1);
  if (depth > walk.limits.max_depth) {
    return absl::InvalidArgumentError(absl::StrCat("input tree: folder '", where, "' lies ", depth,
                                                   " folders deep; at most ", walk.limits.max_depth,
                                                   " are allowed"));
  }
  if (++walk.folders > walk.limits.max_folders) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input tree: more than ", walk.limits.max_folders, " folders (at '", where, "')"));
  }
  ASSIGN_OR_RETURN(const v1::Directory* directory, Read(digest, where, walk.limits));
  if (static_cast<int64_t>(walk.files.size()) + directory->files_size() > walk.limits.max_files) {
    return absl::InvalidArgumentError(
        absl::StrCat("input tree: more than ", walk.limits.max_files, " files (at '", where, "')"));
  }
  for (const v1::FileNode& file : directory->files()) {
    v1::InputFile& input = walk.files.emplace_back();
    input.set_path(prefix + file.name());
    *input.mutable_digest() = file.digest();
    input.set_is_executable(file.is_executable());
  }
  for (const v1::DirectoryNode& folder : directory->directories()) {
    RETURN_IF_ERROR(
        Visit(FromProto(folder.digest()), prefix + folder.name() + "/", depth + 1, walk));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::InputFile>> InputTreeExpander::Expand(
    const Digest& root, const InputTreeLimits& limits) {
  Walk walk{limits, {}, 0};
  RETURN_IF_ERROR(Visit(root, "", 0, walk));
  std::sort(walk.files.begin(), walk.files.end(),
            [](const v1::InputFile& a, const v1::InputFile& b) { return a.path() < b.path(); });
  return std::move(walk.files);
}

absl::StatusOr<InputTreeExpander::Size> InputTreeExpander::SizeOf(const Digest& digest,
                                                                  const std::string& where,
                                                                  int depth,
                                                                  const InputTreeLimits& limits) {
  if (depth > limits.max_depth) {
    return absl::InvalidArgumentError(absl::StrCat("input tree: folder '", where, "' lies ", depth,
                                                   " folders deep; at most ", limits.max_depth,
                                                   " are allowed"));
  }
  auto known = sizes_.find(digest);
  if (known == sizes_.end()) {
    ASSIGN_OR_RETURN(const v1::Directory* directory, Read(digest, where, limits));
    // Counts stop growing far above any limit: a bomb of 2^64 files must
    // not wrap around to a small number.
    constexpr int64_t kCeiling = int64_t{1} << 60;
    Size size{directory->files_size(), 1, 1, 0};
    for (const v1::FileNode& file : directory->files()) {
      size.bytes =
          std::min(kCeiling, size.bytes + std::max<int64_t>(0, file.digest().size_bytes()));
    }
    for (const v1::DirectoryNode& folder : directory->directories()) {
      std::string below = where == "." ? folder.name() : absl::StrCat(where, "/", folder.name());
      ASSIGN_OR_RETURN(Size child, SizeOf(FromProto(folder.digest()), below, depth + 1, limits));
      size.files = std::min(kCeiling, size.files + child.files);
      size.folders = std::min(kCeiling, size.folders + child.folders);
      size.height = std::max(size.height, child.height + 1);
      size.bytes = std::min(kCeiling, size.bytes + child.bytes);
    }
    known = sizes_.emplace(digest, size).first;
  }
  const Size& size = known->second;
  if (depth + size.height - 1 > limits.max_depth) {
    return absl::InvalidArgumentError(
        absl::StrCat("input tree: folder '", where, "' holds folders ", depth + size.height - 1,
                     " folders deep; at most ", limits.max_depth, " are allowed"));
  }
  return size;
}

absl::StatusOr<int64_t> InputTreeExpander::CountBytes(const Digest& root,
                                                      const InputTreeLimits& limits) {
  RETURN_IF_ERROR(CountFiles(root, limits).status());
  return sizes_.at(root).bytes;
}

absl::StatusOr<int64_t> InputTreeExpander::CountFiles(const Digest& root,
                                                      const InputTreeLimits& limits) {
  ASSIGN_OR_RETURN(Size size, SizeOf(root, ".", 0, limits));
  if (size.files > limits.max_files) {
    return absl::InvalidArgumentError(
        absl::StrCat("input tree: more than ", limits.max_files, " files (", size.files, ")"));
  }
  if (size.folders > limits.max_folders) {
    return absl::InvalidArgumentError(absl::StrCat("input tree: more than ", limits.max_folders,
                                                   " folders (", size.folders, ")"));
  }
  return size.files;
}

absl::Status InputTreeExpander::VisitNew(const Digest& digest, const std::string& prefix,
                                         const VisitFile& visit, const InputTreeLimits& limits) {
  if (!walked_.emplace(digest, prefix).second) return absl::OkStatus();
  // Read and checked by CountFiles already.
  ASSIGN_OR_RETURN(const v1::Directory* directory, Read(digest, prefix, limits));
  for (const v1::FileNode& file : directory->files()) {
    RETURN_IF_ERROR(visit(prefix + file.name(), file));
  }
  for (const v1::DirectoryNode& folder : directory->directories()) {
    RETURN_IF_ERROR(
        VisitNew(FromProto(folder.digest()), prefix + folder.name() + "/", visit, limits));
  }
  return absl::OkStatus();
}

absl::Status InputTreeExpander::VisitNewFiles(const Digest& root, const VisitFile& visit,
                                              const InputTreeLimits& limits) {
  RETURN_IF_ERROR(CountFiles(root, limits).status());
  return VisitNew(root, "", visit, limits);
}

absl::StatusOr<const v1::FileNode*> InputTreeExpander::Find(const Digest& root,
                                                            absl::string_view path,
                                                            const InputTreeLimits& limits) {
  std::vector<absl::string_view> parts = absl::StrSplit(path, '/');
  Digest folder = root;
  std::string where = ".";
  for (size_t i = 0;; ++i) {
    ASSIGN_OR_RETURN(const v1::Directory* directory, Read(folder, where, limits));
    if (i + 1 == parts.size()) {
      auto file = std::lower_bound(
          directory->files().begin(), directory->files().end(), parts[i],
          [](const v1::FileNode& node, absl::string_view name) { return node.name() < name; });
      if (file != directory->files().end() && file->name() == parts[i]) return &*file;
      return nullptr;
    }
    auto next = std::lower_bound(
        directory->directories().begin(), directory->directories().end(), parts[i],
        [](const v1::DirectoryNode& node, absl::string_view name) { return node.name() < name; });
    if (next == directory->directories().end() || next->name() != parts[i]) return nullptr;
    folder = FromProto(next->digest());
    where = i == 0 ? std::string(parts[i]) : absl::StrCat(where, "/", parts[i]);
  }
}

namespace {

// A folder of a tree being added to: a copy of its Directory (or a new,
// empty one) and the sub-folders on the added files' paths, rewritten too.
struct Overlay {
  v1::Directory directory;
  std::map<std::string, std::unique_ptr<Overlay>> changed;
};

// The digest of `overlay` with its changed sub-folders' new digests in place.
Digest Seal(Overlay& overlay) {
  auto& folders = *overlay.directory.mutable_directories();
  for (auto& [name, child] : overlay.changed) {
    Digest digest = Seal(*child);
    auto at = std::lower_bound(
        folders.begin(), folders.end(), name,
        [](const v1::DirectoryNode& node, const std::string& n) { return node.name() < n; });
    if (at == folders.end() || at->name() != name) {
      v1::DirectoryNode node;
      node.set_name(name);
      size_t index = at - folders.begin();
      folders.Add(std::move(node));
      for (size_t i = folders.size() - 1; i > index; --i) folders.SwapElements(i, i - 1);
      at = folders.begin() + index;
    }
    *at->mutable_digest() = ToProto(digest);
  }
  return DigestOf(overlay.directory.SerializeAsString());
}

}  // namespace

absl::StatusOr<Digest> InputTreeExpander::RootWith(
    const Digest* root, const google::protobuf::RepeatedPtrField<v1::InputFile>& files,
    const InputTreeLimits& limits) {
  if (root != nullptr && files.empty()) return *root;
  Overlay top;
  if (root != nullptr) {
    ASSIGN_OR_RETURN(const v1::Directory* directory, Read(*root, ".", limits));
    top.directory = *directory;
  }
  for (const v1::InputFile& input : files) {
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", absl::CHexEscape(input.path()), "' ", why));
    };
    std::vector<absl::string_view> parts = absl::StrSplit(input.path(), '/');
    for (absl::string_view part : parts) {
      if (!IsPlainName(part)) return bad("is not a relative path of plain names");
    }
    auto has_file = [](const v1::Directory& directory, absl::string_view name) {
      auto at = std::lower_bound(
          directory.files().begin(), directory.files().end(), name,
          [](const v1::FileNode& node, absl::string_view n) { return node.name() < n; });
      return at != directory.files().end() && at->name() == name;
    };
    auto folder_node = [](const v1::Directory& directory,
                          absl::string_view name) -> const v1::DirectoryNode* {
      auto at = std::lower_bound(
          directory.directories().begin(), directory.directories().end(), name,
          [](const v1::DirectoryNode& node, absl::string_view n) { return node.name() < n; });
      return at != directory.directories().end() && at->name() == name ? &*at : nullptr;
    };
    Overlay* folder = &top;
    std::string where = ".";
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      std::string name(parts[i]);
      where = i == 0 ? name : absl::StrCat(where, "/", name);
      if (has_file(folder->directory, name)) return bad("lies under a file of the same name");
      std::unique_ptr<Overlay>& child = folder->changed[name];
      if (child == nullptr) {
        child = std::make_unique<Overlay>();
        if (const v1::DirectoryNode* node = folder_node(folder->directory, name)) {
          ASSIGN_OR_RETURN(const v1::Directory* directory,
                           Read(FromProto(node->digest()), where, limits));
          child->directory = *directory;
        }
      }
      folder = child.get();
    }
    absl::string_view name = parts.back();
    if (folder_node(folder->directory, name) != nullptr ||
        folder->changed.count(std::string(name))) {
      return bad("is also a folder of inputs");
    }
    if (has_file(folder->directory, name)) return bad("is listed twice");
    auto& listed = *folder->directory.mutable_files();
    auto at = std::lower_bound(
        listed.begin(), listed.end(), name,
        [](const v1::FileNode& node, absl::string_view n) { return node.name() < n; });
    size_t index = at - listed.begin();
    v1::FileNode* node = listed.Add();
    node->set_name(std::string(name));
    *node->mutable_digest() = input.digest();
    node->set_is_executable(input.is_executable());
    for (size_t i = listed.size() - 1; i > index; --i) listed.SwapElements(i, i - 1);
  }
  return Seal(top);
}

absl::Status ExpandUnitInputs(v1::CompileUnit& unit, const FetchDirectory& fetch,
                              const InputTreeLimits& limits) {
  if (!unit.has_input_root()) return absl::OkStatus();
  InputTreeExpander expander(fetch);
  ASSIGN_OR_RETURN(std::vector<v1::InputFile> files,
                   expander.Expand(FromProto(unit.input_root()), limits));
  unit.mutable_inputs()->Reserve(unit.inputs_size() + files.size());
  for (v1::InputFile& file : files) *unit.add_inputs() = std::move(file);
  unit.clear_input_root();
  return absl::OkStatus();
}

std::vector<Digest> InputTreeExpander::FoldersRead() const {
  std::vector<Digest> folders;
  for (const auto& [digest, directory] : checked_) folders.push_back(digest);
  return folders;
}

}  // namespace distcc_cuda
