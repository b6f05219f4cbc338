// SPDX-License-Identifier: Apache-2.0
#include "client/toolkit/toolkit_manifest.h"

#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/store/digest.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

constexpr char kFormatLine[] = "distcc-cuda toolkit manifest 1";

// One entry's line, for a path relative to `folder`.
absl::StatusOr<std::string> LineOf(const fs::path& folder, const fs::directory_entry& entry) {
  const std::string relative = entry.path().lexically_relative(folder).string();
  std::error_code error;
  if (entry.is_symlink(error)) {
    const std::string target = fs::read_symlink(entry.path(), error).string();
    // A link stays inside: relative, and resolved lexically below the folder.
    const std::string resolved =
        (fs::path(relative).parent_path() / target).lexically_normal().string();
    // Lexically, and as the file system resolves it (a link through links).
    std::error_code resolve_error;
    const fs::path real_folder = fs::weakly_canonical(folder, resolve_error);
    const fs::path real_target =
        fs::weakly_canonical(entry.path().parent_path() / target, resolve_error);
    const std::string inside = real_target.lexically_relative(real_folder).string();
    if (error || resolve_error || target.empty() || fs::path(target).is_absolute() ||
        !StaysInside(resolved) || inside.empty() || !StaysInside(inside)) {
      return absl::FailedPreconditionError(
          absl::StrCat((folder / relative).string(), " is a link that leads out of the toolkit (",
                       target, "); a toolkit must hold its own files"));
    }
    return absl::StrCat("link ", target, " ", relative);
  }
  if (entry.is_directory(error)) return std::string();
  if (!entry.is_regular_file(error)) {
    return absl::FailedPreconditionError(absl::StrCat(
        entry.path().string(), " is neither a file, a folder nor a link; a toolkit holds none"));
  }
  ASSIGN_OR_RETURN(Digest digest, DigestOfFile(entry.path().string()));
  struct stat info {};
  const bool runs = stat(entry.path().c_str(), &info) == 0 && (info.st_mode & S_IXUSR) != 0;
  return absl::StrCat("file ", digest.hash, " ", digest.size_bytes, " ", runs ? "x" : "-", " ",
                      relative);
}

// The manifest's lines by path.
std::map<std::string, std::string> ByPath(const std::string& manifest) {
  std::map<std::string, std::string> lines;
  for (absl::string_view line : absl::StrSplit(manifest, '\n', absl::SkipEmpty())) {
    if (line == kFormatLine) continue;
    const size_t last_space = line.rfind(' ');
    lines.emplace(std::string(line.substr(last_space + 1)), std::string(line));
  }
  return lines;
}

}  // namespace

absl::StatusOr<std::string> ManifestOf(const std::string& folder) {
  std::error_code error;
  fs::recursive_directory_iterator walk(folder, error);
  if (error) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the toolkit folder ", folder, ": ", error.message()));
  }
  std::map<std::string, std::string> lines;
  for (; !error && walk != fs::recursive_directory_iterator(); walk.increment(error)) {
    const fs::directory_entry& entry = *walk;
    const std::string relative = entry.path().lexically_relative(folder).string();
    if (relative == kToolkitManifestName) continue;
    ASSIGN_OR_RETURN(std::string line, LineOf(folder, entry));
    if (!line.empty()) lines.emplace(relative, std::move(line));
  }
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot read all of the toolkit folder ", folder, ": ", error.message()));
  }
  std::string manifest = absl::StrCat(kFormatLine, "\n");
  for (const auto& [path, line] : lines) absl::StrAppend(&manifest, line, "\n");
  return manifest;
}

absl::Status VerifyManifest(const std::string& folder) {
  absl::StatusOr<std::string> written = ReadFile(folder + "/" + kToolkitManifestName);
  if (!written.ok()) {
    return absl::NotFoundError(absl::StrCat(folder, " has no ", kToolkitManifestName,
                                            ": it is not a toolkit distcc-cuda installed"));
  }
  ASSIGN_OR_RETURN(std::string now, ManifestOf(folder));
  if (now == *written) return absl::OkStatus();
  const std::map<std::string, std::string> listed = ByPath(*written);
  const std::map<std::string, std::string> found = ByPath(now);
  std::string what = "its manifest is damaged";
  for (const auto& [path, line] : listed) {
    auto it = found.find(path);
    if (it == found.end()) {
      what = absl::StrCat(path, " is missing");
      break;
    }
    if (it->second != line) {
      what = absl::StrCat(path, " changed since it was installed");
      break;
    }
  }
  for (const auto& [path, line] : found) {
    if (what != "its manifest is damaged") break;
    if (listed.count(path) == 0) what = absl::StrCat(path, " is not part of it");
  }
  return absl::FailedPreconditionError(
      absl::StrCat("the toolkit at ", folder, " is not as installed: ", what,
                   " (`distcc-cuda toolkit install` of its release installs it again)"));
}

}  // namespace distcc_cuda::client
