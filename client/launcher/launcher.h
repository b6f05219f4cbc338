// SPDX-License-Identifier: Apache-2.0
// `distcc-cuda [/path/to/]nvcc ARGS...` and `distcc-cuda g++ ARGS...`: the
// launcher a build tool runs in place of nvcc (CMAKE_CUDA_COMPILER_LAUNCHER,
// PYTORCH_NVCC) and of its host C++ compiler (CMAKE_CXX_COMPILER_LAUNCHER,
// CXX). One compile of a .cu file, or of a .cpp file with the g++ the
// toolchain names, to an object becomes one unit on the cluster; everything
// else (links, -E, -M alone, --version, -dlink, other languages, arguments
// the model refuses) runs the real compiler here, unchanged. To the caller
// it is that compiler: the same exit code, output, object and dependency
// file.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/launcher/launcher_call.h"
#include "client/plan/options.h"

namespace distcc_cuda::client {

// Decides from the arguments alone (nvcc's, or with `host_compiler` the host
// C++ compiler's); nothing runs.
LauncherDecision DecideWhereToCompile(const std::vector<std::string>& arguments,
                                      bool host_compiler = false);

// This program's absolute path (the launcher a session hands its command);
// "" when /proc/self/exe cannot be read.
std::string LauncherPath();

// True when argv[1] of `distcc-cuda` names nvcc: "nvcc", or a path whose
// file name is nvcc.
bool LooksLikeNvcc(const std::string& word);
// True when argv[1] of `distcc-cuda` names a compiler rather than one of its
// commands: nvcc, or a host C++ compiler (LooksLikeHostCompiler: c++, g++,
// g++-12, clang++...).
bool LooksLikeCompiler(const std::string& word);

// The real nvcc for `word`: a path as it is (made absolute), a bare "nvcc"
// looked up in $PATH, skipping this program itself (a PATH entry that is a
// link to distcc-cuda), then $CUDA_HOME/bin/nvcc and /usr/local/cuda/bin
// (PATH and CUDA_HOME of `environment`). NOT_FOUND saying where it looked.
absl::StatusOr<std::string> ResolveRealNvcc(const std::string& word,
                                            const ClientEnvironment& environment);

// The file beside a link to the launcher named as a host compiler (`build
// --` makes STATE_DIR/compilers/HASH/c++) that names the real compiler.
inline constexpr char kRealCompilerFile[] = "real";

// The real compiler behind the launcher run as `argv0` (a link named as a
// host compiler): $DISTCC_CUDA_CXX, else what the link's folder's `real`
// file names, else the link's own name (looked up in PATH).
std::string RealCompilerBehind(const std::string& argv0, const ClientEnvironment& environment);

// The real compiler for `word`: ResolveRealNvcc for nvcc; a host compiler
// as a path (made absolute) or looked up in $PATH, skipping this program.
absl::StatusOr<std::string> ResolveRealCompiler(const std::string& word,
                                                const ClientEnvironment& environment);

// Runs the launcher for argv[1..] (argv[1] is the compiler) and returns the exit
// code for the caller; may exec the real nvcc and not return. Follows
// `environment`: $DISTCC_CUDA_SESSION (the `distcc-cuda build --` that runs
// this build), $DISTCC_CUDA_COORDINATOR (a cluster to use directly) with
// $DISTCC_CUDA_TLS_*, $DISTCC_CUDA_FALLBACK (=local: compile here when the
// cluster cannot be reached) and $DISTCC_CUDA_VERBOSE (=1: say on stderr
// where each compile runs and why).
int RunLauncher(int argc, char** argv, const ClientEnvironment& environment);

}  // namespace distcc_cuda::client
