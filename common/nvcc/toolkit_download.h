// SPDX-License-Identifier: Apache-2.0
// A toolkit a coordinator serves, fetched into a folder of this machine:
// how workers get a toolkit they lack and clients the cluster's toolkit
// (`distcc-cuda toolkit install RELEASE --coordinator`).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/nvcc/cuda_release.h"
#include "common/store/blob_client.h"
#include "distcc_cuda/v1/cas.grpc.pb.h"

namespace distcc_cuda {

// The toolkits the coordinator behind `stub` serves, as it lists them.
absl::StatusOr<std::vector<v1::ServedToolkit>> ListServedToolkits(
    v1::ContentStore::StubInterface& stub, absl::Duration timeout = absl::Seconds(30));

// The newest of `served` that `wanted` admits. NOT_FOUND naming what the
// coordinator serves (or that it serves none) and how an operator adds one.
absl::StatusOr<v1::ServedToolkit> ChooseServedToolkit(const std::vector<v1::ServedToolkit>& served,
                                                      const CudaRelease& wanted);

// Downloads `toolkit` into the new folder `destination`: its manifest
// (ParseToolkitManifest: hostile until checked), every file checked
// against its digest as it arrives, its links, the manifest written beside
// them; then the whole folder is checked against the manifest
// (VerifyManifest). Errors name the file and leave `destination` for the
// caller to remove.
absl::Status DownloadToolkit(BlobClient& blobs, const v1::ServedToolkit& toolkit,
                             const std::string& destination);

// "CUDA 13.2.86 (305.1 MiB, 402 files, added from /opt/cuda-13.2)".
std::string DescribeServedToolkit(const v1::ServedToolkit& toolkit);

}  // namespace distcc_cuda
