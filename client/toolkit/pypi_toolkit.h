// SPDX-License-Identifier: Apache-2.0
// The compile toolkit of a CUDA 13 release from PyPI's NVIDIA wheels: the
// `cuda-toolkit` package's `nvcc` and `cccl` parts (nvcc, cicc, ptxas,
// fatbinary, nvlink, the crt and CCCL headers, cudart), fetched by pip and
// laid out as a CUDA_HOME.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "common/nvcc/cuda_release.h"

namespace distcc_cuda::client {

// Whether PyPI has a compiler for `release`: CUDA 13 on. (The cu12 wheels,
// `nvidia-cuda-nvcc-cu12` 12.0 to 12.9, hold ptxas and headers but no nvcc,
// cicc or fatbinary.)
bool PyPiHasCompiler(const CudaRelease& release);

// What to do to get a release PyPI lacks, as words for a message
// ("install CUDA 12.8 from NVIDIA ... and build with --toolkit FOLDER ...").
std::string WhereToGet(const CudaRelease& release);

// Runs `python -m pip install --target` for `release` in the new folder
// `scratch` and leaves the toolkit in `scratch`/cuda: bin/nvcc, nvvm/bin/cicc,
// include/, lib/ with lib64 a link to it and libcudart.so beside
// libcudart.so.MAJOR, as torch's cpp_extension and CMake look for them.
// "13.2" takes the newest 13.2 that PyPI has, "13.2.86" exactly that nvcc.
// FAILED_PRECONDITION with pip's last lines when pip fails, naming the
// command; INTERNAL when the wheels lack a part of the compiler.
absl::Status FetchFromPyPi(const CudaRelease& release, const std::string& scratch,
                           const std::string& python);

}  // namespace distcc_cuda::client
