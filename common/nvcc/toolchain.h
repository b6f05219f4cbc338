// SPDX-License-Identifier: Apache-2.0
// The toolchain fingerprint: which nvcc (release, build, content of its
// compiler stages) and which host compiler a unit is compiled with. Workers
// take only builds whose fingerprint equals their own.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/process/subprocess.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda {

// Computes the fingerprint of the nvcc at `nvcc_path` (its toolkit is the
// folder above its bin/) and of its host compiler `host_compiler` (looked up
// in PATH). NOT_FOUND naming the path if nvcc is missing; FAILED_PRECONDITION
// if `nvcc --version` does not say which release it is.
//
// Hashing nvcc, cicc and ptxas (150 MB) takes a quarter of a second; with a
// `hash_cache_dir` the hashes are kept there and reused while
// ToolchainFilesSignature is unchanged (ccache checks its compiler by
// modification time the same way). `nvcc --version` and the host
// compiler's version are asked every time.
// The host compiler that clients and workers fingerprint, found in PATH:
// the one nvcc runs by default, and the one that compiles a build's .cpp
// units on workers (UNIT_COMPILER_HOST_CXX).
inline constexpr char kHostCompiler[] = "g++";

// How the programs of the toolkit being fingerprinted run (nvcc --version,
// nvcc --dryrun for a wrapper), and what of their words is taken.
struct ToolkitPrograms {
  ProcessRunner run = RunProcess;
  // Fetched from a coordinator: its bin/nvcc is taken as its toolkit's own,
  // never as a wrapper whose dry run names another folder of this machine
  // (whose files would then be hashed and named). A worker runs such a
  // toolkit's programs in its sandbox, under its cap.
  bool fetched = false;
};

absl::StatusOr<v1::ToolchainFingerprint> ComputeToolchainFingerprint(
    const std::string& nvcc_path, const std::string& host_compiler = kHostCompiler,
    const std::string& hash_cache_dir = "", const ToolkitPrograms& programs = {});

// ComputeToolchainFingerprint, once per process for the same arguments
// while the toolkit's files (ToolchainFilesSignature) and the host compiler
// found in $PATH keep their inode, size and times: the embedded worker and
// the build's client in one process fingerprint the same nvcc, and a caller
// arriving while another computes it waits for that answer (`nvcc --version`
// and `g++ --version` cost 10-40 ms, before the first unit is sent). A
// failure is not remembered.
absl::StatusOr<v1::ToolchainFingerprint> SharedToolchainFingerprint(
    const std::string& nvcc_path, const std::string& host_compiler,
    const std::string& hash_cache_dir);

// What `nvcc --version` says of itself: "13.0", "13.0.88" and
// "cuda_13.0.r13.0/compiler.36424714_0" (the last two "" when it does not
// say). NOT_FOUND if `nvcc_path` is no program; FAILED_PRECONDITION if it
// names no release. Costs 10-40 ms and hashes nothing.
struct NvccRelease {
  std::string release;
  std::string version;
  std::string build;
};
// `nvcc --version` runs through `run` (see ComputeToolchainFingerprint).
absl::StatusOr<NvccRelease> AskNvccRelease(const std::string& nvcc_path,
                                           const ProcessRunner& run = RunProcess);

// OK if `required` is empty or names the fingerprint's release: "12.8"
// matches any 12.8.x, "12.8.93" only that version. Else FAILED_PRECONDITION
// naming the release found, where, and how to point at the right one;
// INVALID_ARGUMENT for a `required` that is not MAJOR.MINOR[.PATCH].
absl::Status CheckRequiredRelease(const v1::ToolchainFingerprint& toolchain,
                                  const std::string& required);

// The nvcc program of the toolkit that `nvcc_path` runs, absolute, named as
// the toolkit names it (symlinks kept): usually the path itself. Some images put a wrapper script
// on PATH
// (/usr/local/bin/nvcc: `exec /usr/local/cuda-13.0/bin/nvcc "$@"`) whose
// folder is not a toolkit; the wrapper is asked, since nvcc's dry run
// prints the folder it runs from (`#$ _HERE_=/usr/local/cuda-13.0/bin`). A
// program that does not answer so (the tests' fake compiler) is its own
// toolkit's nvcc.
// The dry run runs as `programs` says; a fetched toolkit's nvcc is its own.
std::string ToolkitNvccOf(const std::string& nvcc_path, const ToolkitPrograms& programs = {});

// A cheap signature of the files the fingerprint hashes (nvcc, cicc, ptxas:
// inode, size, modification and change time), to notice a toolkit replaced
// under a running process without hashing it again.
// A wrapper's dry run (ToolkitNvccOf) runs as `programs` says.
std::string ToolchainFilesSignature(const std::string& nvcc_path,
                                    const ToolkitPrograms& programs = {});

// One line for people: "nvcc 13.0 (cuda_13.0.r13.0/compiler.36424714_0), g++ ... [digest
// 1a2b3c4d]".
std::string DescribeToolchain(const v1::ToolchainFingerprint& toolchain);

// Finds the nvcc to use: `flag_value` if set, else $CUDA_HOME/bin/nvcc from
// `cuda_home`, else /usr/local/cuda/bin/nvcc. NOT_FOUND saying where it looked.
absl::StatusOr<std::string> ResolveNvcc(const std::string& flag_value,
                                        const std::string& cuda_home);

}  // namespace distcc_cuda
