// SPDX-License-Identifier: Apache-2.0
// The input trees of one build, read from the store and checked once for
// the whole build. A CUTLASS library's 55,000 units name a few hundred
// trees that share a few thousand folders: each folder is read, each file's
// path checked and each blob looked up once, and the planned units keep
// their roots (workers expand them: ExpandUnitInputs), so what the
// coordinator holds grows with the build's distinct files, not with units
// times the headers each includes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/store/cas_store.h"
#include "common/store/digest.h"
#include "common/store/input_tree.h"
#include "coordinator/planning/build_limits.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::coordinator {

class BuildInputs {
 public:
  // Reads every tree that `request`'s units and sets name from `cas` and
  // checks it: each folder (InputTreeExpander), each file's path as an
  // input of a unit at the build's workspace root (ValidateInputPath), each
  // file's digest well formed and in the store, and the build's bounds
  // (files per tree: --max-inputs-per-unit; files listed by all units and
  // sets together: --max-input-listings-per-build). INVALID_ARGUMENT for a
  // malformed tree or path and FAILED_PRECONDITION for a folder or file the
  // store lacks, each naming the unit or set; RESOURCE_EXHAUSTED past a
  // limit.
  static absl::StatusOr<std::unique_ptr<BuildInputs>> Read(const v1::SubmitBuildRequest& request,
                                                           const CasStore& cas,
                                                           const BuildLimits& limits);

  // The files of the tree at `root`, as Read counted them; 0 for a tree
  // Read did not see.
  int64_t FilesIn(const v1::Digest& root) const;
  // Their bytes; 0 for a tree Read did not see.
  int64_t BytesIn(const v1::Digest& root) const;

  // The UnitPriors markers (UnitPriors::Builtin) among the files of the
  // tree at `root`; none for a tree Read did not see.
  std::vector<std::string> MarkersIn(const v1::Digest& root) const;

  // Every blob the trees name, files and folders, each once: what the store
  // must keep while the build runs.
  const std::vector<Digest>& blobs() const { return blobs_; }

  // The trees' distinct files: hash -> size (for --max-build-input-size).
  const std::map<std::string, int64_t>& file_sizes() const { return file_sizes_; }

  // The trees, for looking up a path or naming a tree with more files.
  InputTreeExpander& trees() { return *trees_; }
  const InputTreeLimits& tree_limits() const { return tree_limits_; }

 private:
  BuildInputs() = default;
  // Notes the markers the tree at `root` holds (markers_in_).
  absl::Status FindMarkers(const Digest& root);

  std::unique_ptr<InputTreeExpander> trees_;
  InputTreeLimits tree_limits_;
  std::map<Digest, int64_t> files_in_;                     // per root
  std::map<Digest, int64_t> bytes_in_;                     // per root
  std::map<Digest, std::vector<std::string>> markers_in_;  // per root
  std::vector<Digest> blobs_;
  std::map<std::string, int64_t> file_sizes_;
};

// A blob a build names (its plan, a folder of an input tree), its bytes
// checked against its digest: one damaged on disk is dropped and, like one
// never uploaded, FAILED_PRECONDITION `missing`.
absl::StatusOr<std::string> ReadNamedBlob(const CasStore& cas, const Digest& digest,
                                          const std::string& missing);

// The folders of trees a build names, read from `cas` with their bytes
// checked against their digests: a damaged copy is dropped and, like one
// never uploaded, FAILED_PRECONDITION.
FetchDirectory FoldersFrom(const CasStore& cas);

// How far a build's trees may reach: --max-inputs-per-unit files, and as
// many folders.
InputTreeLimits TreeLimitsOf(const BuildLimits& limits);

}  // namespace distcc_cuda::coordinator
