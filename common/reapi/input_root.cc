// SPDX-License-Identifier: Apache-2.0
#include "common/reapi/input_root.h"

#include <map>
#include <set>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "distcc_cuda/v1/cas.pb.h"

namespace distcc_cuda {
namespace {

// Folders below an input root, and distinct folders in one tree.
constexpr int kMaxTreeDepth = 64;
constexpr int64_t kMaxTreeFolders = 100000;

bool IsPathComponent(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string("/\0", 2)) == std::string::npos;
}

// Converts the REAPI folders of one tree into the store's, each once.
class TreeConverter {
 public:
  TreeConverter(const ReapiFolderReader& read, CasStore& cas, int64_t max_files,
                absl::string_view max_files_flag, CasPin& pin)
      : read_(read), cas_(cas), max_files_(max_files), max_files_flag_(max_files_flag), pin_(pin) {}

  absl::StatusOr<Digest> Convert(const reapi::Digest& folder, int depth) {
    if (depth > kMaxTreeDepth) {
      return absl::InvalidArgumentError(absl::StrCat("the input root is more than ", kMaxTreeDepth,
                                                     " folders deep; a compile needs less"));
    }
    if (auto done = converted_.find(folder.hash()); done != converted_.end()) return done->second;
    if (static_cast<int64_t>(converted_.size()) >= kMaxTreeFolders) {
      return absl::InvalidArgumentError(
          absl::StrCat("the input root has more than ", kMaxTreeFolders, " distinct folders"));
    }
    reapi::Directory theirs;
    RETURN_IF_ERROR(read_(folder, theirs));
    ASSIGN_OR_RETURN(v1::Directory ours, ConvertFolder(theirs, depth));
    ASSIGN_OR_RETURN(Digest stored, cas_.PutBytes(ours.SerializeAsString()));
    pin_.Add({stored});
    converted_[folder.hash()] = stored;
    return stored;
  }

 private:
  absl::Status CheckName(const std::string& name, std::set<std::string>& names) {
    if (!IsPathComponent(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a name in the input root, '", absl::CHexEscape(name), "', is not one path component"));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("the input root names '", absl::CHexEscape(name), "' twice in a folder"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<v1::Directory> ConvertFolder(const reapi::Directory& theirs, int depth) {
    if (theirs.symlinks_size() > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the input root holds a symlink ('", absl::CHexEscape(theirs.symlinks(0).name()),
          "'); distcc-cuda runs compiles on plain files only: have the build tool resolve "
          "symlinks in inputs"));
    }
    std::set<std::string> names;
    v1::Directory ours;
    for (const reapi::FileNode& file : theirs.files()) {
      RETURN_IF_ERROR(CheckName(file.name(), names));
      if (++files_ > max_files_) {
        return absl::InvalidArgumentError(absl::StrCat("the input root has more than ", max_files_,
                                                       " files (", max_files_flag_, ")"));
      }
      RETURN_IF_ERROR(ValidateDigest(FromReapi(file.digest())));
      v1::FileNode* node = ours.add_files();
      node->set_name(file.name());
      *node->mutable_digest() = ToProto(FromReapi(file.digest()));
      node->set_is_executable(file.is_executable());
    }
    for (const reapi::DirectoryNode& child : theirs.directories()) {
      RETURN_IF_ERROR(CheckName(child.name(), names));
      ASSIGN_OR_RETURN(Digest converted, Convert(child.digest(), depth + 1));
      v1::DirectoryNode* node = ours.add_directories();
      node->set_name(child.name());
      *node->mutable_digest() = ToProto(converted);
    }
    return ours;
  }

  const ReapiFolderReader& read_;
  CasStore& cas_;
  const int64_t max_files_;
  const std::string max_files_flag_;
  CasPin& pin_;
  std::map<std::string, Digest> converted_;  // by REAPI folder hash
  int64_t files_ = 0;
};

}  // namespace

absl::StatusOr<Digest> ConvertInputRoot(const reapi::Digest& root, const ReapiFolderReader& read,
                                        CasStore& cas, int64_t max_files,
                                        absl::string_view max_files_flag, CasPin& pin) {
  TreeConverter converter(read, cas, max_files, max_files_flag, pin);
  return converter.Convert(root, 0);
}

}  // namespace distcc_cuda
