// SPDX-License-Identifier: Apache-2.0
// A model of the host C++ compiler's command line (g++, and the c++ that
// names it), for the .cpp files of a build that go to the cluster beside its
// .cu files. The same trust rules as nvcc's model: an allowlist of options
// whose values are checked for form, paths checked afterwards against the
// same PathPolicy (nvcc_args.h), and refused outright what replaces the
// compiler's programs (-B, -specs, -wrapper), loads code (-fplugin), reads
// arguments from a file (@file), reads a file the compile was not given
// (--sysroot, -iprefix) or writes files beside the object (-save-temps,
// -gsplit-dwarf, -fdump-*).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/nvcc/compile_command.h"

namespace distcc_cuda {

// Parses host compiler arguments (without the program name) into the parts
// nvcc's model gives (NvccCommand): -I, -isystem, -iquote, -idirafter,
// -include and -imacros are input paths, -o the output, -M* dependency
// options, -c the compile action. INVALID_ARGUMENT naming the option and why
// for one that is not in the model or is refused, a value of the wrong
// form, a response file or a source that is not a plain path.
absl::StatusOr<NvccCommand> ParseHostCompileCommand(const std::vector<std::string>& arguments);

// True for a C or C++ source file name the host compiler compiles as one
// (.cpp .cc .cxx .c++ .C .c).
bool IsHostSource(absl::string_view path);

// True when `word` names a host C++ compiler by its file name: c++, g++,
// g++-12, x86_64-linux-gnu-g++-12, clang++, clang++-18.
bool LooksLikeHostCompiler(absl::string_view word);

}  // namespace distcc_cuda
