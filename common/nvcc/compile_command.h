// SPDX-License-Identifier: Apache-2.0
// A compile command split into what distcc-cuda needs to know: its flags
// (each with its value and how it was written), its sources, its output, its
// compile actions and its dependency options. Two argument models fill it:
// nvcc's (nvcc_args.h) and the host C++ compiler's (host_compiler_args.h).
#pragma once

#include <string>
#include <vector>

#include "common/nvcc/nvcc_options.h"

namespace distcc_cuda {

// One argument of a parsed command line, with its option value split off.
struct NvccArgument {
  std::string option;  // "-I", "--gpu-architecture", "" for a positional
  std::string value;   // the option's value or the positional argument
  NvccValueKind kind = NvccValueKind::kNone;
  // How the value was attached: "-Ifoo" (joined), "-o=x" (equals), or as the
  // next argument (separate). Kept so a command renders back unchanged.
  enum class Form { kJoined, kEquals, kSeparate, kPositional } form;

  // The argument(s) as they appear on the command line.
  std::vector<std::string> Render() const;
};

// A compile command split into its parts.
struct NvccCommand {
  std::vector<NvccArgument> flags;   // every option but -c, -o and deps
  std::vector<std::string> sources;  // positional inputs (.cu, .cpp, ...)
  std::string output;                // the -o value, "" if none
  bool compile_only = false;         // -c / --compile seen
  // Every compile action, as written: -c, -dc, -cubin, -ptx, -fatbin.
  std::vector<std::string> actions;
  bool dependency_flags_dropped = false;
  // The dependency options dropped from `flags` (-M, -MD, -MF FILE, ...),
  // in order, for a client that writes the dependency file itself.
  std::vector<NvccArgument> dependency_flags;
  // Parsed by the host C++ compiler's model, not nvcc's.
  bool host_compiler = false;

  // Flags rendered back as arguments (without sources, -c and -o).
  std::vector<std::string> FlagArguments() const;
};

}  // namespace distcc_cuda
