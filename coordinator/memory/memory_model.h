// SPDX-License-Identifier: Apache-2.0
// What a compile unit will cost: its predicted peak memory and wall time,
// learned from measured history (kept in the coordinator's state dir).
// Admission, which keeps every worker under its cap, is admission.h.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/nvcc/nvcc_args.h"
#include "coordinator/memory/unit_prior.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::coordinator {

// How many compilations one nvcc call runs at once: the -gencode targets it
// compiles in parallel (--threads N, 0 meaning all), times --split-compile.
// 1 for a plain single-target compile.
int ParallelCompilations(const std::vector<std::string>& arguments);
int ParallelCompilations(const NvccCommand& command);
// How many rounds of compilations that takes: the -gencode targets over
// those run at once (5 targets with --threads 4: 2). 1 for one target.
int TargetWaves(const NvccCommand& command);

// The key of a unit's own history: toolchain, working directory and
// arguments (which name the source and output), and the source's content.
// Equal for the same unit in every build, whatever the temp names.
std::string UnitIdentity(const std::string& toolchain_digest, const v1::CompileUnit& unit);
// The same with `command`, the unit's arguments as parsed (ParseNvccCommand).
std::string UnitIdentity(const std::string& toolchain_digest, const v1::CompileUnit& unit,
                         const NvccCommand& command);

// The key of similar units: toolchain, flags without source and output, and
// `family_hint` (the instantiation set's name, or the source's folder).
std::string UnitFamily(const std::string& toolchain_digest, const v1::CompileUnit& unit,
                       const std::string& family_hint);
std::string UnitFamily(const std::string& toolchain_digest, const NvccCommand& command,
                       const std::string& family_hint);

// The key of units with the same include closure and flags: toolchain, flags
// without source and output (`command`'s), and the root of the unit's input
// tree (its headers, without its own source). Kernel instantiations that
// include the same templates cost alike, wherever their sources are; units
// with other headers in the same folder (flash-attention's forward and
// backward kernels) do not. "" for a unit without an input tree.
std::string ClosureFamily(const std::string& toolchain_digest, const NvccCommand& command,
                          const v1::CompileUnit& unit);

// What a prediction was made from, weakest first.
enum class PredictionBasis {
  kDefault,       // nothing measured: the defaults
  kSimilarSize,   // units of other families whose inputs are of about its size
  kPrior,         // a measured profile of its kind (unit_prior.h), nothing measured here
  kSimilarUnits,  // units of the same family (flags and folder or set)
  kSameClosure,   // units of the same include closure and flags
  kOwnHistory,    // this unit's own runs
};

// A prediction and where it came from.
struct UnitDemand {
  int64_t peak_bytes = 0;
  absl::Duration wall = absl::ZeroDuration();
  std::string source;  // "history", "same closure", "similar units", "default"
  PredictionBasis basis = PredictionBasis::kDefault;
};

struct PredictionDefaults {
  // For units never seen and with no similar unit: per parallel compilation.
  int64_t peak_bytes = int64_t{2} << 30;
  absl::Duration wall = absl::Seconds(60);
  // Quantile of the measured peaks used as the prediction.
  double quantile = 0.95;
  // Added to a measured peak: the same unit varies a little from run to run.
  double margin = 0.05;
  // The measured profiles' (UnitPriors') peaks and times are multiplied by
  // these: 1 but in a simulation that scales its units (bench/replay.py).
  double prior_memory_scale = 1.0;
  double prior_time_scale = 1.0;
};

// Measured peaks and times per unit identity and family, appended to a file
// so that they survive restarts. Only the latest kRunsPerIdentity runs of a
// unit (and kRunsPerFamily of a family) count; Open rewrites the file with
// just those, so it stops growing. Thread-safe.
class PeakHistory {
 public:
  static constexpr size_t kRunsPerIdentity = 100;
  static constexpr size_t kRunsPerFamily = 1000;
  // Loads `path` if it exists (skipping unreadable lines) and appends to it.
  // An empty path keeps the history in memory only.
  static absl::StatusOr<std::unique_ptr<PeakHistory>> Open(const std::string& path,
                                                           PredictionDefaults defaults);

  // Records one finished (or memory-killed) run of a unit that compiled
  // `instantiations` grid points. The family and the closure family
  // (ClosureFamily; "" for none) learn the cost per instantiation (peak and
  // wall divided by their number).
  // `closure_bytes` (the size of its inputs: its headers and source; 0:
  // unknown) and `parallel_compilations` let units of other families of
  // about that size learn from it (Predict).
  // Learn, then WritePending.
  void Record(const std::string& identity, const std::string& family, int64_t peak_bytes,
              absl::Duration wall, int instantiations = 1, const std::string& closure = "",
              int64_t closure_bytes = 0, int parallel_compilations = 1);
  // What Record does in memory: predictions use the run at once, its line
  // waits for WritePending, so that a caller holding a lock others wait on
  // (the scheduler's) writes after releasing it.
  void Learn(const std::string& identity, const std::string& family, int64_t peak_bytes,
             absl::Duration wall, int instantiations = 1, const std::string& closure = "",
             int64_t closure_bytes = 0, int parallel_compilations = 1);
  // Appends the lines of the runs learnt since the last call, in the order
  // they were learnt, holding no lock that Predict waits for.
  void WritePending();
  // A high quantile of the unit's own history, else of its closure
  // family's cost per instantiation times `instantiations`, else of its
  // family's, else, for a unit whose inputs are `closure_bytes` (0:
  // unknown), of the closure families of other units whose inputs were
  // within kSimilarSizeRatio of that (their dearest, per compilation at
  // once: nvcc's front end grows with what it reads) times
  // `parallel_compilations` and `instantiations`, else the default times
  // both; plus the margin.
  // Before the similar sizes: `prior`, one compilation of its kind as
  // measured elsewhere (UnitPriors), times `parallel_compilations`, the
  // `waves` of targets and `instantiations`, when its closure is not known
  // (its kind's profile knows it better than its folder's other kinds). A
  // prediction from similar sizes, or from its family for a unit whose own
  // `closure` nothing measured (it includes, so instantiates, other things
  // than the family's measured units), is never below the default.
  UnitDemand Predict(const std::string& identity, const std::string& family,
                     int parallel_compilations, int instantiations = 1,
                     const std::string& closure = "", int64_t closure_bytes = 0,
                     const std::optional<PriorCost>& prior = std::nullopt, int waves = 1) const;
  // `prior` as Predict makes it.
  UnitDemand FromPrior(const PriorCost& prior, int parallel_compilations, int waves,
                       int instantiations) const;

  // How far apart two closures' sizes may be for one to predict the other.
  static constexpr double kSimilarSizeRatio = 1.5;
  // The nearest in size that count.
  static constexpr size_t kSimilarSizeGroups = 8;

  // The prediction of a unit of `instantiations` from the runs of its
  // closure family (`basis` kSameClosure) or family (kSimilarUnits) `key`
  // alone, as Predict makes it for a unit with no runs of its own; nullopt
  // while `key` has none.
  std::optional<UnitDemand> PredictFromGroup(const std::string& key, PredictionBasis basis,
                                             int instantiations) const;
  // `demand` from a family (kSimilarUnits) raised to the default of a unit
  // of `parallel` compilations and `instantiations` when the unit has a
  // `closure` of its own (Predict); else `demand`.
  UnitDemand AtLeastDefaultForOtherClosure(UnitDemand demand, const std::string& closure,
                                           int parallel, int instantiations) const;

  size_t samples() const;

 private:
  struct Samples {
    std::vector<int64_t> peaks;
    std::vector<int64_t> wall_ms;
    // The quantiles of both, made when first asked after a change: a
    // build's units ask for their family's many times between its runs.
    std::optional<std::pair<int64_t, int64_t>> quantiles;
    // Adds a run, dropping the oldest beyond `keep`.
    void Add(int64_t peak, int64_t wall, size_t keep);
    // The `quantile` of the peaks and of the times.
    std::pair<int64_t, int64_t> Quantiles(double quantile);
  };
  PeakHistory(std::string path, PredictionDefaults defaults)
      : path_(std::move(path)), defaults_(defaults) {}
  std::optional<UnitDemand> GroupDemand(const std::string& key, PredictionBasis basis,
                                        int instantiations) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Predict's prediction from closure families of about `closure_bytes`.
  std::optional<UnitDemand> SimilarSizeDemand(int64_t closure_bytes, int parallel,
                                              int instantiations) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t WithMargin(int64_t peak) const;
  void Add(const std::string& identity, const std::string& family, const std::string& closure,
           int64_t peak, int64_t wall_ms, int instantiations, int64_t closure_bytes, int parallel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const PredictionDefaults defaults_;
  mutable absl::Mutex mu_;
  // Mutable: Predict caches the quantiles it makes.
  mutable std::map<std::string, Samples> by_identity_ ABSL_GUARDED_BY(mu_);
  // Families and closure families (their keys differ: Key's first part).
  mutable std::map<std::string, Samples> by_family_ ABSL_GUARDED_BY(mu_);
  // Closure families whose runs said their inputs' size (the latest) and
  // how many compilations their units run at once.
  struct Sized {
    int64_t bytes = 0;
    int parallel = 1;
  };
  std::map<std::string, Sized> sized_ ABSL_GUARDED_BY(mu_);
  size_t count_ ABSL_GUARDED_BY(mu_) = 0;
  // Lines of learnt runs not yet appended (WritePending).
  std::string pending_ ABSL_GUARDED_BY(mu_);
  // Held while appending, before mu_ and never inside it: keeps the lines
  // in order.
  absl::Mutex file_mu_ ABSL_ACQUIRED_BEFORE(mu_);
};

// How many grid points of an instantiation set share one compile unit, when
// the manifest leaves it to the coordinator: as many as keep a unit's
// predicted peak (`peak_per_instantiation` each) within half the smallest
// usable cap, and leave at least two units per slot of the eligible
// workers for balance. At least 1. Fewer units save nvcc's fixed cost per
// unit (its host pass), which dominates small instantiations.
int ChooseInstantiationsPerUnit(int points, int64_t peak_per_instantiation,
                                int64_t smallest_usable_cap, int total_slots);

// The number of instantiations per unit chosen for each instantiation set,
// kept in a file so that the choice sticks: choosing anew renames every unit
// of the set and so throws away its cached results. Thread-safe.
class UnitSizeChoices {
 public:
  // Loads `path` if it exists and appends to it; empty: in memory only.
  static absl::StatusOr<std::unique_ptr<UnitSizeChoices>> Open(const std::string& path);

  // The choice made for `set_key` before, if any.
  std::optional<int> Find(const std::string& set_key) const;
  void Remember(const std::string& set_key, int per_unit);

 private:
  explicit UnitSizeChoices(std::string path) : path_(std::move(path)) {}
  const std::string path_;
  mutable absl::Mutex mu_;
  std::map<std::string, int> choices_ ABSL_GUARDED_BY(mu_);
};

}  // namespace distcc_cuda::coordinator
