// SPDX-License-Identifier: Apache-2.0
// The kernel manifest (TOML): ordinary sources, instantiation sets with the
// axes of their grids, nvcc flags, target architectures and the library to
// link. See docs/using.md, "The kernel manifest", for the format.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/plan/link_step.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::client {

struct KernelManifest {
  std::string path;                // the manifest file, absolute
  std::string directory;           // its folder; relative paths start here
  std::string output;              // library file name, e.g. libattention_sm100.so
  std::vector<std::string> archs;  // default {"sm_100"}
  std::vector<std::string> flags;  // nvcc flags for every unit
  // The [link] table; its defaults are PyTorch cpp_extension's link
  // (g++ -shared, the shared CUDA runtime). [build] link_flags is read as
  // [link] flags.
  LinkRecipe link;
  std::vector<std::string> sources;  // ordinary sources, one unit each
  // Name, unit name template, headers, text, axes and manifest location set;
  // directory, arguments and inputs are filled in by the build.
  std::vector<v1::InstantiationSet> instantiation_sets;
};

// Reads and checks the manifest at `path`. INVALID_ARGUMENT with
// "FILE:LINE:COLUMN: what is wrong" for TOML syntax errors, wrong types,
// unknown keys, placeholders without an axis; NOT_FOUND naming the file for a
// missing manifest, source or header.
absl::StatusOr<KernelManifest> LoadKernelManifest(const std::string& path);

// Same checks as LoadKernelManifest on a manifest's `text`: `path` names it in
// messages and is kept as KernelManifest::path as given; its sources and
// headers are looked up (relative ones from `directory`) and must exist.
absl::StatusOr<KernelManifest> ParseKernelManifest(const std::string& text, const std::string& path,
                                                   const std::string& directory);

}  // namespace distcc_cuda::client
