// SPDX-License-Identifier: Apache-2.0
// A model of nvcc's command line: which arguments are sources, which is the
// output, which name files to read, and which must never reach a worker.
// Options are checked against the allowlist in nvcc_options.h; the paths a
// compile names against a PathPolicy. The same checks run in the client
// before its local scan, in the coordinator and in the worker before it forks.
#pragma once

#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/nvcc/compile_command.h"
#include "common/nvcc/nvcc_options.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda {

// Parses nvcc arguments (without the program name) against the allowlist.
// INVALID_ARGUMENT naming the option for one that is not in the model, is
// forbidden (saying why), lacks its value or has a value of the wrong form;
// for a response file (@file) or a source that is not a plain path.
absl::StatusOr<NvccCommand> ParseNvccCommand(const std::vector<std::string>& arguments);

// Parses `arguments` with the model of `compiler`'s command line: nvcc's
// (ParseNvccCommand) or the host C++ compiler's (ParseHostCompileCommand).
absl::StatusOr<NvccCommand> ParseCompileArguments(v1::UnitCompiler compiler,
                                                  const std::vector<std::string>& arguments);

// Where the files of a compile may be.
struct PathPolicy {
  // The client's absolute workspace root: every input lies under it, and a
  // worker mounts the inputs there. Empty while not known (the client before
  // its scan): absolute paths are then only kept out of the host's private
  // folders.
  std::string workspace_root;
  // The compile's folder, relative to the root ("" is the root).
  std::string working_directory;
  // Absolute folders outside the workspace that a compile may name: the
  // toolkit's and the system's include folders (SystemIncludePrefixes).
  std::vector<std::string> system_prefixes;
};

// /usr/include, /usr/lib, /usr/lib64, /usr/local/include, the CUDA
// toolkits' folders under /usr/local (what the client never ships) and the
// compiling toolkit's canonical root (kCanonicalToolkitRoot), plus
// `toolkit_root` (the folder above nvcc's bin/) if given; each ends with '/'.
std::vector<std::string> SystemIncludePrefixes(const std::string& toolkit_root = "");

// The folders a worker takes from its own system, read-only, to compile
// with: programs, libraries, headers and the toolkits (/usr/bin, /usr/lib,
// /lib*, /usr/include, /usr/local/cuda*, ..., the toolkit's canonical root
// and `toolkit_root` if given).
// A unit's inputs, working directory and outputs never lie in them: an input
// there would replace or add to the toolchain (a gcc, a libc, a specs file).
// Entries ending in '/' are folders; "/usr/local/cuda-" is a string prefix.
std::vector<std::string> ToolchainFolders(const std::string& toolkit_root = "");

// True for an absolute path in the host's own configuration and state (/etc,
// /proc, /sys, /dev, /boot, /run, /var/log...) or in a well-known credential
// folder (.ssh, .gnupg, .aws, .kube, .docker): never an input of a compile.
bool IsHostPrivatePath(absl::string_view absolute_path);

// Checks the arguments of one remote compile: they parse (ParseNvccCommand),
// carry exactly one compile action (-c, -dc, -cubin, -ptx or -fatbin), one
// source, an output (-o) and no dependency options, and every path stays
// where `policy` allows: sources and the output relative and inside the
// workspace, include paths inside it or under a system prefix, nothing in a
// host-private folder. INVALID_ARGUMENT naming the offending argument.
absl::Status ValidateCompileArguments(const std::vector<std::string>& arguments,
                                      const PathPolicy& policy);

// Checks everything a worker would touch for `unit`: its name (a plain file
// name), its workspace root (absolute, not host-private), its working
// directory, its arguments (ValidateCompileArguments with the unit's root and
// `system_prefixes`), its declared outputs (exactly the -o file, not an
// input) and its inputs (relative, inside, unique, plain names). None of the
// inputs, the working directory and the output may lie in ToolchainFolders()
// or `system_prefixes`.
// INVALID_ARGUMENT naming the unit and the offending path or argument.
absl::Status ValidateCompileUnit(const v1::CompileUnit& unit,
                                 const std::vector<std::string>& system_prefixes);
absl::Status ValidateCompileUnit(const v1::CompileUnit& unit);

// OK for `path` as an input of a unit whose workspace is mounted at
// `workspace_root` ("" for none): a plain normalised relative path inside
// the workspace, inert to a shell, not in a private folder of the host and
// not among the toolchain's files or under `system_prefixes`.
// INVALID_ARGUMENT naming the path. ValidateCompileUnit checks each listed
// input so; the coordinator checks the files of input trees so, once per
// build.
absl::Status ValidateInputPath(const std::string& workspace_root, const std::string& path,
                               const std::vector<std::string>& system_prefixes);

// What a build's units share, found acceptable once per build for one list
// of system prefixes, so that it is not checked again for every unit (a
// CUTLASS build's 55,000 units share one set of flags and most of their
// inputs): input paths found plain, inside and outside the reserved
// folders, per workspace root; and the folders and files a command's flags
// name (-I, -isystem, --pre-include...), with its root and working
// directory, found inside the workspace or a system folder. Each unit still
// has its arguments parsed and its source and output checked, and its own
// list checked for repeats and for its output.
struct CheckedUnitParts {
  std::map<std::string, std::unordered_set<std::string>> input_paths;
  std::unordered_set<std::string> path_flags;
  // ToolchainFolders() and the system prefixes, made once.
  std::vector<std::string> reserved_folders;
};
// ValidateCompileUnit, skipping what `checked` holds and adding to it what
// it finds acceptable; with `parsed`, the unit's arguments as parsed
// (ParseNvccCommand) are left there.
absl::Status ValidateCompileUnit(const v1::CompileUnit& unit,
                                 const std::vector<std::string>& system_prefixes,
                                 CheckedUnitParts* checked, NvccCommand* parsed = nullptr);

// OK for a unit name that is safe as a file name and in a terminal: 1 to 200
// of letters, digits and _ . + @ = -, not starting with '.'.
absl::Status ValidateUnitName(absl::string_view name);

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
// The same, for a command already parsed.
absl::StatusOr<std::vector<ArchitecturePart>> SplitByArchitecture(const NvccCommand& command);

}  // namespace distcc_cuda
