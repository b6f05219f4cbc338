// SPDX-License-Identifier: Apache-2.0
// ccache's direct mode for include scans. A scan (`nvcc -M`) answers which
// files a compile reads; the answer depends only on the question (nvcc,
// flags, source, folder, the environment nvcc reads) and on the files and
// folders the preprocessor looked at. The cache keeps, per question, the
// files nvcc listed (size, times, inode and SHA-256 of each) and the folders
// in which a new header would change the answer (every includer's folder,
// and each include path's folder of the same relative name as a header
// found). When none of them changed (a stat each; a digest only where the
// stat differs), the answer is reused and no nvcc runs. Paths inside the
// question's workspace are kept relative to it: the same tree in another
// folder finds the entry, its files' content checked (their stats differ).
//
// Limits, as ccache's: a header that starts to exist where a
// `__has_include` or a computed #include would find it in a folder not
// watched is not noticed; files changed less than 100 ms before the scan
// began are too new to trust, and such a scan is not remembered.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/plan/options.h"
#include "common/store/digest.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::v1 {
class ScanCacheEntry_Folder;
}

namespace distcc_cuda::client {

struct ScanQuestion {
  std::string nvcc;
  std::string directory;
  std::vector<std::string> flags;
  std::string source;
  std::vector<std::string> dependency_arguments;  // -M, or what the caller's -MD became
  // The folder the compile's workspace is in (client/plan/workspace_layout.h):
  // the entry names its files and folders relative to it, so that the same
  // tree in another folder (a new pip temporary folder, a second checkout)
  // finds it. "": every path as it is.
  std::string workspace;
};

struct ScanAnswer {
  std::vector<std::string> files;  // the first rule's files, absolute, none left out
  std::string dependency_text;     // the -MF file nvcc wrote; empty when it wrote none
};

// How much the scan cache keeps: about 3,000 entries of flash-attention's
// size (an entry of its 1,169 files and 2,136 watched folders is 88 KB as a
// zstd frame, 420 KB raw).
inline constexpr int64_t kScanCacheBytes = int64_t{256} << 20;

class ScanCache {
 public:
  // Entries under `folder` ("": none kept), for the toolchain of digest
  // `toolchain_digest` only (a different nvcc or host compiler asks
  // different questions) in an environment that sets `nvcc_variables`
  // (ClientEnvironment's), which each question includes and a scan obeys.
  ScanCache(std::string folder, std::string toolchain_digest, EnvironmentVariables nvcc_variables);

  // The folder of the scan cache: `named` ($DISTCC_CUDA_SCAN_CACHE) if set
  // ("off": none, ""), else `state_dir`/scan.
  static std::string FolderFor(const std::string& state_dir,
                               const std::optional<std::string>& named);

  // The kNvccVariables set where this client runs.
  const EnvironmentVariables& nvcc_variables() const { return nvcc_variables_; }

  // The remembered answer if nothing it depends on changed. An answer whose
  // files changed in stat only (a checkout that rewrote equal content) is
  // remembered again with the new stats.
  std::optional<ScanAnswer> Find(const ScanQuestion& question);

  // Remembers `answer`, found by a scan that began at `scan_began`. Not
  // remembered when a file or folder changed since shortly before then.
  void Remember(const ScanQuestion& question, const ScanAnswer& answer, absl::Time scan_began);

  // Removes the least recently used entries until the folder holds at most
  // `max_bytes`; returns how many it removed. A build calls it once, at its
  // end.
  int Trim(int64_t max_bytes);

  // The digest of the file at absolute `path` as this cache last vouched
  // for it: a Find that answered checked it against its entry (by stat, or
  // by hashing it where the stat changed), a Remember hashed it. A rebuild's
  // inputs then need no hashing of their own (the CUTLASS headers of one
  // unit: 1,163 files).
  std::optional<Digest> KnownDigest(const std::string& path) const;

  // The inputs (input_root, and the own files beside it) that a unit of
  // `files` (absolute paths, each vouched for by this cache: KnownDigest),
  // mounted at `root` with its source at `source` (relative to `root`), had
  // when its tree was last built and checked here (RememberTree). They are a
  // function of exactly these paths, digests and stats, which name the memo,
  // so nothing needs checking again: a rebuild's unit goes by its root (the
  // CUTLASS headers of one unit: 1,163 paths checked and 150 folders hashed,
  // 10-20 ms, skipped). None when a file is not vouched for or nothing was
  // remembered.
  std::optional<v1::CompileUnit> FindTree(const std::string& root, const std::string& source,
                                          const std::vector<std::string>& files) const;
  void RememberTree(const std::string& root, const std::string& source,
                    const std::vector<std::string>& files, const v1::CompileUnit& unit) const;

  int hits() const { return hits_; }
  int misses() const { return misses_; }
  // How many times a folder's names were read (not taken from an earlier
  // reading of the same folder in the same state).
  int folders_listed() const { return folders_listed_; }

 private:
  std::string EntryPath(const std::string& question) const;
  // Where the memo of FindTree's arguments lives; "" when a file is not
  // vouched for.
  std::string TreePath(const std::string& root, const std::string& source,
                       const std::vector<std::string>& files) const;
  std::string QuestionText(const ScanQuestion& question) const;
  // The folder at `path` now: whether it exists, its mtime and inode, and
  // with `with_names` the digest of its sorted entry names.
  v1::ScanCacheEntry_Folder FolderNow(const std::string& path, bool with_names);
  // The names digest of the folder at `path`, whose stat said `mtime_ns`
  // and `inode`: listed once per such state while this cache lives. The
  // units of one build watch the same folders; a source folder of 20,000
  // files was listed and sorted once per unit (quadratic).
  std::string NamesDigest(const std::string& path, int64_t mtime_ns, uint64_t inode);

  struct ListedFolder {
    int64_t mtime_ns;
    uint64_t inode;
    std::string names_sha256;
  };

  const std::string folder_;
  const std::string toolchain_digest_;
  const EnvironmentVariables nvcc_variables_;
  std::atomic<int> hits_{0};
  std::atomic<int> misses_{0};
  std::atomic<int> folders_listed_{0};
  absl::Mutex listed_mu_;
  absl::flat_hash_map<std::string, ListedFolder> listed_ ABSL_GUARDED_BY(listed_mu_);
  struct Vouched {
    Digest digest;
    std::string stat;  // size, times, inode, device
  };
  mutable absl::Mutex known_mu_;
  absl::flat_hash_map<std::string, Vouched> known_ ABSL_GUARDED_BY(known_mu_);
};

// The folders to watch for `answer`: each file's own folder, and for each
// file under one of the question's include folders (-I, -isystem, -iquote,
// -idirafter, the toolkit's include folders) at a relative path, the folder
// of that relative path under every include folder of the question.
std::vector<std::string> FoldersToWatch(const ScanQuestion& question,
                                        const std::vector<std::string>& files);

}  // namespace distcc_cuda::client
