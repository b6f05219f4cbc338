// SPDX-License-Identifier: Apache-2.0
// The release of distcc-cuda these programs are: the one version of the
// project (CMakeLists.txt's project(VERSION)), which is also the wheel's
// (pyproject.toml reads it from there) and the images' tag.
#pragma once

#include <string>

namespace distcc_cuda {

// "0.1.0".
const char* Version();

// "distcc-cuda 0.1.0": what `PROGRAM --version` prints.
std::string VersionLine(const std::string& program);

}  // namespace distcc_cuda
