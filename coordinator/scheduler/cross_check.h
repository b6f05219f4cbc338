// SPDX-License-Identifier: Apache-2.0
// A second opinion on what workers report (--cross-check-rate): a sampled
// unit that a worker compiled is compiled again by a worker of another
// identity, as a build of its own that avoids the first, and the two
// objects are compared. Results are deterministic but for the names of
// nvcc's temporary files, so the same unit must give the same object. When
// they differ, a third identity compiles it and the majority decides: the
// worker outvoted is quarantined (revoked, so its results leave the cache).
// Without a third worker, or when all three differ, nobody is convicted and
// the disputed result leaves the cache.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/bounded_executor.h"
#include "common/store/cas_store.h"
#include "coordinator/scheduler/scheduler.h"

namespace distcc_cuda::coordinator {

// Whether two results of one unit say the same thing: both compiled, and
// each declared output has the same bytes but for nvcc's temporary file
// names (tmpxft_XXXXXXXX_XXXXXXXX), or both failed to compile. `detail` says
// what differs, for the log. `read` fetches an output's bytes.
struct Agreement {
  bool same = false;
  std::string detail;
};
Agreement CompareResults(const v1::TaskResult& a, const v1::TaskResult& b,
                         const std::function<absl::StatusOr<std::string>(const Digest&)>& read);

// `object` with every "tmpxft_" name of nvcc's temporary files (8 and 8
// hexadecimal digits) blanked to zeros, its length unchanged.
std::string WithoutTemporaryNames(std::string object);

class CrossChecker {
 public:
  struct Hooks {
    BuildScheduler* scheduler = nullptr;
    const CasStore* cas = nullptr;
    // Revokes the worker identity `peer` for `reason`.
    std::function<void(const std::string& peer, const std::string& reason)> quarantine;
    // Drops the cached result of `action_digest`.
    std::function<void(const std::string& action_digest)> forget;
  };
  // Counts its verdicts in `registry`: distcc_cuda_cross_checks_total
  // {verdict="agreed|quarantined|undecided|skipped"}.
  CrossChecker(Hooks hooks, prometheus::Registry& registry);
  // Waits for the checks being judged; checks still compiling are dropped.
  ~CrossChecker();

  // Takes a sampled unit (BuildScheduler::SetCrossCheck); returns at once.
  void Check(CrossCheckCandidate candidate);

 private:
  // One unit under check: the producer's result, then each second opinion.
  struct Case {
    CrossCheckCandidate candidate;
    std::vector<v1::TaskResult> opinions;
    bool settled = false;
  };
  enum class Verdict { kAgreed, kQuarantined, kUndecided, kSkipped };

  // Submits the unit again, avoiding every worker that has compiled it.
  void AskAnother(const std::shared_ptr<Case>& check);
  // A check build's events (under the scheduler's lock: only hands over);
  // `unit_seen` is that build's own flag.
  void OnEvent(const std::shared_ptr<Case>& check, const v1::BuildEvent& event, bool& unit_seen);
  // Weighs a new opinion.
  void Judge(const std::shared_ptr<Case>& check, v1::TaskResult opinion);
  // Ends a case, counting its verdict.
  void Settle(const std::shared_ptr<Case>& check, Verdict verdict, const std::string& why);

  const Hooks hooks_;
  prometheus::Counter* agreed_;
  prometheus::Counter* quarantined_;
  prometheus::Counter* undecided_;
  prometheus::Counter* skipped_;
  absl::Mutex mu_;
  int open_cases_ ABSL_GUARDED_BY(mu_) = 0;
  // At most this many units under check at once; more are skipped.
  static constexpr int kMaxOpenCases = 64;
  // Judges and submits outside the scheduler's lock and the RPC threads.
  BoundedExecutor executor_{1, 256};
};

}  // namespace distcc_cuda::coordinator
