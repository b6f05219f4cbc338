// SPDX-License-Identifier: Apache-2.0
// The canonical places a unit's arguments name: the workspace and each
// input root under /distcc-cuda (client/plan/workspace_layout.h), and the
// compiling toolkit at kCanonicalToolkitRoot. A client names the folders
// of its own toolkit (-I$CUDA_HOME/include in a host compile, whether
// CUDA_HOME is /usr/local/cuda, /usr/local/cuda-13.0 or ~/cuda) by one path,
// so that a team's compiles with one toolkit at different places are one
// result; the worker that runs a unit places them in the toolkit the unit's
// toolchain names. An engine's Action names the canonical places relative
// to its working directory, inside its input root, where any engine's
// workers find them.
#pragma once

#include <string>
#include <vector>

#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda {

// The folder every canonical place lies in.
inline constexpr char kCanonicalArea[] = "/distcc-cuda";

// Where a unit's arguments name the compiling toolkit's root. Never a path
// of any machine: a worker rewrites it before it runs the compile.
inline constexpr char kCanonicalToolkitRoot[] = "/distcc-cuda/toolkit";

// `arguments` with every path that starts at kCanonicalToolkitRoot moved
// under `toolkit_root`: a whole argument, the value of -I, -isystem,
// -iquote, -idirafter, -include or -imacros joined to it, and each piece of
// a long option's or -X option's list (--include-path=A,B;
// -Xcompiler=-IA,-isystem,B). Another option's value (-D, -ffile-prefix-map)
// is left as it is. Sets `*named` when it moved one.
std::vector<std::string> PlaceToolkitPaths(const std::vector<std::string>& arguments,
                                           const std::string& toolkit_root, bool* named = nullptr);

// The arguments a worker runs `unit` with (after its compiler) when
// `toolkit_root` is its toolkit: PlaceToolkitPaths, and for a host compile
// that named the toolkit -ffile-prefix-map from the toolkit back to its
// canonical root, so that the object's debug information and __FILE__ name
// no worker's toolkit place.
std::vector<std::string> ArgumentsInToolkit(const v1::CompileUnit& unit,
                                            const std::string& toolkit_root);

// `arguments` with every path under kCanonicalArea (in the places
// PlaceToolkitPaths looks) made relative to `working_directory`, itself
// relative to "/": what an engine's Action names, whose input root holds
// the canonical places and whose workers run it in a folder of their own.
std::vector<std::string> CanonicalPathsRelativeTo(const std::vector<std::string>& arguments,
                                                  const std::string& working_directory);

}  // namespace distcc_cuda
