// SPDX-License-Identifier: Apache-2.0
#include "coordinator/toolkits/toolkit_command.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/nvcc/toolkit_download.h"
#include "coordinator/toolkits/served_toolkits.h"

namespace distcc_cuda::coordinator {

const char kToolkitUsage[] =
    "The CUDA toolkits this coordinator serves: a worker started with\n"
    "--served-toolkit RELEASE and a client (distcc-cuda toolkit install RELEASE\n"
    "--coordinator) fetch one, checked file by file.\n"
    "Usage (with the coordinator stopped: they write its content store):\n"
    "  distcc-cuda-coordinator toolkit add --state-dir DIR [--whole] FOLDER\n"
    "      FOLDER is a CUDA folder with bin/nvcc (/usr/local/cuda-12.8, or what\n"
    "      `distcc-cuda toolkit install` printed). Its compile part is stored:\n"
    "      bin/'s compiler programs, nvvm/, the headers and the CUDA runtime,\n"
    "      not the math libraries, debuggers or Nsight; --whole stores every file.\n"
    "      Adding the same toolkit again changes nothing; another build of the\n"
    "      same version replaces it.\n"
    "  distcc-cuda-coordinator toolkit list --state-dir DIR\n"
    "  distcc-cuda-coordinator toolkit remove --state-dir DIR VERSION\n";

namespace {

absl::Status UsageError(absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("toolkit: ", message, " (see distcc-cuda-coordinator toolkit --help)"));
}

}  // namespace

absl::Status RunToolkitCommand(const std::vector<std::string>& args, std::ostream& out) {
  std::string state_dir;
  ToolkitPart part = ToolkitPart::kCompile;
  std::vector<std::string> words;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      out << kToolkitUsage;
      return absl::OkStatus();
    }
    if (absl::StartsWith(arg, "--state-dir=")) {
      state_dir = arg.substr(12);
    } else if (arg == "--state-dir" || arg == "-state-dir") {
      if (i + 1 >= args.size()) return UsageError("--state-dir needs a value");
      state_dir = args[++i];
    } else if (arg == "--whole") {
      part = ToolkitPart::kWhole;
    } else if (absl::StartsWith(arg, "-")) {
      return UsageError(absl::StrCat("unknown flag ", arg));
    } else {
      words.push_back(arg);
    }
  }
  if (state_dir.empty()) return UsageError("--state-dir is required");
  if (words.size() == 1 && words[0] == "list") {
    ASSIGN_OR_RETURN(std::vector<v1::ServedToolkit> toolkits, ReadServedToolkits(state_dir));
    if (toolkits.empty()) out << "no toolkits served (toolkit add adds one)\n";
    for (const v1::ServedToolkit& toolkit : toolkits) {
      // The manifest's digest is what workers and clients pin the toolkit by.
      out << DescribeServedToolkit(toolkit) << " manifest " << toolkit.manifest().hash()
          << "\n  pin: --served-toolkit " << toolkit.release() << "@" << ManifestPin(toolkit)
          << "\n";
    }
    return absl::OkStatus();
  }
  if (words.size() == 2 && words[0] == "add") {
    return AddServedToolkit(state_dir, words[1], out, part).status();
  }
  if (words.size() == 2 && words[0] == "remove") {
    return RemoveServedToolkits(state_dir, words[1], out);
  }
  return UsageError("give add FOLDER, list or remove VERSION");
}

}  // namespace distcc_cuda::coordinator
