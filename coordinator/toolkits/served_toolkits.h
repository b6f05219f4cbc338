// SPDX-License-Identifier: Apache-2.0
// The toolkits the operator added to the coordinator (`distcc-cuda-
// coordinator toolkit add`): every file of a toolkit folder a blob of the
// coordinator's content store, its manifest a blob too, whose digest names
// the toolkit; the list in the state dir's toolkits.tsv. The coordinator
// pins their blobs (no size limit evicts them) and lists them to workers
// and clients (ContentStore.ListToolkits), who read the files as blobs.
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/store/cas_store.h"
#include "distcc_cuda/v1/cas.pb.h"

namespace distcc_cuda::coordinator {

// The list's file in a state dir.
std::string ServedToolkitsPathIn(const std::string& state_dir);

// The list as written; an empty list without the file. INTERNAL naming the
// line for a damaged one.
absl::StatusOr<std::vector<v1::ServedToolkit>> ReadServedToolkits(const std::string& state_dir);

// Whether a toolkit folder's path (relative: "bin/nvcc") is a part that a
// compile, and a link against the CUDA runtime, use: bin/'s compiler
// programs (nvcc, ptxas, fatbinary, nvlink, cudafe++, bin2c, crt/, ...),
// nvvm/, the headers (include/, targets/*/include, cuda_cccl/), and of the
// library folders only the CUDA runtime, libcudadevrt, libnvvm and the
// driver's link stub. Not the math and profiling libraries, debuggers or
// Nsight: /usr/local/cuda here is 2.7 GB, its compile part about 0.2 GB.
bool IsCompileToolkitPart(const std::string& relative);

// What `toolkit add` stores of a folder.
enum class ToolkitPart { kCompile, kWhole };

// Adds the toolkit in `folder` (a CUDA folder with bin/nvcc: an install of
// NVIDIA's, or one `distcc-cuda toolkit install` made) to the coordinator
// whose state is in `state_dir`, which must not be running (the state
// dir's lock): its compile part (IsCompileToolkitPart), or with kWhole
// every file. A toolkit of the same nvcc version is replaced. Says what it
// did on `out`.
absl::StatusOr<v1::ServedToolkit> AddServedToolkit(const std::string& state_dir,
                                                   const std::string& folder, std::ostream& out,
                                                   ToolkitPart part = ToolkitPart::kCompile);

// Removes the toolkits of `version` ("13.2.86", or "13.2": every 13.2.x)
// from the list (their blobs leave the store as its size limit needs
// room). NOT_FOUND if none.
absl::Status RemoveServedToolkits(const std::string& state_dir, const std::string& version,
                                  std::ostream& out);

// At the coordinator's start: the listed toolkits whose manifest and files
// are all in `store`, with their blobs pinned while `pin` lives; a toolkit
// with a blob missing or damaged is left out, and logged.
std::vector<v1::ServedToolkit> LoadServedToolkits(const std::string& state_dir,
                                                  const CasStore& store,
                                                  std::unique_ptr<CasPin>* pin);

}  // namespace distcc_cuda::coordinator
