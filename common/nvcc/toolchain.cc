// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/toolchain.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/process/subprocess.h"
#include "common/store/digest.h"

namespace distcc_cuda {
namespace fs = std::filesystem;
namespace {

std::string HashOrMissing(const std::string& path) {
  absl::StatusOr<Digest> digest = DigestOfFile(path);
  return digest.ok() ? digest->hash : "missing";
}

std::string FirstLine(const std::string& text) {
  return std::string(text.substr(0, text.find('\n')));
}

// The files of nvcc's toolkit that the fingerprint covers. The toolkit root
// is the folder above bin/, following a symlinked nvcc.
struct ToolkitFiles {
  std::string nvcc, cicc, ptxas, cuda_h;
};

bool IsElfProgram(const std::string& path) {
  char magic[4] = {};
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t got = read(fd, magic, sizeof(magic));
  close(fd);
  return got == 4 && memcmp(magic,
                            "\x7f"
                            "ELF",
                            4) == 0;
}

ToolkitFiles ToolkitFilesOf(const std::string& nvcc_path, const ToolkitPrograms& programs) {
  std::error_code error;
  fs::path real = fs::weakly_canonical(ToolkitNvccOf(nvcc_path, programs), error);
  fs::path root = real.parent_path().parent_path();
  return {real.string(), (root / "nvvm/bin/cicc").string(), (root / "bin/ptxas").string(),
          (root / "include/cuda.h").string()};
}

// A file's inode, size and times, or "missing".
std::string StatSignature(const std::string& file) {
  struct stat info;
  if (stat(file.c_str(), &info) != 0) return "missing;";
  return absl::StrCat(info.st_ino, ":", info.st_size, ":", info.st_mtim.tv_sec, ".",
                      info.st_mtim.tv_nsec, ":", info.st_ctim.tv_sec, ".", info.st_ctim.tv_nsec,
                      ";");
}

// ToolchainFilesSignature of `files`, the toolkit of `nvcc_path`.
std::string SignatureOf(const std::string& nvcc_path, const ToolkitFiles& files) {
  std::string signature;
  for (const std::string& file : {nvcc_path, files.nvcc, files.cicc, files.ptxas}) {
    absl::StrAppend(&signature, StatSignature(file));
  }
  return signature;
}

}  // namespace

std::string ToolkitNvccOf(const std::string& nvcc_path, const ToolkitPrograms& programs) {
  const std::string named = AbsolutePath(nvcc_path);
  if (programs.fetched || IsElfProgram(named)) return named;
  ProcessSpec spec;
  spec.argv = {nvcc_path, "--dryrun", "-x", "cu", "-E", "/dev/null"};
  spec.timeout = absl::Seconds(30);
  absl::StatusOr<ProcessResult> dry_run = programs.run(spec);
  if (!dry_run.ok()) return named;
  static const std::regex kHere("(^|\n)#\\$ _HERE_=([^\n]+)");
  std::smatch match;
  const std::string text = dry_run->stdout_text + dry_run->stderr_text;
  if (!std::regex_search(text, match, kHere)) return named;
  const std::string toolkit_nvcc = AbsolutePath(match[2].str() + "/nvcc");
  return IsElfProgram(toolkit_nvcc) ? toolkit_nvcc : named;
}

absl::StatusOr<std::string> ResolveNvcc(const std::string& flag_value,
                                        const std::string& cuda_home) {
  std::vector<std::string> tried;
  if (!flag_value.empty()) {
    tried.push_back(flag_value);
  } else {
    if (!cuda_home.empty()) tried.push_back(cuda_home + "/bin/nvcc");
    tried.push_back("/usr/local/cuda/bin/nvcc");
  }
  for (const std::string& candidate : tried) {
    if (IsExecutableFile(candidate)) return AbsolutePath(candidate);
  }
  return absl::NotFoundError(absl::StrCat("no nvcc at ", absl::StrJoin(tried, " or "),
                                          "; pass --nvcc /path/to/cuda/bin/nvcc or set CUDA_HOME"));
}

absl::StatusOr<NvccRelease> AskNvccRelease(const std::string& nvcc_path, const ProcessRunner& run) {
  if (!IsExecutableFile(nvcc_path)) {
    return absl::NotFoundError(absl::StrCat("nvcc not found or not executable at ", nvcc_path));
  }
  ProcessSpec spec;
  spec.argv = {nvcc_path, "--version"};
  spec.timeout = absl::Seconds(30);
  ASSIGN_OR_RETURN(ProcessResult version, run(spec));
  std::smatch match;
  NvccRelease said;
  static const std::regex kRelease("release ([0-9]+\\.[0-9]+)");
  // A word of a toolkit's own (a fetched one's nvcc is anybody's): no
  // byte a terminal or a log would act on.
  static const std::regex kBuild("Build ([A-Za-z0-9._/+-]+)");
  if (version.exit_code != 0 || !std::regex_search(version.stdout_text, match, kRelease)) {
    return absl::FailedPreconditionError(
        absl::StrCat(nvcc_path, " --version does not name a CUDA release: ",
                     FirstLine(version.stdout_text + version.stderr_text)));
  }
  said.release = match[1];
  if (std::regex_search(version.stdout_text, match, kBuild)) said.build = match[1];
  static const std::regex kVersion("release [0-9.]+, V([0-9.]+)");
  if (std::regex_search(version.stdout_text, match, kVersion)) said.version = match[1];
  return said;
}

absl::StatusOr<v1::ToolchainFingerprint> ComputeToolchainFingerprint(
    const std::string& nvcc_path, const std::string& host_compiler,
    const std::string& hash_cache_dir, const ToolkitPrograms& programs) {
  ASSIGN_OR_RETURN(NvccRelease said, AskNvccRelease(nvcc_path, programs.run));
  v1::ToolchainFingerprint fingerprint;
  fingerprint.set_nvcc_release(said.release);
  fingerprint.set_nvcc_build(said.build);
  fingerprint.set_nvcc_version(said.version);
  fingerprint.set_nvcc_path(AbsolutePath(nvcc_path));
  ToolkitFiles files = ToolkitFilesOf(nvcc_path, programs);
  // The hashes, remembered under the files' signature.
  const std::string signature = SignatureOf(nvcc_path, files);
  const std::string remembered =
      hash_cache_dir.empty()
          ? ""
          : absl::StrCat(hash_cache_dir, "/toolchain-",
                         DigestOf(AbsolutePath(nvcc_path)).hash.substr(0, 16), ".hashes");
  std::vector<std::string> hashes;
  if (!remembered.empty()) {
    absl::StatusOr<std::string> text = ReadFile(remembered);
    if (text.ok()) hashes = absl::StrSplit(*text, '\n', absl::SkipEmpty());
    if (hashes.size() != 4 || hashes[0] != signature) hashes.clear();
  }
  if (hashes.empty()) {
    hashes = {signature, HashOrMissing(files.nvcc), HashOrMissing(files.cicc),
              HashOrMissing(files.ptxas)};
    // Only a signature taken before the hashing and still true after it.
    if (!remembered.empty() && SignatureOf(nvcc_path, files) == signature &&
        MakeDirectories(hash_cache_dir).ok()) {
      (void)WriteFileAtomically(remembered, absl::StrJoin(hashes, "\n") + "\n");
    }
  }
  fingerprint.set_nvcc_sha256(hashes[1]);
  fingerprint.set_cicc_sha256(hashes[2]);
  fingerprint.set_ptxas_sha256(hashes[3]);
  absl::StatusOr<std::string> cuda_h = ReadFile(files.cuda_h);
  if (cuda_h.ok()) {
    static const std::regex kCudaVersion("#define CUDA_VERSION ([0-9]+)");
    std::smatch match;
    if (std::regex_search(*cuda_h, match, kCudaVersion)) {
      fingerprint.set_cuda_version_header(match[1]);
    }
  }
  ProcessSpec host;
  host.argv = {host_compiler, "--version"};
  host.timeout = absl::Seconds(30);
  absl::StatusOr<ProcessResult> host_version = RunProcess(host);
  fingerprint.set_host_compiler(host_version.ok() && host_version->exit_code == 0
                                    ? FirstLine(host_version->stdout_text)
                                    : absl::StrCat(host_compiler, " missing"));
  fingerprint.set_digest(
      DigestOf(absl::StrCat(fingerprint.nvcc_release(), "\n", fingerprint.nvcc_build(), "\n",
                            fingerprint.nvcc_sha256(), "\n", fingerprint.cicc_sha256(), "\n",
                            fingerprint.ptxas_sha256(), "\n", fingerprint.cuda_version_header(),
                            "\n", fingerprint.host_compiler()))
          .hash);
  return fingerprint;
}

absl::StatusOr<v1::ToolchainFingerprint> SharedToolchainFingerprint(
    const std::string& nvcc_path, const std::string& host_compiler,
    const std::string& hash_cache_dir) {
  struct Fingerprinting {
    absl::Notification done;
    absl::StatusOr<v1::ToolchainFingerprint> result;
  };
  static absl::Mutex mu;
  static auto* known = new std::map<std::string, std::shared_ptr<Fingerprinting>>();
  // The host compiler as `RunProcess` finds it for the fingerprint.
  std::map<std::string, std::string> environment;
  if (const char* path = std::getenv("PATH")) environment["PATH"] = path;
  absl::StatusOr<std::string> host = ResolveProgram(host_compiler, environment, "");
  const std::string key =
      absl::StrCat(AbsolutePath(nvcc_path), "\n", host_compiler, "\n",
                   ToolchainFilesSignature(nvcc_path), StatSignature(host.ok() ? *host : ""));
  std::shared_ptr<Fingerprinting> entry;
  bool mine = false;
  {
    absl::MutexLock lock(&mu);
    std::shared_ptr<Fingerprinting>& slot = (*known)[key];
    if (slot == nullptr) {
      slot = std::make_shared<Fingerprinting>();
      mine = true;
    }
    entry = slot;
  }
  if (!mine) {
    entry->done.WaitForNotification();
    if (entry->result.ok()) return entry->result;
    // Its failure may have been its own (a timeout under load): try again.
    return ComputeToolchainFingerprint(nvcc_path, host_compiler, hash_cache_dir);
  }
  entry->result = ComputeToolchainFingerprint(nvcc_path, host_compiler, hash_cache_dir);
  if (!entry->result.ok()) {
    absl::MutexLock lock(&mu);
    auto it = known->find(key);
    if (it != known->end() && it->second == entry) known->erase(it);
  }
  entry->done.Notify();
  return entry->result;
}

std::string ToolchainFilesSignature(const std::string& nvcc_path, const ToolkitPrograms& programs) {
  // Workers ask at every heartbeat; finding a wrapper script's toolkit runs
  // the script, so the answer is kept while the script itself is unchanged.
  static absl::Mutex mu;
  static auto* known = new std::map<std::string, std::pair<std::string, ToolkitFiles>>();
  const std::string own = StatSignature(nvcc_path);
  std::optional<ToolkitFiles> files;
  {
    absl::MutexLock lock(&mu);
    auto it = known->find(nvcc_path);
    if (it != known->end() && it->second.first == own) files = it->second.second;
  }
  if (!files) {
    files = ToolkitFilesOf(nvcc_path, programs);
    absl::MutexLock lock(&mu);
    (*known)[nvcc_path] = {own, *files};
  }
  return SignatureOf(nvcc_path, *files);
}

absl::Status CheckRequiredRelease(const v1::ToolchainFingerprint& toolchain,
                                  const std::string& required) {
  if (required.empty()) return absl::OkStatus();
  static const std::regex kRequired("[0-9]+\\.[0-9]+(\\.[0-9]+)?");
  if (!std::regex_match(required, kRequired)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--require-nvcc '", required, "' is not a CUDA release; write it as 12.8 or 12.8.93"));
  }
  bool patch = std::count(required.begin(), required.end(), '.') == 2;
  const std::string& found = patch ? toolchain.nvcc_version() : toolchain.nvcc_release();
  if (found == required) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "nvcc ", required, " is required, but ", toolchain.nvcc_path(), " is release ",
      toolchain.nvcc_release(), " (V", toolchain.nvcc_version(), ", ", toolchain.nvcc_build(),
      "). Point at a CUDA ", required, " toolkit with --nvcc /path/to/cuda-", required,
      "/bin/nvcc or CUDA_HOME=/path/to/cuda-", required,
      ", or change --require-nvcc if the build really wants ", toolchain.nvcc_release()));
}

std::string DescribeToolchain(const v1::ToolchainFingerprint& toolchain) {
  return absl::StrCat("nvcc ", toolchain.nvcc_release(), " (", toolchain.nvcc_build(), "), ",
                      toolchain.host_compiler(), " [", toolchain.digest().substr(0, 12), "]");
}

}  // namespace distcc_cuda
