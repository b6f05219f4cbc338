// SPDX-License-Identifier: Apache-2.0
// A model of nvcc's command line: which arguments are sources, which is the
// output, which name files to read, and which must never reach a worker.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda {

// What the value of an option is.
enum class NvccValueKind {
  kNone,        // a switch: -c, -G, --use_fast_math
  kText,        // a value that names no file: -O3, -DNAME, -gencode ...
  kInputPath,   // a file or folder read by the compiler: -I, -include
  kOutputPath,  // a file written by the compiler: -o
  kDependency,  // make-style dependency output, dropped for remote compiles
  kForbidden,   // substitutes a program or reads an unchecked file
};

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

// A compile command split into what distcc-cuda needs to know.
struct NvccCommand {
  std::vector<NvccArgument> flags;   // every option but -c, -o and deps
  std::vector<std::string> sources;  // positional inputs (.cu, .cpp, ...)
  std::string output;                // the -o value, "" if none
  bool compile_only = false;         // -c / --compile seen
  bool dependency_flags_dropped = false;

  // Flags rendered back as arguments (without sources, -c and -o).
  std::vector<std::string> FlagArguments() const;
};

// Parses nvcc arguments (without the program name). INVALID_ARGUMENT for an
// option that lacks its value or is forbidden, naming the option and why.
absl::StatusOr<NvccCommand> ParseNvccCommand(const std::vector<std::string>& arguments);

// Checks arguments a worker is asked to run in `working_directory` (relative
// to the sandbox root): parses them, and requires every source and output to
// be a relative path that stays inside the sandbox and every read path to
// stay inside or be an absolute include folder of the worker's own system.
// INVALID_ARGUMENT naming the offending argument.
absl::Status ValidateSandboxedArguments(const std::vector<std::string>& arguments,
                                        const std::string& working_directory = "");

// Checks everything a worker would touch for `unit`: its working directory,
// its arguments (ValidateSandboxedArguments), its declared outputs and its
// input paths must all stay inside the sandbox. INVALID_ARGUMENT naming the
// unit and the offending path.
absl::Status ValidateCompileUnit(const v1::CompileUnit& unit);

// Turns each `-arch sm_XX` style architecture name into the -gencode flags
// for SASS of that architecture: "sm_100" -> "-gencode",
// "arch=compute_100,code=sm_100". INVALID_ARGUMENT for an unknown form.
absl::StatusOr<std::vector<std::string>> GencodeFlags(const std::vector<std::string>& archs);

// One target of a compile that names several (-gencode flags), as the
// arguments that compile that target alone into an object of its own. The
// part keeps every other flag and defines __CUDA_ARCH_LIST__ as the whole
// compile would, so its host code is the whole's; only its fatbinary holds
// one target's images (MergeArchitectureParts joins them again).
struct ArchitecturePart {
  std::string label;                   // "sm_90", "sm_90+compute_90"
  std::vector<std::string> arguments;  // with -c SOURCE -o `output`
  std::string output;                  // next to the whole's output
};

// Splits a compile of N >= 2 -gencode targets into N parts, in the order of
// the -gencode flags (the order nvcc stores the images in). FAILED_PRECONDITION
// saying why for a compile that cannot be split: fewer than two -gencode
// targets, targets named with -arch/-code, relocatable device code or LTO
// (their device code is linked later, not merged), no -c, or a
// __CUDA_ARCH_LIST__ of its own, or a -gencode value it does not read (nvcc
// judges that when the unit compiles whole). INVALID_ARGUMENT for arguments
// that do not parse.
absl::StatusOr<std::vector<ArchitecturePart>> SplitByArchitecture(
    const std::vector<std::string>& arguments);

}  // namespace distcc_cuda
