// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/toolkit_download.h"

#include <sys/stat.h>

#include <filesystem>
#include <optional>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/byte_size.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/store/toolkit_manifest.h"

namespace distcc_cuda {
namespace fs = std::filesystem;

absl::StatusOr<std::vector<v1::ServedToolkit>> ListServedToolkits(
    v1::ContentStore::StubInterface& stub, absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  // A coordinator that is starting: wait for it, up to the deadline.
  context.set_wait_for_ready(true);
  v1::ListToolkitsResponse response;
  grpc::Status status = stub.ListToolkits(&context, v1::ListToolkitsRequest(), &response);
  if (!status.ok()) {
    return absl::Status(
        static_cast<absl::StatusCode>(status.error_code()),
        absl::StrCat("cannot list the coordinator's toolkits: ", status.error_message()));
  }
  return std::vector<v1::ServedToolkit>(response.toolkits().begin(), response.toolkits().end());
}

absl::StatusOr<v1::ServedToolkit> ChooseServedToolkit(const std::vector<v1::ServedToolkit>& served,
                                                      const CudaRelease& wanted) {
  const v1::ServedToolkit* best = nullptr;
  std::optional<CudaRelease> best_version;
  std::vector<std::string> names;
  for (const v1::ServedToolkit& toolkit : served) {
    names.push_back(TerminalSafe(toolkit.version().substr(0, 32)));
    absl::StatusOr<CudaRelease> version = CudaRelease::Parse(toolkit.version());
    // Its name (manifest digest) becomes a folder's: checked before use.
    if (!version.ok() || !version->has_patch() || !wanted.Admits(*version) ||
        !ValidateDigest(FromProto(toolkit.manifest())).ok()) {
      continue;
    }
    if (best == nullptr || *best_version < *version) {
      best = &toolkit;
      best_version = *version;
    }
  }
  if (best != nullptr) return *best;
  return absl::NotFoundError(absl::StrCat(
      "the coordinator serves no CUDA ", wanted.ToString(), " (",
      names.empty() ? "it serves no toolkit"
                    : absl::StrCat("it serves ", absl::StrJoin(names, ", ")),
      "); its operator adds one with `distcc-cuda-coordinator toolkit add --state-dir DIR "
      "CUDA_FOLDER`"));
}

absl::Status DownloadToolkit(BlobClient& blobs, const v1::ServedToolkit& toolkit,
                             const std::string& destination) {
  const Digest manifest_digest = FromProto(toolkit.manifest());
  RETURN_IF_ERROR(ValidateDigest(manifest_digest));
  if (manifest_digest.size_bytes > kMaxToolkitManifestBytes) {
    return absl::InvalidArgumentError("the coordinator's toolkit manifest is larger than 16 MiB");
  }
  ASSIGN_OR_RETURN(std::string manifest, blobs.DownloadBytes(manifest_digest));
  ASSIGN_OR_RETURN(std::vector<ToolkitEntry> entries, ParseToolkitManifest(manifest));
  RETURN_IF_ERROR(MakeDirectories(destination));
  for (const ToolkitEntry& entry : entries) {
    const std::string path = destination + "/" + entry.path;
    RETURN_IF_ERROR(MakeDirectories(fs::path(path).parent_path().string()));
    std::error_code error;
    if (entry.link) {
      fs::create_symlink(entry.target, path, error);
    } else {
      absl::Status fetched = blobs.DownloadToFile(entry.digest, path);
      if (!fetched.ok()) return Annotate(fetched, absl::StrCat("toolkit file ", entry.path));
      fs::permissions(path, entry.executable ? fs::perms(0755) : fs::perms(0644),
                      fs::perm_options::replace, error);
    }
    if (error) {
      return absl::InternalError(absl::StrCat("cannot make ", path, ": ", error.message()));
    }
  }
  RETURN_IF_ERROR(WriteFileAtomically(destination + "/" + kToolkitManifestName, manifest));
  return VerifyManifest(destination);
}

std::string DescribeServedToolkit(const v1::ServedToolkit& toolkit) {
  // A coordinator's words, made safe for a terminal and a log.
  return absl::StrCat("CUDA ", TerminalSafe(toolkit.version().substr(0, 32)), " (",
                      FormatByteSize(toolkit.bytes()), ", ", toolkit.files(), " files, added from ",
                      TerminalSafe(toolkit.added_from().substr(0, 4096)), ")");
}

}  // namespace distcc_cuda
