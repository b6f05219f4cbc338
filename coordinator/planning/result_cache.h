// SPDX-License-Identifier: Apache-2.0
// Successful unit results kept by action digest (toolchain + arguments +
// input closure), so an unchanged unit is never compiled twice.
#pragma once

#include <optional>
#include <string>

#include "common/store/cas_store.h"
#include "common/store/digest.h"
#include "coordinator/trust/revocations.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::coordinator {

class ResultCache {
 public:
  // Results live in `directory`, one file per action; outputs are in `cas`.
  // A result whose producer is in `revocations` (may be null) is never
  // served.
  ResultCache(std::string directory, const CasStore* cas,
              const WorkerRevocations* revocations = nullptr);

  // Returns the cached result if it exists, all its outputs are still in
  // the CAS and its producer is not revoked (such an entry is dropped).
  std::optional<v1::TaskResult> Lookup(const std::string& action_digest) const;
  // Names the result of `action_digest` also `alias` (a REAPI Action's
  // digest, which names the same compile): LookupAlias finds what Lookup
  // finds for it, so a result forgotten or revoked is gone for both. Logs
  // and ignores write errors, as Record.
  void RecordAlias(const std::string& alias, const std::string& action_digest);
  std::optional<v1::TaskResult> LookupAlias(const std::string& alias) const;
  // Drops the result of one action (its second compile disagreed).
  void Forget(const std::string& action_digest);
  // Drops every result that `producer` made; returns how many. Reads every
  // entry: for a revocation, never on a thread that RPCs wait on.
  int ForgetProducedBy(const std::string& producer);
  // Stores a successful result. Logs and ignores write errors: a lost cache
  // entry only costs a recompile.
  void Record(const std::string& action_digest, const v1::TaskResult& result);

 private:
  std::string PathOf(const std::string& action_digest) const;
  // Beside `directory`, which holds results only.
  std::string AliasPathOf(const std::string& alias) const;
  std::string directory_;
  const CasStore* cas_;
  const WorkerRevocations* revocations_;
};

// The action digest of a unit compiled with `toolchain_digest`: a SHA-256
// over the toolchain, workspace root, working directory, arguments, outputs
// and `inputs`, the root of the tree of all its inputs (the one
// BuildInputTree gives their list; InputTreeExpander::RootWith). The unit's
// own `inputs` and `input_root` fields are not read.
std::string ActionDigest(const std::string& toolchain_digest, const v1::CompileUnit& unit,
                         const Digest& inputs);

}  // namespace distcc_cuda::coordinator
