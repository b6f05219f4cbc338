// SPDX-License-Identifier: Apache-2.0
// The worker identities a coordinator no longer trusts: revoked by an
// operator (`distcc-cuda-coordinator revoke NAME`) or quarantined by a
// cross-check whose second compile disagreed. Kept in the state dir's
// `revoked-workers` file, one line per name, so that a revocation outlives
// restarts and the command can add one while the coordinator runs: the
// coordinator reads the file again when it changes (Reload). Writers take
// a lock file beside it, so the command and the coordinator never lose each
// other's lines.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace distcc_cuda::coordinator {

struct Revocation {
  std::string name;    // the name in the worker's certificate
  std::string reason;  // one line, terminal-safe
  int64_t since_unix_seconds = 0;
};

using RevocationMap = std::map<std::string, Revocation, std::less<>>;

// The file under a coordinator's state dir.
std::string RevocationsPathIn(const std::string& state_dir);

class WorkerRevocations {
 public:
  // Reads `path`; a missing file revokes nobody. INVALID_ARGUMENT naming the
  // file and line for a line that is not NAME<TAB>SECONDS<TAB>REASON.
  static absl::StatusOr<std::unique_ptr<WorkerRevocations>> Open(std::string path);

  bool IsRevoked(absl::string_view name) const;
  std::optional<Revocation> Find(absl::string_view name) const;
  // Every revocation, by name.
  std::vector<Revocation> List() const;

  // Revokes `name` (a certificate name, ValidateCertificateName) for
  // `reason` (cut to one line of 300 bytes, controls replaced), in the file
  // and here. Returns false, changing nothing, when it is revoked already.
  absl::StatusOr<bool> Revoke(const std::string& name, const std::string& reason, absl::Time now);
  // Trusts `name` again. NOT_FOUND when it is not revoked.
  absl::Status Lift(const std::string& name);

  // Reads the file again when another process changed it; returns the names
  // it revokes now that it did not before (for the coordinator to act on).
  absl::StatusOr<std::vector<std::string>> Reload();

 private:
  explicit WorkerRevocations(std::string path) : path_(std::move(path)) {}

  // Under the writers' lock: reads the file, lets `change` edit its entries
  // (false: nothing to write), writes it back atomically.
  template <typename Change>
  absl::Status Rewrite(Change change);

  const std::string path_;
  mutable absl::Mutex mu_;
  RevocationMap entries_ ABSL_GUARDED_BY(mu_);
  // The file as last read: size, modification time and inode, to tell a
  // change without reading it.
  std::string stamp_ ABSL_GUARDED_BY(mu_);
};

// The file's text for `entries`, and its entries from `text` (`path` names
// it in errors).
std::string FormatRevocations(const RevocationMap& entries);
absl::StatusOr<RevocationMap> ParseRevocations(absl::string_view text, absl::string_view path);

}  // namespace distcc_cuda::coordinator
