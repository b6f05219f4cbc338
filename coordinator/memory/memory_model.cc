// SPDX-License-Identifier: Apache-2.0
#include "coordinator/memory/memory_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/nvcc/nvcc_args.h"
#include "common/store/digest.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::coordinator {
namespace {

// Keys of the host compiler's units start with this: never those of an nvcc
// unit with the same flags.
constexpr char kHostCompilerKey[] = "compiler=host-c++";

// `command`'s flags, as the keys of its family name them.
std::vector<std::string> KeyFlags(const NvccCommand& command) {
  std::vector<std::string> flags = command.FlagArguments();
  if (command.host_compiler) flags.insert(flags.begin(), kHostCompilerKey);
  return flags;
}

int64_t Quantile(std::vector<int64_t> values, double quantile) {
  std::sort(values.begin(), values.end());
  // Nearest rank: with few samples this is the largest, as caution wants.
  size_t rank = static_cast<size_t>(std::ceil(quantile * values.size()));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

// The flags of a unit without its sources and outputs.
std::vector<std::string> FlagsOf(const v1::CompileUnit& unit) {
  std::vector<std::string> arguments(unit.arguments().begin(), unit.arguments().end());
  absl::StatusOr<NvccCommand> command = ParseCompileArguments(unit.compiler(), arguments);
  return command.ok() ? KeyFlags(*command) : arguments;
}

// The digest of `unit`'s listed source (`command`'s), "" if not listed.
std::string SourceDigest(const v1::CompileUnit& unit, const NvccCommand& command) {
  if (command.sources.empty()) return "";
  const std::string& source = command.sources[0];
  std::string path = unit.working_directory().empty()
                         ? source
                         : absl::StrCat(unit.working_directory(), "/", source);
  for (const auto& input : unit.inputs()) {
    if (input.path() == path) return input.digest().hash();
  }
  return "";
}

std::string Key(std::initializer_list<std::string> parts, const std::vector<std::string>& more) {
  Sha256 sha;
  for (const std::string& part : parts) sha.Update(absl::StrCat(part.size(), ":", part));
  for (const std::string& part : more) sha.Update(absl::StrCat(part.size(), ":", part));
  return sha.FinishHex().substr(0, 32);
}

// One run as a line of the history file: identity, family, peak, wall,
// instantiations [, closure family [, closure bytes, parallel compilations]].
std::string HistoryLine(const std::string& identity, const std::string& family, int64_t peak,
                        int64_t wall_ms, int instantiations, const std::string& closure,
                        int64_t closure_bytes, int parallel) {
  std::string line =
      absl::StrCat(identity, "\t", family, "\t", peak, "\t", wall_ms, "\t", instantiations);
  if (!closure.empty()) {
    absl::StrAppend(&line, "\t", closure);
    if (closure_bytes > 0) absl::StrAppend(&line, "\t", closure_bytes, "\t", parallel);
  }
  return line + "\n";
}

}  // namespace

int ParallelCompilations(const std::vector<std::string>& arguments) {
  absl::StatusOr<NvccCommand> command = ParseNvccCommand(arguments);
  return command.ok() ? ParallelCompilations(*command) : 1;
}

int ParallelCompilations(const NvccCommand& command) {
  int targets = 0;
  int threads = 1;
  int split = 1;
  for (const NvccArgument& flag : command.flags) {
    if (flag.option == "-gencode" || flag.option == "--generate-code") {
      ++targets;
    } else if (flag.option == "-t" || flag.option == "--threads") {
      int value = 1;
      if (absl::SimpleAtoi(flag.value, &value)) threads = value;
    } else if (flag.option == "--split-compile" || flag.option == "-split-compile") {
      int value = 1;
      if (absl::SimpleAtoi(flag.value, &value)) split = std::max(1, value);
    }
  }
  targets = std::max(targets, 1);
  // --threads 0 lets nvcc run every target at once.
  int parallel = threads <= 0 ? targets : std::min(threads, targets);
  return parallel * split;
}

int TargetWaves(const NvccCommand& command) {
  int targets = 0;
  for (const NvccArgument& flag : command.flags) {
    if (flag.option == "-gencode" || flag.option == "--generate-code") ++targets;
  }
  if (targets <= 1) return 1;
  const int at_once = std::max(1, ParallelCompilations(command));
  return (targets + at_once - 1) / at_once;
}

std::string UnitIdentity(const std::string& toolchain_digest, const v1::CompileUnit& unit) {
  absl::StatusOr<NvccCommand> command =
      ParseCompileArguments(unit.compiler(), {unit.arguments().begin(), unit.arguments().end()});
  return UnitIdentity(toolchain_digest, unit, command.ok() ? *command : NvccCommand());
}

std::string UnitIdentity(const std::string& toolchain_digest, const v1::CompileUnit& unit,
                         const NvccCommand& command) {
  std::vector<std::string> arguments(unit.arguments().begin(), unit.arguments().end());
  if (unit.compiler() != v1::UNIT_COMPILER_NVCC)
    arguments.insert(arguments.begin(), kHostCompilerKey);
  return Key({"identity", toolchain_digest, unit.working_directory(), SourceDigest(unit, command)},
             arguments);
}

std::string UnitFamily(const std::string& toolchain_digest, const v1::CompileUnit& unit,
                       const std::string& family_hint) {
  return Key({"family", toolchain_digest, family_hint}, FlagsOf(unit));
}

std::string UnitFamily(const std::string& toolchain_digest, const NvccCommand& command,
                       const std::string& family_hint) {
  return Key({"family", toolchain_digest, family_hint}, KeyFlags(command));
}

std::string ClosureFamily(const std::string& toolchain_digest, const NvccCommand& command,
                          const v1::CompileUnit& unit) {
  if (!unit.has_input_root() || unit.input_root().hash().empty()) return "";
  return Key({"closure", toolchain_digest, unit.input_root().hash()}, KeyFlags(command));
}

absl::StatusOr<std::unique_ptr<PeakHistory>> PeakHistory::Open(const std::string& path,
                                                               PredictionDefaults defaults) {
  std::unique_ptr<PeakHistory> history(new PeakHistory(path, defaults));
  if (path.empty() || !IsRegularFile(path)) return history;
  std::ifstream in(path);
  std::string line;
  struct Run {
    std::string identity, family, closure;
    int64_t peak = 0, wall_ms = 0;
    int instantiations = 1;
    int64_t closure_bytes = 0;
    int parallel = 1;
  };
  std::vector<Run> runs;
  size_t lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    std::vector<std::string> fields = absl::StrSplit(line, '\t');
    Run run;
    // identity, family, peak, wall [, instantiations [, closure family
    // [, closure bytes, parallel compilations]]]
    if (fields.size() < 4 || fields.size() > 8 || fields.size() == 7 ||
        !absl::SimpleAtoi(fields[2], &run.peak) || !absl::SimpleAtoi(fields[3], &run.wall_ms) ||
        (fields.size() >= 5 &&
         (!absl::SimpleAtoi(fields[4], &run.instantiations) || run.instantiations < 1)) ||
        (fields.size() == 8 &&
         (!absl::SimpleAtoi(fields[6], &run.closure_bytes) || run.closure_bytes < 0 ||
          !absl::SimpleAtoi(fields[7], &run.parallel) || run.parallel < 1))) {
      continue;  // a torn last line after a crash
    }
    run.identity = fields[0];
    run.family = fields[1];
    if (fields.size() >= 6) run.closure = fields[5];
    runs.push_back(std::move(run));
  }
  // Only each unit's latest runs count: older ones are left out of the
  // rewritten file.
  std::map<std::string, size_t> per_identity;
  for (const Run& run : runs) ++per_identity[run.identity];
  std::string kept;
  size_t kept_runs = 0;
  absl::MutexLock lock(&history->mu_);
  for (const Run& run : runs) {
    if (per_identity[run.identity]-- > kRunsPerIdentity) continue;
    history->Add(run.identity, run.family, run.closure, run.peak, run.wall_ms, run.instantiations,
                 run.closure_bytes, run.parallel);
    absl::StrAppend(&kept,
                    HistoryLine(run.identity, run.family, run.peak, run.wall_ms, run.instantiations,
                                run.closure, run.closure_bytes, run.parallel));
    ++kept_runs;
  }
  if (kept_runs < lines) {
    absl::Status written = WriteFileAtomically(path, kept);
    if (written.ok()) {
      spdlog::info("compacted {}: {} lines to {}", path, lines, kept_runs);
    } else {
      spdlog::warn("cannot compact {}: {}", path, written.ToString());
    }
  }
  spdlog::info("loaded {} measured runs from {}", history->count_, path);
  return history;
}

void PeakHistory::Samples::Add(int64_t peak, int64_t wall, size_t keep) {
  peaks.push_back(peak);
  wall_ms.push_back(wall);
  if (peaks.size() > keep) {
    peaks.erase(peaks.begin());
    wall_ms.erase(wall_ms.begin());
  }
  quantiles.reset();
}

std::pair<int64_t, int64_t> PeakHistory::Samples::Quantiles(double quantile) {
  if (!quantiles) quantiles.emplace(Quantile(peaks, quantile), Quantile(wall_ms, quantile));
  return *quantiles;
}

void PeakHistory::Add(const std::string& identity, const std::string& family,
                      const std::string& closure, int64_t peak, int64_t wall_ms, int instantiations,
                      int64_t closure_bytes, int parallel) {
  by_identity_[identity].Add(peak, wall_ms, kRunsPerIdentity);
  by_family_[family].Add(peak / instantiations, wall_ms / instantiations, kRunsPerFamily);
  if (!closure.empty() && closure != family) {
    by_family_[closure].Add(peak / instantiations, wall_ms / instantiations, kRunsPerFamily);
    if (closure_bytes > 0) sized_[closure] = Sized{closure_bytes, std::max(1, parallel)};
  }
  ++count_;
}

void PeakHistory::Record(const std::string& identity, const std::string& family, int64_t peak_bytes,
                         absl::Duration wall, int instantiations, const std::string& closure,
                         int64_t closure_bytes, int parallel_compilations) {
  Learn(identity, family, peak_bytes, wall, instantiations, closure, closure_bytes,
        parallel_compilations);
  WritePending();
}

void PeakHistory::Learn(const std::string& identity, const std::string& family, int64_t peak_bytes,
                        absl::Duration wall, int instantiations, const std::string& closure,
                        int64_t closure_bytes, int parallel_compilations) {
  int64_t wall_ms = absl::ToInt64Milliseconds(wall);
  instantiations = std::max(1, instantiations);
  closure_bytes = std::max<int64_t>(0, closure_bytes);
  parallel_compilations = std::max(1, parallel_compilations);
  absl::MutexLock lock(&mu_);
  Add(identity, family, closure, peak_bytes, wall_ms, instantiations, closure_bytes,
      parallel_compilations);
  if (path_.empty()) return;
  absl::StrAppend(&pending_, HistoryLine(identity, family, peak_bytes, wall_ms, instantiations,
                                         closure, closure_bytes, parallel_compilations));
}

void PeakHistory::WritePending() {
  if (path_.empty()) return;
  absl::MutexLock file_lock(&file_mu_);
  std::string lines;
  {
    absl::MutexLock lock(&mu_);
    lines.swap(pending_);
  }
  if (lines.empty()) return;
  std::ofstream out(path_, std::ios::app);
  out << lines;
  if (!out) spdlog::warn("cannot append to {}; the history stays in memory", path_);
}

UnitDemand PeakHistory::FromPrior(const PriorCost& prior, int parallel_compilations, int waves,
                                  int instantiations) const {
  const int64_t scale = int64_t{std::max(1, parallel_compilations)} * std::max(1, instantiations);
  const auto peak =
      static_cast<int64_t>(static_cast<double>(prior.peak_bytes) * defaults_.prior_memory_scale);
  return UnitDemand{
      WithMargin(peak * scale),
      prior.wall * defaults_.prior_time_scale * std::max(1, waves) * std::max(1, instantiations),
      "measured profile", PredictionBasis::kPrior};
}

UnitDemand PeakHistory::Predict(const std::string& identity, const std::string& family,
                                int parallel_compilations, int instantiations,
                                const std::string& closure, int64_t closure_bytes,
                                const std::optional<PriorCost>& prior, int waves) const {
  if (prior.has_value()) {
    // Anything measured here of its own closure or family knows better.
    UnitDemand measured = Predict(identity, family, parallel_compilations, instantiations, closure);
    if (measured.basis >= PredictionBasis::kSameClosure) return measured;
    return FromPrior(*prior, parallel_compilations, waves, instantiations);
  }
  instantiations = std::max(1, instantiations);
  absl::MutexLock lock(&mu_);
  if (auto own = by_identity_.find(identity); own != by_identity_.end()) {
    auto [peak, wall_ms] = own->second.Quantiles(defaults_.quantile);
    return UnitDemand{WithMargin(peak), absl::Milliseconds(wall_ms), "history",
                      PredictionBasis::kOwnHistory};
  }
  if (!closure.empty()) {
    if (auto same = GroupDemand(closure, PredictionBasis::kSameClosure, instantiations)) {
      return *same;
    }
  }
  if (auto similar = GroupDemand(family, PredictionBasis::kSimilarUnits, instantiations)) {
    return AtLeastDefaultForOtherClosure(*similar, closure, parallel_compilations, instantiations);
  }
  if (closure_bytes > 0) {
    if (auto sized =
            SimilarSizeDemand(closure_bytes, std::max(1, parallel_compilations), instantiations)) {
      return *sized;
    }
  }
  int64_t scale = std::max(1, parallel_compilations) * instantiations;
  return UnitDemand{defaults_.peak_bytes * scale, defaults_.wall * instantiations, "default",
                    PredictionBasis::kDefault};
}

UnitDemand PeakHistory::AtLeastDefaultForOtherClosure(UnitDemand demand, const std::string& closure,
                                                      int parallel, int instantiations) const {
  if (closure.empty()) return demand;
  const int64_t floor = defaults_.peak_bytes * std::max(1, parallel) * std::max(1, instantiations);
  demand.peak_bytes = std::max(demand.peak_bytes, floor);
  return demand;
}

std::optional<UnitDemand> PeakHistory::PredictFromGroup(const std::string& key,
                                                        PredictionBasis basis,
                                                        int instantiations) const {
  absl::MutexLock lock(&mu_);
  return GroupDemand(key, basis, std::max(1, instantiations));
}

std::optional<UnitDemand> PeakHistory::GroupDemand(const std::string& key, PredictionBasis basis,
                                                   int instantiations) const {
  auto group = by_family_.find(key);
  if (group == by_family_.end()) return std::nullopt;
  auto [peak, wall_ms] = group->second.Quantiles(defaults_.quantile);
  return UnitDemand{WithMargin(peak * instantiations), absl::Milliseconds(wall_ms * instantiations),
                    basis == PredictionBasis::kSameClosure ? "same closure" : "similar units",
                    basis};
}

std::optional<UnitDemand> PeakHistory::SimilarSizeDemand(int64_t closure_bytes, int parallel,
                                                         int instantiations) const {
  // The closure families nearest in size, within the ratio.
  std::vector<std::pair<double, const std::string*>> near;
  for (const auto& [key, sized] : sized_) {
    const double ratio =
        static_cast<double>(std::max(sized.bytes, closure_bytes)) /
        static_cast<double>(std::max<int64_t>(1, std::min(sized.bytes, closure_bytes)));
    if (ratio <= kSimilarSizeRatio) near.emplace_back(ratio, &key);
  }
  if (near.empty()) return std::nullopt;
  std::sort(near.begin(), near.end());
  if (near.size() > kSimilarSizeGroups) near.resize(kSimilarSizeGroups);
  // Their dearest per compilation at once, so that a unit of more targets
  // at once (--threads) or another unit size scales from it.
  int64_t peak_per_compilation = 0, wall_ms = 0;
  for (const auto& [ratio, key] : near) {
    auto group = by_family_.find(*key);
    if (group == by_family_.end()) continue;
    auto [peak, wall] = group->second.Quantiles(defaults_.quantile);
    peak_per_compilation = std::max(peak_per_compilation, peak / sized_.at(*key).parallel);
    wall_ms = std::max(wall_ms, wall);
  }
  if (peak_per_compilation == 0) return std::nullopt;
  // Units of other closures may instantiate far more than those they are
  // near in size (a CUTLASS kernel beside the library's registration unit):
  // never below the default.
  const int64_t scale = int64_t{parallel} * instantiations;
  return UnitDemand{
      std::max(WithMargin(peak_per_compilation * scale), defaults_.peak_bytes * scale),
      absl::Milliseconds(wall_ms * instantiations), "similar size", PredictionBasis::kSimilarSize};
}

int64_t PeakHistory::WithMargin(int64_t peak) const {
  return peak + static_cast<int64_t>(peak * defaults_.margin);
}

size_t PeakHistory::samples() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

int ChooseInstantiationsPerUnit(int points, int64_t peak_per_instantiation,
                                int64_t smallest_usable_cap, int total_slots) {
  if (points <= 1 || total_slots <= 0 || peak_per_instantiation <= 0) return 1;
  int64_t by_memory = smallest_usable_cap / 2 / peak_per_instantiation;
  int64_t by_balance = points / (2 * static_cast<int64_t>(total_slots));
  return static_cast<int>(std::max<int64_t>(1, std::min(by_memory, by_balance)));
}

absl::StatusOr<std::unique_ptr<UnitSizeChoices>> UnitSizeChoices::Open(const std::string& path) {
  std::unique_ptr<UnitSizeChoices> choices(new UnitSizeChoices(path));
  if (path.empty() || !IsRegularFile(path)) return choices;
  std::ifstream in(path);
  std::string line;
  size_t lines = 0;
  absl::MutexLock lock(&choices->mu_);
  while (std::getline(in, line)) {
    ++lines;
    std::vector<std::string> fields = absl::StrSplit(line, '\t');
    int per_unit = 0;
    if (fields.size() == 2 && absl::SimpleAtoi(fields[1], &per_unit) && per_unit >= 1) {
      choices->choices_[fields[0]] = per_unit;  // the last choice wins
    }
  }
  // One line per set is all that counts: the rest is left out.
  if (choices->choices_.size() < lines) {
    std::string kept;
    for (const auto& [key, per_unit] : choices->choices_) {
      absl::StrAppend(&kept, key, "\t", per_unit, "\n");
    }
    absl::Status written = WriteFileAtomically(path, kept);
    if (!written.ok()) spdlog::warn("cannot compact {}: {}", path, written.ToString());
  }
  return choices;
}

std::optional<int> UnitSizeChoices::Find(const std::string& set_key) const {
  absl::MutexLock lock(&mu_);
  auto it = choices_.find(set_key);
  if (it == choices_.end()) return std::nullopt;
  return it->second;
}

void UnitSizeChoices::Remember(const std::string& set_key, int per_unit) {
  absl::MutexLock lock(&mu_);
  choices_.insert_or_assign(set_key, per_unit);
  if (path_.empty()) return;
  std::ofstream out(path_, std::ios::app);
  out << set_key << '\t' << per_unit << '\n';
  if (!out) spdlog::warn("cannot append to {}; the choice stays in memory", path_);
}

}  // namespace distcc_cuda::coordinator
