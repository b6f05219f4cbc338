// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/cross_check.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::coordinator {
namespace {

bool Compiled(const v1::TaskResult& result) {
  return result.outcome() == v1::TASK_COMPLETED && result.exit_code() == 0;
}

// A compile that ran to its end and failed: an opinion (the source does not
// compile), unlike a kill, a timeout or a lost worker.
bool FailedToCompile(const v1::TaskResult& result) {
  return result.outcome() == v1::TASK_COMPLETED && result.exit_code() != 0;
}

std::string Who(const v1::TaskResult& result) {
  return absl::StrCat(result.worker_name(), " (", result.producer(), ")");
}

}  // namespace

std::string WithoutTemporaryNames(std::string object) {
  constexpr std::string_view kPrefix = "tmpxft_";
  constexpr size_t kName = 8 + 1 + 8;
  for (size_t at = object.find(kPrefix); at != std::string::npos;
       at = object.find(kPrefix, at + 1)) {
    size_t name = at + kPrefix.size();
    if (name + kName > object.size()) break;
    bool hex = true;
    for (size_t i = 0; i < kName && hex; ++i) {
      char c = object[name + i];
      hex = i == 8 ? c == '_' : absl::ascii_isxdigit(static_cast<unsigned char>(c));
    }
    if (!hex) continue;
    for (size_t i = 0; i < kName; ++i) {
      if (i != 8) object[name + i] = '0';
    }
  }
  return object;
}

Agreement CompareResults(const v1::TaskResult& a, const v1::TaskResult& b,
                         const std::function<absl::StatusOr<std::string>(const Digest&)>& read) {
  if (FailedToCompile(a) && FailedToCompile(b)) return {true, "both failed to compile"};
  if (Compiled(a) != Compiled(b)) {
    return {false, absl::StrCat(Compiled(a) ? Who(b) : Who(a), " failed to compile it, ",
                                Compiled(a) ? Who(a) : Who(b), " did not")};
  }
  if (a.outputs_size() != b.outputs_size()) {
    return {false, absl::StrCat(a.outputs_size(), " outputs against ", b.outputs_size())};
  }
  for (int i = 0; i < a.outputs_size(); ++i) {
    const v1::OutputFile& first = a.outputs(i);
    const v1::OutputFile& second = b.outputs(i);
    if (first.path() != second.path()) return {false, "their outputs have other names"};
    Digest first_digest = FromProto(first.digest());
    Digest second_digest = FromProto(second.digest());
    if (first_digest == second_digest) continue;
    absl::StatusOr<std::string> first_bytes = read(first_digest);
    absl::StatusOr<std::string> second_bytes = read(second_digest);
    if (!first_bytes.ok() || !second_bytes.ok()) {
      return {false,
              absl::StrCat("cannot read ", first.path(), " to compare: ",
                           (first_bytes.ok() ? second_bytes : first_bytes).status().message())};
    }
    if (WithoutTemporaryNames(*std::move(first_bytes)) !=
        WithoutTemporaryNames(*std::move(second_bytes))) {
      return {false, absl::StrCat(first.path(), " differs: ", first_digest.ToString(), " against ",
                                  second_digest.ToString())};
    }
  }
  return {true, "the same objects"};
}

CrossChecker::CrossChecker(Hooks hooks, prometheus::Registry& registry) : hooks_(std::move(hooks)) {
  auto& checks =
      prometheus::BuildCounter()
          .Name("distcc_cuda_cross_checks_total")
          .Help(
              "Units compiled a second time by another worker (--cross-check-rate), by "
              "verdict: agreed; quarantined (a third worker sided with one of the two and the "
              "other was revoked); undecided (no third worker, or all differed: the result "
              "left the cache); skipped (no other worker, or too many checks at once)")
          .Register(registry);
  agreed_ = &checks.Add({{"verdict", "agreed"}});
  quarantined_ = &checks.Add({{"verdict", "quarantined"}});
  undecided_ = &checks.Add({{"verdict", "undecided"}});
  skipped_ = &checks.Add({{"verdict", "skipped"}});
}

CrossChecker::~CrossChecker() { executor_.Shutdown(); }

void CrossChecker::Check(CrossCheckCandidate candidate) {
  {
    absl::MutexLock lock(&mu_);
    if (open_cases_ >= kMaxOpenCases) {
      skipped_->Increment();
      return;
    }
    ++open_cases_;
  }
  auto check = std::make_shared<Case>();
  check->opinions.push_back(candidate.result);
  check->candidate = std::move(candidate);
  if (!executor_.Submit([this, check] { AskAnother(check); })) {
    Settle(check, Verdict::kSkipped, "the cross-check queue is full");
  }
}

void CrossChecker::AskAnother(const std::shared_ptr<Case>& check) {
  const CrossCheckCandidate& candidate = check->candidate;
  if (hooks_.scheduler->PeersWith(candidate.toolchain_digest, candidate.unit.avoid_peers) == 0) {
    Settle(check, check->opinions.size() < 2 ? Verdict::kSkipped : Verdict::kUndecided,
           "no worker of another identity has the toolchain");
    return;
  }
  v1::ToolchainFingerprint toolchain;
  toolchain.set_digest(candidate.toolchain_digest);
  absl::StatusOr<std::string> submitted = hooks_.scheduler->SubmitBuild(
      absl::StrCat("cross-check of ", candidate.unit.unit.name()), toolchain, {candidate.unit}, {},
      [this, check, unit_seen = std::make_shared<bool>(false)](const v1::BuildEvent& event) {
        OnEvent(check, event, *unit_seen);
      },
      absl::Now());
  if (!submitted.ok()) {
    Settle(check, check->opinions.size() < 2 ? Verdict::kSkipped : Verdict::kUndecided,
           std::string(submitted.status().message()));
  }
}

void CrossChecker::OnEvent(const std::shared_ptr<Case>& check, const v1::BuildEvent& event,
                           bool& unit_seen) {
  if (event.has_unit_finished()) {
    unit_seen = true;
    v1::TaskResult opinion = event.unit_finished().result();
    if (!executor_.Submit([this, check, opinion] { Judge(check, opinion); })) {
      // Settled without dropping anything: no disk under the scheduler's lock.
      Settle(check, Verdict::kSkipped, "the cross-check queue is full");
    }
  } else if (event.has_finished() && !unit_seen) {
    // Ended without a unit (stranded, cancelled): judged as no opinion.
    v1::TaskResult none;
    none.set_outcome(v1::TASK_FAILED_TO_START);
    none.set_error_message(event.finished().message());
    executor_.Submit([this, check, none] { Judge(check, none); });
  }
}

void CrossChecker::Judge(const std::shared_ptr<Case>& check, v1::TaskResult opinion) {
  {
    absl::MutexLock lock(&mu_);
    if (check->settled) return;
  }
  const std::string& unit = check->candidate.unit.unit.name();
  if (!Compiled(opinion) && !FailedToCompile(opinion)) {
    Settle(check, Verdict::kUndecided,
           absl::StrCat("the second compile did not finish: ", opinion.error_message()));
    return;
  }
  auto read = [this](const Digest& digest) { return hooks_.cas->Get(digest); };
  check->opinions.push_back(std::move(opinion));
  const std::vector<v1::TaskResult>& opinions = check->opinions;
  const v1::TaskResult& first = opinions.front();
  const v1::TaskResult& latest = opinions.back();
  Agreement with_first = CompareResults(first, latest, read);
  if (opinions.size() == 2) {
    if (with_first.same) {
      Settle(check, Verdict::kAgreed, absl::StrCat(Who(first), " and ", Who(latest), " agree"));
      return;
    }
    spdlog::warn("cross-check of {}: {} and {} disagree ({}); asking a third worker", unit,
                 Who(first), Who(latest), with_first.detail);
    check->candidate.unit.avoid_peers.insert(latest.producer());
    AskAnother(check);
    return;
  }
  const v1::TaskResult& second = opinions[1];
  Agreement with_second = CompareResults(second, latest, read);
  if (with_first.same == with_second.same) {
    Settle(check, Verdict::kUndecided,
           absl::StrCat(Who(first), ", ", Who(second), " and ", Who(latest), " all disagree"));
    return;
  }
  const v1::TaskResult& outvoted = with_first.same ? second : first;
  const v1::TaskResult& sided = with_first.same ? first : second;
  std::string reason =
      absl::StrCat("quarantined by a cross-check: its object for unit ", unit, " differed from ",
                   sided.producer(), "'s and ", latest.producer(), "'s (",
                   (with_first.same ? with_second : with_first).detail, ")");
  hooks_.quarantine(outvoted.producer(), reason);
  Settle(check, Verdict::kQuarantined, absl::StrCat(outvoted.producer(), " ", reason));
}

void CrossChecker::Settle(const std::shared_ptr<Case>& check, Verdict verdict,
                          const std::string& why) {
  {
    absl::MutexLock lock(&mu_);
    if (check->settled) return;
    check->settled = true;
    --open_cases_;
  }
  const std::string& unit = check->candidate.unit.unit.name();
  switch (verdict) {
    case Verdict::kAgreed:
      agreed_->Increment();
      spdlog::info("cross-check of {}: {}", unit, why);
      break;
    case Verdict::kQuarantined:
      quarantined_->Increment();
      spdlog::error("cross-check of {}: {}", unit, why);
      break;
    case Verdict::kUndecided:
      undecided_->Increment();
      // Nobody can say which object is right: neither is served again.
      if (hooks_.forget) hooks_.forget(check->candidate.unit.action_digest);
      spdlog::error(
          "cross-check of {}: undecided, its cached result is dropped: {}. If a worker is "
          "broken or not yours, revoke it: distcc-cuda-coordinator revoke --state-dir DIR NAME",
          unit, why);
      break;
    case Verdict::kSkipped:
      skipped_->Increment();
      spdlog::debug("cross-check of {} skipped: {}", unit, why);
      break;
  }
}

}  // namespace distcc_cuda::coordinator
