// SPDX-License-Identifier: Apache-2.0
#include "coordinator/toolkits/served_toolkits.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/cuda_release.h"
#include "common/nvcc/toolchain.h"
#include "common/nvcc/toolkit_download.h"
#include "common/store/toolkit_manifest.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::coordinator {
namespace fs = std::filesystem;
namespace {

// One line: version, release, manifest hash and size, bytes, files, nvcc
// build, the folder it came from; tab-separated.
std::string LineOf(const v1::ServedToolkit& toolkit) {
  return absl::StrCat(toolkit.version(), "\t", toolkit.release(), "\t", toolkit.manifest().hash(),
                      "\t", toolkit.manifest().size_bytes(), "\t", toolkit.bytes(), "\t",
                      toolkit.files(), "\t", toolkit.nvcc_build(), "\t", toolkit.added_from(),
                      "\n");
}

absl::StatusOr<v1::ServedToolkit> ToolkitOf(absl::string_view line) {
  std::vector<std::string> fields = absl::StrSplit(line, '\t');
  v1::ServedToolkit toolkit;
  int64_t manifest_bytes = 0;
  int64_t bytes = 0;
  int files = 0;
  if (fields.size() != 8 || !CudaRelease::Parse(fields[0]).ok() ||
      !absl::SimpleAtoi(fields[3], &manifest_bytes) || !absl::SimpleAtoi(fields[4], &bytes) ||
      !absl::SimpleAtoi(fields[5], &files)) {
    return absl::InternalError(absl::StrCat("a damaged line in toolkits.tsv: ", line));
  }
  toolkit.set_version(fields[0]);
  toolkit.set_release(fields[1]);
  toolkit.mutable_manifest()->set_hash(fields[2]);
  toolkit.mutable_manifest()->set_size_bytes(manifest_bytes);
  toolkit.set_bytes(bytes);
  toolkit.set_files(files);
  toolkit.set_nvcc_build(fields[6]);
  toolkit.set_added_from(fields[7]);
  RETURN_IF_ERROR(ValidateDigest(FromProto(toolkit.manifest())));
  return toolkit;
}

absl::Status WriteList(const std::string& state_dir,
                       const std::vector<v1::ServedToolkit>& toolkits) {
  std::string text;
  for (const v1::ServedToolkit& toolkit : toolkits) text += LineOf(toolkit);
  return WriteFileAtomically(ServedToolkitsPathIn(state_dir), text);
}

// The state dir to itself: a running coordinator holds its lock.
absl::StatusOr<FolderLock> LockStateDir(const std::string& state_dir) {
  std::error_code error;
  if (!fs::is_directory(state_dir, error)) {
    return absl::NotFoundError(absl::StrCat("no state dir at ", state_dir));
  }
  absl::StatusOr<FolderLock> lock = FolderLock::Acquire(state_dir, "a running coordinator");
  if (!lock.ok() && absl::IsFailedPrecondition(lock.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat(lock.status().message(),
                     " (toolkit add and remove write its content store: stop the coordinator, "
                     "change its toolkits, start it again; workers and clients wait for it)"));
  }
  return lock;
}

// What a compile runs from bin/: its programs, and crt/ (the link stubs).
constexpr absl::string_view kCompilePrograms[] = {
    "nvcc", "nvcc.profile", "ptxas",     "fatbinary", "nvlink",   "cudafe++",           "bin2c",
    "crt",  "nvprune",      "cuobjdump", "nvdisasm",  "cu++filt", "__nvcc_device_query"};
// The top-level names a compile needs.
constexpr absl::string_view kCompileFolders[] = {"bin",       "nvvm",         "include",
                                                 "targets",   "lib",          "lib64",
                                                 "cuda_cccl", "version.json", "version.txt"};
// The libraries kept in a library folder, by the start of their names.
constexpr absl::string_view kCompileLibraries[] = {"libcudart", "libcudadevrt", "libnvvm"};

bool OneOf(absl::string_view name, absl::Span<const absl::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Every file of `folder` (or of its compile part) into `store`, as the
// manifest lists it.
absl::StatusOr<v1::ServedToolkit> StoreToolkit(const std::string& folder, CasStore& store,
                                               ToolkitPart part) {
  ASSIGN_OR_RETURN(NvccRelease said, AskNvccRelease(folder + "/bin/nvcc"));
  ASSIGN_OR_RETURN(std::string manifest, part == ToolkitPart::kWhole
                                             ? ManifestOf(folder)
                                             : ManifestOf(folder, IsCompileToolkitPart));
  if (!absl::StrContains(manifest, " bin/nvcc\n")) {
    return absl::FailedPreconditionError(
        absl::StrCat(folder,
                     "/bin/nvcc is not a file of the folder (a link out of it?): "
                     "give the folder the toolkit's files are in"));
  }
  ASSIGN_OR_RETURN(std::vector<ToolkitEntry> entries, ParseToolkitManifest(manifest));
  v1::ServedToolkit toolkit;
  for (const ToolkitEntry& entry : entries) {
    if (entry.link) continue;
    ASSIGN_OR_RETURN(Digest stored, store.PutFile(folder + "/" + entry.path));
    if (stored.hash != entry.digest.hash) {
      return absl::AbortedError(
          absl::StrCat(folder, "/", entry.path, " changed while it was added; add it again"));
    }
    toolkit.set_bytes(toolkit.bytes() + stored.size_bytes);
    toolkit.set_files(toolkit.files() + 1);
  }
  ASSIGN_OR_RETURN(Digest manifest_digest, store.PutBytes(manifest));
  *toolkit.mutable_manifest() = ToProto(manifest_digest);
  toolkit.set_version(said.version);
  toolkit.set_release(said.release);
  toolkit.set_nvcc_build(said.build);
  toolkit.set_added_from(folder);
  return toolkit;
}

}  // namespace

bool IsCompileToolkitPart(const std::string& relative) {
  const std::vector<absl::string_view> parts = absl::StrSplit(relative, '/');
  if (parts.empty() || !OneOf(parts[0], kCompileFolders)) return false;
  if (parts[0] == "bin" && parts.size() > 1 && !OneOf(parts[1], kCompilePrograms)) return false;
  // A file in (or below) a library folder: the runtime and the stubs only.
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i] != "lib" && parts[i] != "lib64") continue;
    const absl::string_view name = parts.back();
    if (parts.size() == i + 3 && parts[i + 1] == "stubs") return absl::StartsWith(name, "libcuda.");
    return std::any_of(std::begin(kCompileLibraries), std::end(kCompileLibraries),
                       [&](absl::string_view prefix) { return absl::StartsWith(name, prefix); });
  }
  return true;
}

std::string ServedToolkitsPathIn(const std::string& state_dir) {
  return state_dir + "/toolkits.tsv";
}

absl::StatusOr<std::vector<v1::ServedToolkit>> ReadServedToolkits(const std::string& state_dir) {
  absl::StatusOr<std::string> text = ReadFile(ServedToolkitsPathIn(state_dir));
  if (absl::IsNotFound(text.status())) return std::vector<v1::ServedToolkit>();
  RETURN_IF_ERROR(text.status());
  std::vector<v1::ServedToolkit> toolkits;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    ASSIGN_OR_RETURN(v1::ServedToolkit toolkit, ToolkitOf(line));
    toolkits.push_back(std::move(toolkit));
  }
  return toolkits;
}

absl::StatusOr<v1::ServedToolkit> AddServedToolkit(const std::string& state_dir,
                                                   const std::string& folder, std::ostream& out,
                                                   ToolkitPart part) {
  std::error_code error;
  const std::string real = fs::canonical(folder, error).string();
  if (error || !IsExecutableFile(real + "/bin/nvcc")) {
    return absl::InvalidArgumentError(
        absl::StrCat(folder,
                     " is not a CUDA folder with bin/nvcc (give the folder, e.g. "
                     "/usr/local/cuda-12.8, or what `distcc-cuda toolkit install` printed)"));
  }
  ASSIGN_OR_RETURN(FolderLock lock, LockStateDir(state_dir));
  ASSIGN_OR_RETURN(std::vector<v1::ServedToolkit> toolkits, ReadServedToolkits(state_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<CasStore> store, CasStore::Open(state_dir + "/cas"));
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(v1::ServedToolkit toolkit, StoreToolkit(real, *store, part));
  std::vector<v1::ServedToolkit> kept;
  for (v1::ServedToolkit& listed : toolkits) {
    if (listed.version() != toolkit.version()) kept.push_back(std::move(listed));
  }
  kept.push_back(toolkit);
  RETURN_IF_ERROR(WriteList(state_dir, kept));
  out << "added " << DescribeServedToolkit(toolkit) << " in "
      << absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(100)))
      << "; the coordinator serves it from its next start\n";
  return toolkit;
}

absl::Status RemoveServedToolkits(const std::string& state_dir, const std::string& version,
                                  std::ostream& out) {
  ASSIGN_OR_RETURN(CudaRelease wanted, CudaRelease::Parse(version));
  ASSIGN_OR_RETURN(FolderLock lock, LockStateDir(state_dir));
  ASSIGN_OR_RETURN(std::vector<v1::ServedToolkit> toolkits, ReadServedToolkits(state_dir));
  std::vector<v1::ServedToolkit> kept;
  int removed = 0;
  for (v1::ServedToolkit& toolkit : toolkits) {
    absl::StatusOr<CudaRelease> listed = CudaRelease::Parse(toolkit.version());
    if (listed.ok() && wanted.Admits(*listed)) {
      out << "removed " << DescribeServedToolkit(toolkit) << "\n";
      ++removed;
    } else {
      kept.push_back(std::move(toolkit));
    }
  }
  if (removed == 0) {
    return absl::NotFoundError(absl::StrCat("the coordinator serves no CUDA ", version,
                                            " (distcc-cuda-coordinator toolkit list)"));
  }
  return WriteList(state_dir, kept);
}

std::vector<v1::ServedToolkit> LoadServedToolkits(const std::string& state_dir,
                                                  const CasStore& store,
                                                  std::unique_ptr<CasPin>* pin) {
  absl::StatusOr<std::vector<v1::ServedToolkit>> listed = ReadServedToolkits(state_dir);
  if (!listed.ok()) {
    spdlog::error("serving no toolkits: {}", std::string(listed.status().message()));
    return {};
  }
  std::vector<v1::ServedToolkit> served;
  std::vector<Digest> blobs;
  for (const v1::ServedToolkit& toolkit : *listed) {
    const Digest manifest_digest = FromProto(toolkit.manifest());
    absl::StatusOr<std::string> manifest = store.Verify(manifest_digest).ok()
                                               ? ReadFile(store.PathOf(manifest_digest))
                                               : absl::NotFoundError("its manifest is not stored");
    absl::StatusOr<std::vector<ToolkitEntry>> entries =
        manifest.ok() ? ParseToolkitManifest(*manifest) : manifest.status();
    std::vector<Digest> its = {manifest_digest};
    absl::Status whole = entries.status();
    for (size_t i = 0; whole.ok() && i < entries->size(); ++i) {
      const ToolkitEntry& entry = (*entries)[i];
      if (entry.link) continue;
      if (!store.Contains(entry.digest)) {
        whole = absl::NotFoundError(absl::StrCat(entry.path, " is not stored"));
      }
      its.push_back(entry.digest);
    }
    if (!whole.ok()) {
      spdlog::error(
          "not serving toolkit {}: {}; add it again (distcc-cuda-coordinator toolkit add)",
          toolkit.version(), std::string(whole.message()));
      continue;
    }
    blobs.insert(blobs.end(), its.begin(), its.end());
    served.push_back(toolkit);
    spdlog::info("serving toolkit {}", DescribeServedToolkit(toolkit));
  }
  *pin = store.Pin(blobs);
  return served;
}

}  // namespace distcc_cuda::coordinator
