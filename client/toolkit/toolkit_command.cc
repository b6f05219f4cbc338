// SPDX-License-Identifier: Apache-2.0
#include "client/toolkit/toolkit_command.h"

#include "absl/strings/str_cat.h"
#include "client/toolkit/pypi_toolkit.h"
#include "client/toolkit/toolkit_store.h"
#include "common/base/byte_size.h"
#include "common/base/status.h"
#include "common/nvcc/cuda_release.h"
#include "common/store/toolkit_manifest.h"

namespace distcc_cuda::client {
namespace {

constexpr char kToolkitUsage[] =
    "usage: distcc-cuda toolkit install RELEASE | list | remove RELEASE "
    "[--toolkit-dir DIR] [--python PYTHON] [--coordinator HOST:PORT]; RELEASE is 13.2 (the "
    "newest 13.2.x) or 13.2.86, and for install from a coordinator may be pinned to the "
    "manifest digest its operator gives (13.2@sha256:HEX)";

// The release asked for, pinned by the command or by --toolkit-pin.
absl::StatusOr<WantedToolkit> Wanted(const std::string& word,
                                     const std::vector<WantedToolkit>& pins) {
  ASSIGN_OR_RETURN(WantedToolkit wanted, ParseWantedToolkit(word));
  if (!wanted.pinned_hash.empty()) return wanted;
  for (const WantedToolkit& pin : pins) {
    if (pin.release.SameMajorMinor(wanted.release)) {
      wanted.pinned_hash = pin.pinned_hash;
      break;
    }
  }
  return wanted;
}

absl::Status List(const ToolkitStore& store, std::ostream& out) {
  std::vector<InstalledToolkit> toolkits = store.List();
  if (toolkits.empty()) {
    out << "no toolkits in " << store.root()
        << " (distcc-cuda toolkit install 13.2 installs one)\n";
    return absl::OkStatus();
  }
  for (const InstalledToolkit& toolkit : toolkits) {
    absl::Status intact = VerifyManifest(toolkit.cuda_home);
    out << "CUDA " << toolkit.version.ToString() << "  " << toolkit.cuda_home << "  "
        << FormatByteSize(ToolkitStore::SizeOf(toolkit)) << "  "
        << (intact.ok() ? "files as installed" : std::string(intact.message())) << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunToolkitCommand(const ToolkitCommandOptions& options, std::ostream& out,
                               std::ostream& progress) {
  const std::vector<std::string>& words = options.words;
  ToolkitStore store(options.toolkit_dir);
  if (words.size() == 1 && words[0] == "list") return List(store, out);
  if (words.size() != 2 || (words[0] != "install" && words[0] != "remove")) {
    return absl::InvalidArgumentError(kToolkitUsage);
  }
  if (words[0] == "install") {
    ASSIGN_OR_RETURN(WantedToolkit wanted, Wanted(words[1], options.pins));
    const CudaRelease& release = wanted.release;
    if (!wanted.pinned_hash.empty() && options.coordinator.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CUDA ", wanted.ToString(),
          " is pinned to a coordinator's manifest: name the coordinator that serves it "
          "(--coordinator HOST:PORT)"));
    }
    absl::StatusOr<InstalledToolkit> served =
        options.coordinator.empty() ? absl::NotFoundError("no coordinator named")
                                    : store.InstallServed(wanted, options.coordinator, options.tls,
                                                          options.limits, progress);
    // A pinned toolkit comes from its coordinator or not at all.
    if (!options.coordinator.empty() &&
        (served.ok() || !absl::IsNotFound(served.status()) || !PyPiHasCompiler(release) ||
         !wanted.pinned_hash.empty())) {
      RETURN_IF_ERROR(served.status());
      out << served->cuda_home << "\n";
      return absl::OkStatus();
    }
    if (!options.coordinator.empty()) {
      progress << "distcc-cuda: " << served.status().message() << "; taking it from PyPI\n";
    }
    ASSIGN_OR_RETURN(InstalledToolkit toolkit, store.Install(release, options.python, progress));
    out << toolkit.cuda_home << "\n";
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(CudaRelease release, CudaRelease::Parse(words[1]));
  ASSIGN_OR_RETURN(std::vector<InstalledToolkit> removed, store.Remove(release, progress));
  for (const InstalledToolkit& toolkit : removed) {
    out << "removed CUDA " << toolkit.version.ToString() << " (" << toolkit.cuda_home << ")\n";
  }
  return absl::OkStatus();
}

}  // namespace distcc_cuda::client
