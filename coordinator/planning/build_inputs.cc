// SPDX-License-Identifier: Apache-2.0
#include "coordinator/planning/build_inputs.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/nvcc/nvcc_args.h"
#include "coordinator/memory/unit_prior.h"

namespace distcc_cuda::coordinator {

absl::StatusOr<std::string> ReadNamedBlob(const CasStore& cas, const Digest& digest,
                                          const std::string& missing) {
  absl::StatusOr<std::string> bytes = cas.Get(digest);
  if (bytes.ok() && DigestOf(*bytes) == digest) return bytes;
  if (bytes.ok()) cas.Discard(digest, "a blob a build names read back damaged");
  return MissingBlobsError(missing, {digest.BlobSubject()});
}

InputTreeLimits TreeLimitsOf(const BuildLimits& limits) {
  InputTreeLimits tree;
  tree.max_files = limits.max_inputs_per_unit;
  tree.max_folders = limits.max_inputs_per_unit;
  return tree;
}

FetchDirectory FoldersFrom(const CasStore& cas) {
  return [&cas](const Digest& digest) {
    return ReadNamedBlob(
        cas, digest,
        absl::StrCat("its folder ", digest.ToString(),
                     " is not in the content store; upload the tree's folders before submitting"));
  };
}

absl::StatusOr<std::unique_ptr<BuildInputs>> BuildInputs::Read(
    const v1::SubmitBuildRequest& request, const CasStore& cas, const BuildLimits& limits) {
  std::unique_ptr<BuildInputs> inputs(new BuildInputs());
  inputs->trees_ = std::make_unique<InputTreeExpander>(FoldersFrom(cas));
  inputs->tree_limits_ = TreeLimitsOf(limits);
  const std::vector<std::string> system_prefixes = SystemIncludePrefixes();
  std::set<std::string> checked_paths;
  std::set<Digest> files;
  int64_t listed = 0;
  auto read = [&](const std::string& owner, const v1::Digest* tree,
                  int64_t own_files) -> absl::Status {
    auto named = [&owner](const absl::Status& status) { return Annotate(status, owner); };
    int64_t in_tree = 0;
    if (tree != nullptr) {
      const Digest root = FromProto(*tree);
      RETURN_IF_ERROR(named(ValidateDigest(root)));
      auto known = inputs->files_in_.find(root);
      if (known != inputs->files_in_.end()) {
        in_tree = known->second;
      } else {
        absl::StatusOr<int64_t> count = inputs->trees_->CountFiles(root, inputs->tree_limits_);
        if (!count.ok()) return named(count.status());
        in_tree = *count;
        RETURN_IF_ERROR(named(inputs->trees_->VisitNewFiles(
            root,
            [&](const std::string& path, const v1::FileNode& file) -> absl::Status {
              if (checked_paths.insert(path).second) {
                RETURN_IF_ERROR(ValidateInputPath(request.workspace_root(), path, system_prefixes));
              }
              Digest digest = FromProto(file.digest());
              if (!files.insert(digest).second) return absl::OkStatus();
              if (!cas.Contains(digest)) {
                return MissingBlobsError(
                    absl::StrCat("input ", path, " (", digest.ToString(),
                                 ") is not in the content store; upload it before submitting"),
                    {digest.BlobSubject()});
              }
              inputs->file_sizes_[digest.hash] = digest.size_bytes;
              inputs->blobs_.push_back(std::move(digest));
              return absl::OkStatus();
            },
            inputs->tree_limits_)));
        inputs->files_in_.emplace(root, in_tree);
        absl::StatusOr<int64_t> bytes = inputs->trees_->CountBytes(root, inputs->tree_limits_);
        if (!bytes.ok()) return named(bytes.status());
        inputs->bytes_in_.emplace(root, *bytes);
        RETURN_IF_ERROR(named(inputs->FindMarkers(root)));
      }
    }
    listed += in_tree + own_files;
    if (listed > limits.max_input_listings) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the build's units list more than ", limits.max_input_listings,
          " input files in all (a header every unit includes counts once per unit); this "
          "coordinator allows ",
          limits.max_input_listings,
          " (--max-input-listings-per-build); split the build, or ask the operator to raise the "
          "limit"));
    }
    return absl::OkStatus();
  };
  for (const v1::CompileUnit& unit : request.units()) {
    RETURN_IF_ERROR(read(absl::StrCat("unit ", unit.name().substr(0, 200)),
                         unit.has_input_root() ? &unit.input_root() : nullptr, unit.inputs_size()));
  }
  for (const v1::InstantiationSet& set : request.instantiation_sets()) {
    RETURN_IF_ERROR(read(absl::StrCat("instantiation set ", set.name().substr(0, 200)),
                         set.has_input_root() ? &set.input_root() : nullptr, set.inputs_size()));
  }
  for (Digest& folder : inputs->trees_->FoldersRead()) inputs->blobs_.push_back(std::move(folder));
  return inputs;
}

int64_t BuildInputs::BytesIn(const v1::Digest& root) const {
  auto known = bytes_in_.find(FromProto(root));
  return known == bytes_in_.end() ? 0 : known->second;
}

absl::Status BuildInputs::FindMarkers(const Digest& root) {
  ASSIGN_OR_RETURN(std::vector<v1::InputFile> files, trees_->Expand(root, tree_limits_));
  std::vector<std::string> paths;
  paths.reserve(files.size());
  for (v1::InputFile& file : files) paths.push_back(std::move(*file.mutable_path()));
  std::vector<std::string> markers = UnitPriors::Builtin().MarkersIn(paths);
  if (!markers.empty()) markers_in_.emplace(root, std::move(markers));
  return absl::OkStatus();
}

std::vector<std::string> BuildInputs::MarkersIn(const v1::Digest& root) const {
  auto known = markers_in_.find(FromProto(root));
  return known == markers_in_.end() ? std::vector<std::string>() : known->second;
}

int64_t BuildInputs::FilesIn(const v1::Digest& root) const {
  auto known = files_in_.find(FromProto(root));
  return known == files_in_.end() ? 0 : known->second;
}

}  // namespace distcc_cuda::coordinator
