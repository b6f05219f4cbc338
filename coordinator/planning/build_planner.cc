// SPDX-License-Identifier: Apache-2.0
#include "coordinator/planning/build_planner.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/instantiation.h"
#include "common/nvcc/nvcc_args.h"
#include "common/store/input_tree.h"
#include "coordinator/planning/build_inputs.h"
#include "coordinator/planning/result_cache.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::coordinator {
namespace {

// The root of all of `unit`'s inputs, its tree's and its own.
absl::StatusOr<Digest> InputsRoot(const v1::CompileUnit& unit, InputTreeExpander& trees,
                                  const InputTreeLimits& limits = {}) {
  const Digest root = FromProto(unit.input_root());
  return trees.RootWith(unit.has_input_root() ? &root : nullptr, unit.inputs(), limits);
}

// Checks one unit and returns the root of all its inputs. The files of its
// tree were checked once for the build (BuildInputs); here its arguments
// and its own files (`checked` and `present`: what the build's units share
// that was found acceptable, and digests already found in the store during
// this plan), that the tree holds neither them nor its output, and the
// count of both. Leaves the unit's arguments as parsed in `command`.
absl::StatusOr<Digest> CheckUnit(const v1::CompileUnit& unit, const CasStore& cas,
                                 const std::vector<std::string>& system_prefixes,
                                 CheckedUnitParts& checked, std::set<Digest>& present,
                                 BuildInputs& trees, const BuildLimits& limits,
                                 NvccCommand& command, int64_t& closure_bytes) {
  RETURN_IF_ERROR(ValidateCompileUnit(unit, system_prefixes, &checked, &command));
  closure_bytes = unit.has_input_root() ? trees.BytesIn(unit.input_root()) : 0;
  for (const auto& input : unit.inputs()) {
    Digest digest = FromProto(input.digest());
    RETURN_IF_ERROR(ValidateDigest(digest));
    closure_bytes += digest.size_bytes;
    // Inlined by the planner (clients may not: RefuseCarriedBytes).
    if (input.has_content() || present.count(digest) != 0) continue;
    if (cas.Contains(digest)) {
      present.insert(std::move(digest));
    } else {
      return MissingBlobsError(
          absl::StrCat("unit ", unit.name(), ": input ", input.path(), " (", digest.ToString(),
                       ") is not in the content store; upload it before submitting"),
          {digest.BlobSubject()});
    }
  }
  const std::string where = absl::StrCat("unit ", unit.name());
  if (unit.has_input_root()) {
    const int64_t files = trees.FilesIn(unit.input_root()) + unit.inputs_size();
    if (files > limits.max_inputs_per_unit) {
      return absl::ResourceExhaustedError(
          absl::StrCat(where, " lists ", files, " input files; this coordinator allows ",
                       limits.max_inputs_per_unit,
                       " (--max-inputs-per-unit); include fewer headers, or ask the operator to "
                       "raise the limit"));
    }
    if (unit.output_paths_size() > 0) {
      std::string output =
          std::filesystem::path(unit.working_directory().empty()
                                    ? unit.output_paths(0)
                                    : unit.working_directory() + "/" + unit.output_paths(0))
              .lexically_normal()
              .string();
      absl::StatusOr<const v1::FileNode*> found =
          trees.trees().Find(FromProto(unit.input_root()), output, trees.tree_limits());
      if (!found.ok()) return Annotate(found.status(), where);
      if (*found != nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": its output '", unit.output_paths(0),
                         "' is also one of its inputs; write the object elsewhere"));
      }
    }
  }
  absl::StatusOr<Digest> all = InputsRoot(unit, trees.trees(), trees.tree_limits());
  if (!all.ok()) return Annotate(all.status(), where);
  return all;
}

UnitDemand Predict(const PeakHistory* history, const std::string& identity,
                   const std::string& family, int parallel, int instantiations,
                   const std::string& closure = "", int64_t closure_bytes = 0,
                   const std::optional<PriorCost>& prior = std::nullopt, int waves = 1) {
  if (history != nullptr) {
    return history->Predict(identity, family, parallel, instantiations, closure, closure_bytes,
                            prior, waves);
  }
  // Without a history (a coordinator of no state): the prior, else the
  // defaults.
  static const PeakHistory* const none = PeakHistory::Open("", PredictionDefaults())->release();
  return none->Predict(identity, family, parallel, instantiations, closure, closure_bytes, prior,
                       waves);
}

// Whether the source of `point` travels in its unit (InputFile.content)
// instead of the store: a source of at most a disk block would take a block
// of its own there, ten times its size for one grid point.
bool IsInlined(const GeneratedUnit& point) {
  return static_cast<int64_t>(point.source_text.size()) <= kInlinedSourceBytes;
}

// The compile unit of a generated source (one grid point or a group of
// them). Its source is named by digest; a small one travels in the unit,
// StoreSources puts a larger one into the CAS.
absl::StatusOr<v1::CompileUnit> GeneratedCompileUnit(const v1::InstantiationSet& set,
                                                     const std::string& workspace_root,
                                                     const GeneratedUnit& point) {
  const Digest source = DigestOf(point.source_text);
  v1::CompileUnit unit;
  unit.set_name(point.name);
  unit.set_workspace_root(workspace_root);
  unit.set_working_directory(set.directory());
  std::string source_name = point.name + ".cu";
  std::string object_name = point.name + ".o";
  for (const auto& argument : set.arguments()) unit.add_arguments(argument);
  unit.add_arguments("-c");
  unit.add_arguments(source_name);
  unit.add_arguments("-o");
  unit.add_arguments(object_name);
  unit.add_output_paths(object_name);
  *unit.mutable_inputs() = set.inputs();
  if (set.has_input_root()) *unit.mutable_input_root() = set.input_root();
  std::string source_path = set.directory().empty()
                                ? source_name
                                : (std::filesystem::path(set.directory()) / source_name).string();
  for (const auto& input : set.inputs()) {
    if (input.path() == source_path) {
      return absl::InvalidArgumentError(
          absl::StrCat(set.manifest_location(), ": generated unit ", source_path,
                       " would replace an input file of the same name; rename the unit "
                       "template"));
    }
  }
  auto* input = unit.add_inputs();
  input->set_path(source_path);
  *input->mutable_digest() = ToProto(source);
  if (IsInlined(point)) input->set_content(point.source_text);
  return unit;
}

// CANCELLED once `client_left` says the build's client has gone.
absl::Status StillWanted(const ClientLeft& client_left) {
  if (client_left != nullptr && client_left()) {
    return absl::CancelledError("the build's client left while it was planned; planning stopped");
  }
  return absl::OkStatus();
}

// Puts the sources of `generated` that are not inlined into the CAS in batches (CasStore::
// PutMany: written together, flushed together), so that a grid of many
// points costs a pass over the disk, not two syncs per point. Between
// batches it stops if the build's client has left.
absl::Status StoreSources(const std::vector<GeneratedUnit>& generated, CasStore& cas,
                          const ClientLeft& client_left = nullptr) {
  constexpr size_t kBatch = 8192;
  for (size_t begin = 0; begin < generated.size(); begin += kBatch) {
    RETURN_IF_ERROR(StillWanted(client_left));
    const size_t end = std::min(generated.size(), begin + kBatch);
    std::vector<std::pair<Digest, absl::string_view>> blobs;
    blobs.reserve(end - begin);
    for (size_t i = begin; i < end; ++i) {
      if (IsInlined(generated[i])) continue;
      blobs.emplace_back(DigestOf(generated[i].source_text), generated[i].source_text);
    }
    for (const absl::Status& stored : cas.PutMany(blobs)) RETURN_IF_ERROR(stored);
  }
  return absl::OkStatus();
}

// One of `request`'s own units as both planners take it: mounted at the
// build's root on the workers, and similar to the units compiled in its
// folder (its family).
v1::CompileUnit SentUnit(const v1::SubmitBuildRequest& request, const v1::CompileUnit& sent,
                         std::string* family) {
  v1::CompileUnit unit = sent;
  unit.set_workspace_root(request.workspace_root());
  *family = absl::StrCat("folder:", unit.working_directory());
  return unit;
}

// The UnitPriors markers among `unit`'s inputs: its tree's and its own.
std::vector<std::string> MarkersOf(const v1::CompileUnit& unit, const BuildInputs& trees) {
  std::vector<std::string> markers =
      unit.has_input_root() ? trees.MarkersIn(unit.input_root()) : std::vector<std::string>();
  std::vector<std::string> own;
  for (const v1::InputFile& input : unit.inputs()) own.push_back(input.path());
  for (std::string& marker : UnitPriors::Builtin().MarkersIn(own)) {
    if (std::find(markers.begin(), markers.end(), marker) == markers.end()) {
      markers.insert(std::upper_bound(markers.begin(), markers.end(), marker), std::move(marker));
    }
  }
  return markers;
}

// Keys and predicts one unit, whose arguments parse as `command`.
// `inputs`: the root of all its inputs (InputTreeExpander::RootWith), of
// `closure_bytes` (0: not read).
PlannedUnit Plan(const std::string& toolchain, v1::CompileUnit unit, const NvccCommand& command,
                 const std::string& family, int instantiations, const PeakHistory* history,
                 const Digest& inputs, int64_t closure_bytes = 0,
                 std::vector<std::string> markers = {}) {
  PlannedUnit plan;
  plan.inputs = inputs;
  plan.closure_bytes = closure_bytes;
  plan.markers = std::move(markers);
  plan.action_digest = ActionDigest(toolchain, unit, inputs);
  plan.identity = UnitIdentity(toolchain, unit, command);
  plan.family = UnitFamily(toolchain, command, family);
  plan.closure = ClosureFamily(toolchain, command, unit);
  int parallel = ParallelCompilations(command);
  plan.instantiations = instantiations;
  plan.parallel = parallel;
  std::optional<PriorCost> prior;
  if (!plan.markers.empty() && !command.sources.empty()) {
    prior = UnitPriors::Builtin().CostOf(plan.markers, command.sources[0]);
  }
  const int waves = TargetWaves(command);
  plan.demand = Predict(history, plan.identity, plan.family, parallel, instantiations, plan.closure,
                        closure_bytes, prior, waves);
  if (prior.has_value()) {
    plan.prior = history != nullptr ? history->FromPrior(*prior, parallel, waves, instantiations)
                                    : plan.demand;
  }
  plan.unit = std::move(unit);
  return plan;
}

// The units that compile `whole`'s -gencode targets (`targets`, from
// SplitByArchitecture) one each, named "<whole>@<target>"; the client
// merges their objects into `whole`'s.
absl::StatusOr<std::vector<PlannedUnit>> ArchitectureParts(
    const PlannedUnit& whole, const std::vector<ArchitecturePart>& targets,
    const std::string& toolchain, const std::string& family_hint, const PeakHistory* history) {
  std::vector<PlannedUnit> parts;
  for (size_t i = 0; i < targets.size(); ++i) {
    v1::CompileUnit unit = whole.unit;
    unit.set_name(absl::StrCat(whole.unit.name(), "@", targets[i].label));
    unit.clear_arguments();
    for (const std::string& argument : targets[i].arguments) unit.add_arguments(argument);
    unit.clear_output_paths();
    unit.add_output_paths(targets[i].output);
    v1::ArchitecturePart* part = unit.mutable_architecture_part();
    part->set_of(whole.unit.name());
    part->set_index(i);
    part->set_count(targets.size());
    part->set_label(targets[i].label);
    NvccCommand command;
    RETURN_IF_ERROR(ValidateCompileUnit(unit, SystemIncludePrefixes(), nullptr, &command));
    parts.push_back(Plan(toolchain, std::move(unit), command, family_hint, whole.instantiations,
                         history, whole.inputs, whole.closure_bytes, whole.markers));
  }
  return parts;
}

// Where the choice to compile a unit one target per unit is remembered.
std::string ArchitectureSplitKey(const std::string& action_digest) {
  return absl::StrCat("architectures:", action_digest);
}

// How long `units` units of `peak` and `wall` each would take on workers
// of `capacity`'s shape (all like its tightest): in waves of as many as fit
// at once, by slots and by memory. Infinite when one does not fit.
absl::Duration Makespan(int64_t units, int64_t peak, absl::Duration wall,
                        const ClusterCapacity& capacity) {
  const int64_t cap = capacity.smallest_usable_cap;
  const int64_t slots_per_worker =
      std::max<int64_t>(1, cap / std::max<int64_t>(1, capacity.smallest_memory_per_slot));
  const int64_t workers = std::max<int64_t>(1, capacity.total_slots / slots_per_worker);
  const int64_t per_worker = std::min(slots_per_worker, cap / std::max<int64_t>(1, peak));
  if (per_worker <= 0) return absl::InfiniteDuration();
  const int64_t at_once = workers * per_worker;
  return wall * ((std::max<int64_t>(1, units) + at_once - 1) / at_once);
}

}  // namespace

ArchitectureSplitCosts WeighArchitectureSplit(const PlannedUnit& whole,
                                              const std::vector<PlannedUnit>& parts,
                                              size_t units_in_build,
                                              const ClusterCapacity& capacity) {
  const int targets = std::max<int>(1, parts.size());
  const int at_once = std::clamp(whole.parallel, 1, targets);
  // The whole runs its targets' device passes in this many rounds after one
  // host pass; a part runs one host pass and one device pass.
  const double rounds = (targets + at_once - 1) / at_once;
  const double whole_per_part = kHostPassShare + rounds * (1 - kHostPassShare);
  int64_t part_peak = 0;
  absl::Duration part_wall;
  bool parts_measured = !parts.empty();
  for (const PlannedUnit& part : parts) {
    part_peak = std::max(part_peak, part.demand.peak_bytes);
    part_wall = std::max(part_wall, part.demand.wall);
    parts_measured = parts_measured && part.demand.basis != PredictionBasis::kDefault;
  }
  const bool whole_measured = whole.demand.basis != PredictionBasis::kDefault;
  absl::Duration whole_wall = whole.demand.wall;
  if (!whole_measured || (parts_measured && whole.demand.basis < parts[0].demand.basis)) {
    whole_wall = part_wall * whole_per_part;  // the parts tell more
  } else if (!parts_measured) {
    part_wall = whole_wall / whole_per_part;
  }
  ArchitectureSplitCosts costs;
  costs.whole = Makespan(units_in_build, whole.demand.peak_bytes, whole_wall, capacity);
  costs.parts =
      Makespan(static_cast<int64_t>(units_in_build) * targets, part_peak, part_wall, capacity);
  costs.repeated_host_passes = part_wall * kHostPassShare * (targets - 1);
  return costs;
}

namespace {

// Whether `plan`, one of `units_in_build`, compiles its -gencode targets as
// `parts` of their own (ARCHITECTURE_SPLIT_AUTO): when the whole does not
// fit the smallest worker, or when the parts would finish the build sooner
// by WeighArchitectureSplit (their smaller peaks pack more at once where
// memory limits, idle slots take them where the build has few units) for
// all their repeated host passes. A tie stays whole: it saves the CPU. A
// choice made before is kept while the whole still fits, so a rebuild keeps
// its units and its cached results.
bool ChooseArchitectureSplit(const PlannedUnit& plan, const std::vector<PlannedUnit>& parts,
                             size_t units_in_build, const ClusterCapacity& capacity,
                             UnitSizeChoices* choices) {
  const bool fits =
      capacity.total_slots == 0 || plan.demand.peak_bytes <= capacity.smallest_usable_cap;
  const std::string key = ArchitectureSplitKey(plan.action_digest);
  std::optional<int> kept = choices != nullptr ? choices->Find(key) : std::nullopt;
  if (kept && (*kept == 1 || fits)) return *kept == 1;
  if (capacity.total_slots == 0) return false;  // nothing to weigh against
  const ArchitectureSplitCosts costs =
      WeighArchitectureSplit(plan, parts, units_in_build, capacity);
  const bool split = !fits || costs.parts < costs.whole;
  if (choices != nullptr) choices->Remember(key, split ? 1 : 0);
  return split;
}

// Lets a unit of several -gencode targets (`targets`, from
// SplitByArchitecture; an error: it cannot split so) that has no other way
// to split make one unit per target, the memory retry ladder's last rung.
// The next build plans the parts directly (ChooseArchitectureSplit).
void AllowArchitectureSplit(PlannedUnit& plan,
                            const absl::StatusOr<std::vector<ArchitecturePart>>& targets,
                            const std::string& toolchain, const std::string& family_hint,
                            const PeakHistory* history, UnitSizeChoices* choices) {
  if (plan.split || !targets.ok()) return;
  plan.split = [whole = plan, targets = *targets, toolchain, family_hint, history, choices]() {
    if (choices != nullptr) {
      choices->Remember(ArchitectureSplitKey(whole.action_digest), 1);
    }
    return ArchitectureParts(whole, targets, toolchain, family_hint, history);
  };
}

// What splitting a group of instantiations needs; shared by its halves.
struct SplitContext {
  v1::InstantiationSet set;
  std::string workspace_root;
  std::string toolchain;
  CasStore* cas;
  const PeakHistory* history;
  UnitSizeChoices* choices;  // remembers splits; may be null
  bool split_architectures;  // a single point may split by -gencode target
};

std::string SplitKey(const std::string& action_digest) {
  return absl::StrCat("split:", action_digest);
}

// Gives a group of several grid points the means to split itself in two
// halves named "<group>_1of2" and "<group>_2of2" (a half of one point takes
// the point's own name), which can split again.
void AllowSplit(PlannedUnit& plan, GeneratedUnit group,
                std::shared_ptr<const SplitContext> context) {
  if (group.members.size() < 2) return;
  plan.split = [group = std::move(group), context, parent = plan.action_digest,
                markers = plan.markers]() -> absl::StatusOr<std::vector<PlannedUnit>> {
    // The set's tree, read again: the build's reading of it is long gone.
    InputTreeExpander trees(FoldersFrom(*context->cas));
    // The next build of the same group starts from its halves.
    if (context->choices != nullptr && !context->choices->Find(SplitKey(parent))) {
      context->choices->Remember(SplitKey(parent), 2);
    }
    int half = (group.members.size() + 1) / 2;
    std::vector<PlannedUnit> halves;
    std::vector<GeneratedUnit> parts = GroupInstantiations(context->set, group.members, half);
    RETURN_IF_ERROR(StoreSources(parts, *context->cas));
    for (GeneratedUnit& part : parts) {
      // A group keeps its parent's name with "_<k>of2"; a single point is
      // named as it would be with one instantiation per unit.
      if (!part.members.empty()) {
        part.name = group.name + part.name.substr(context->set.name().size());
      }
      ASSIGN_OR_RETURN(v1::CompileUnit unit,
                       GeneratedCompileUnit(context->set, context->workspace_root, part));
      NvccCommand command;
      RETURN_IF_ERROR(ValidateCompileUnit(unit, SystemIncludePrefixes(), nullptr, &command));
      ASSIGN_OR_RETURN(Digest inputs, InputsRoot(unit, trees));
      halves.push_back(Plan(context->toolchain, std::move(unit), command,
                            absl::StrCat("set:", context->set.name()), part.instantiations,
                            context->history, inputs, 0, markers));
      AllowSplit(halves.back(), std::move(part), context);
      if (context->split_architectures) {
        AllowArchitectureSplit(halves.back(), SplitByArchitecture(command), context->toolchain,
                               absl::StrCat("set:", context->set.name()), context->history,
                               context->choices);
      }
    }
    return halves;
  };
}

// Appends `plan`, or the units a split in an earlier build made of it
// (recursively), so that a rebuild neither repeats the memory kills that led
// to the split nor misses the halves' cached results.
absl::Status AppendWithRememberedSplits(PlannedUnit plan, const UnitSizeChoices* choices,
                                        std::vector<PlannedUnit>& out) {
  if (choices != nullptr && plan.split && choices->Find(SplitKey(plan.action_digest))) {
    ASSIGN_OR_RETURN(std::vector<PlannedUnit> parts, plan.split());
    for (PlannedUnit& part : parts) {
      RETURN_IF_ERROR(AppendWithRememberedSplits(std::move(part), choices, out));
    }
    return absl::OkStatus();
  }
  out.push_back(std::move(plan));
  return absl::OkStatus();
}

int64_t UnitsOf(size_t points, int per_unit) {
  return (static_cast<int64_t>(points) + per_unit - 1) / std::max(per_unit, 1);
}

// Whether a unit of `set` grouped `kept` instantiations per unit is in the
// result cache, or was split in an earlier build (by halves or by target:
// its results are its parts', which this does not look up).
absl::StatusOr<bool> KeptGroupingBuilt(const v1::InstantiationSet& set,
                                       const std::string& workspace_root,
                                       const std::string& toolchain,
                                       const std::vector<GeneratedUnit>& points, int kept,
                                       InputTreeExpander& trees, const UnitSizeChoices* choices,
                                       const IsCached& is_cached) {
  for (GeneratedUnit& group : GroupInstantiations(set, points, kept)) {
    ASSIGN_OR_RETURN(v1::CompileUnit unit, GeneratedCompileUnit(set, workspace_root, group));
    ASSIGN_OR_RETURN(Digest inputs, InputsRoot(unit, trees));
    const std::string digest = ActionDigest(toolchain, unit, inputs);
    if (choices->Find(SplitKey(digest)) || choices->Find(ArchitectureSplitKey(digest)) == 1 ||
        is_cached(digest)) {
      return true;
    }
  }
  return false;
}

// Whether a set whose kept unit size is `kept` should be planned with
// `today`'s instead: when that makes more than 1.5 times fewer units, and
// no unit of the kept grouping is in the result cache (a header every unit
// includes, a flag or the toolchain changed), so the regroup costs no
// cached result. One unit fixed after a compile error, or one edited
// source, keeps the grouping and the other units' results. Units of the
// kept grouping that were split in an earlier build (by halves or by
// target) count as cached: their results are their parts', which this does
// not look up.
absl::StatusOr<bool> RegroupPays(const v1::InstantiationSet& set, const std::string& workspace_root,
                                 const std::string& toolchain,
                                 const std::vector<GeneratedUnit>& points, int kept, int today,
                                 InputTreeExpander& trees, const UnitSizeChoices* choices,
                                 const IsCached& is_cached) {
  if (!is_cached || choices == nullptr || kept == today) return false;
  if (UnitsOf(points.size(), kept) * 2 <= UnitsOf(points.size(), today) * 3) return false;
  ASSIGN_OR_RETURN(bool built, KeptGroupingBuilt(set, workspace_root, toolchain, points, kept,
                                                 trees, choices, is_cached));
  return !built;
}

}  // namespace

std::optional<std::vector<PlannedUnit>> PlanCachedBuild(const v1::SubmitBuildRequest& request,
                                                        const PeakHistory* history,
                                                        const BuildLimits& limits,
                                                        const IsCached& is_cached,
                                                        const CasStore* cas) {
  if (is_cached == nullptr || request.has_plan() || request.instantiation_sets_size() > 0 ||
      request.units_size() == 0 || request.architecture_split() != v1::ARCHITECTURE_SPLIT_NEVER ||
      !CheckBuildLimits(request, limits, nullptr).ok()) {
    return std::nullopt;
  }
  const std::string& toolchain = request.toolchain().digest();
  const std::vector<std::string> system_prefixes = SystemIncludePrefixes();
  CheckedUnitParts checked;
  std::set<std::string> names;
  std::vector<PlannedUnit> planned;
  // The folders on the paths of the units' own files (a launched unit's
  // source beside its tree), read to key the unit as PlanBuild does.
  std::optional<InputTreeExpander> folders;
  const InputTreeLimits tree_limits = TreeLimitsOf(limits);
  if (cas != nullptr) folders.emplace(FoldersFrom(*cas));
  for (const v1::CompileUnit& sent : request.units()) {
    // A unit with a tree (and its own files beside it, given the store),
    // as PlanBuild would take it: mounted at the build's root.
    if (!sent.has_input_root() || (sent.inputs_size() > 0 && !folders)) return std::nullopt;
    Digest root = FromProto(sent.input_root());
    if (!ValidateDigest(root).ok() || !names.insert(sent.name()).second) return std::nullopt;
    std::string family;
    v1::CompileUnit unit = SentUnit(request, sent, &family);
    NvccCommand command;
    if (!ValidateCompileUnit(unit, system_prefixes, &checked, &command).ok()) return std::nullopt;
    if (unit.inputs_size() > 0) {
      if (unit.inputs_size() > limits.max_inputs_per_unit) return std::nullopt;
      for (const v1::InputFile& input : unit.inputs()) {
        const Digest digest = FromProto(input.digest());
        if (!ValidateDigest(digest).ok() || !cas->Contains(digest)) return std::nullopt;
      }
      // The root of all its inputs, its tree's and its own.
      absl::StatusOr<Digest> all = folders->RootWith(&root, unit.inputs(), tree_limits);
      if (!all.ok()) return std::nullopt;
      root = *all;
    }
    PlannedUnit plan = Plan(toolchain, std::move(unit), command, family, 1, history, root);
    if (!is_cached(plan.action_digest)) return std::nullopt;
    planned.push_back(std::move(plan));
  }
  return planned;
}

// How many instantiations of `set` (expanded to `points`) each of its units
// compiles, when the set does not say: as many as fit the smallest usable
// cap given what one is predicted to take, spread over today's slots; a
// grouping remembered from an earlier build is kept while it fits (or its
// units are cached) and regrouped only when none of its units was built.
absl::StatusOr<int> ChooseGrouping(const v1::SubmitBuildRequest& request,
                                   const v1::InstantiationSet& set,
                                   const std::vector<GeneratedUnit>& points,
                                   const PeakHistory* history, const ClusterCapacity& capacity,
                                   UnitSizeChoices* choices, BuildInputs& trees,
                                   const IsCached& is_cached, std::vector<std::string>* notes) {
  const std::string& toolchain = request.toolchain().digest();
  std::vector<std::string> set_arguments(set.arguments().begin(), set.arguments().end());
  // What one instantiation of this set costs, as a unit of its own.
  v1::CompileUnit one;
  one.set_working_directory(set.directory());
  for (const std::string& argument : set_arguments) one.add_arguments(argument);
  std::string family = UnitFamily(toolchain, one, absl::StrCat("set:", set.name()));
  int64_t peak = Predict(history, "", family, ParallelCompilations(set_arguments), 1).peak_bytes;
  std::string key = absl::StrCat(family, "/", points.size());
  const int today = ChooseInstantiationsPerUnit(points.size(), peak, capacity.smallest_usable_cap,
                                                capacity.total_slots);
  auto size_for_today = [&] {
    // With no worker there is nothing to size for: do not remember.
    if (choices != nullptr && capacity.total_slots > 0) choices->Remember(key, today);
    return today;
  };
  std::optional<int> remembered = choices != nullptr ? choices->Find(key) : std::nullopt;
  if (!remembered) return size_for_today();
  const int kept = *remembered;
  const int fits = ChooseInstantiationsPerUnit(points.size(), peak, capacity.smallest_usable_cap,
                                               /*total_slots=*/1);
  bool keep = kept == 1 || kept <= fits;
  if (!keep && is_cached) {
    // Predicted not to fit any more, but units of that size are in the
    // cache: they compiled, so they fit, and they are not thrown away.
    ASSIGN_OR_RETURN(keep, KeptGroupingBuilt(set, request.workspace_root(), toolchain, points, kept,
                                             trees.trees(), choices, is_cached));
  }
  if (!keep) return size_for_today();
  ASSIGN_OR_RETURN(bool regroup, RegroupPays(set, request.workspace_root(), toolchain, points, kept,
                                             today, trees.trees(), choices, is_cached));
  if (!regroup) return kept;
  std::string note = absl::StrCat(
      "set ", set.name(), ": regrouped from ", kept, " to ", today, " instantiations per unit (",
      UnitsOf(points.size(), today), " units instead of ", UnitsOf(points.size(), kept),
      "; one instantiation is now predicted at ", FormatByteSize(peak),
      "); none of its units was cached, so nothing built before is lost");
  spdlog::info("{}", note);
  if (notes != nullptr) notes->push_back(std::move(note));
  choices->Remember(key, today);
  return today;
}

absl::StatusOr<std::vector<PlannedUnit>> PlanBuild(
    const v1::SubmitBuildRequest& request, CasStore& cas, const PeakHistory* history,
    const ClusterCapacity& capacity, UnitSizeChoices* choices, const BuildLimits& limits,
    const IsCached& is_cached, std::vector<std::string>* notes, BuildInputs* inputs,
    const ClientLeft& client_left) {
  std::unique_ptr<BuildInputs> read;
  if (inputs == nullptr) {
    ASSIGN_OR_RETURN(read, BuildInputs::Read(request, cas, limits));
    inputs = read.get();
  }
  BuildInputs& trees = *inputs;
  RETURN_IF_ERROR(CheckBuildLimits(request, limits, inputs));
  const std::string& toolchain = request.toolchain().digest();
  // Similar units: those of one instantiation set, or ordinary units
  // compiled in the same folder.
  std::vector<v1::CompileUnit> units;
  std::vector<std::string> families;
  for (const v1::CompileUnit& sent : request.units()) {
    families.emplace_back();
    units.push_back(SentUnit(request, sent, &families.back()));
  }
  std::vector<int> instantiations(units.size(), 1);
  // Per unit: the generated group it compiles, for splitting it later.
  std::vector<std::pair<GeneratedUnit, std::shared_ptr<const SplitContext>>> groups(units.size());
  for (const v1::InstantiationSet& set : request.instantiation_sets()) {
    ASSIGN_OR_RETURN(std::vector<GeneratedUnit> points, ExpandInstantiationSet(set));
    int per_unit = set.instantiations_per_unit();
    if (per_unit <= 0) {
      ASSIGN_OR_RETURN(per_unit, ChooseGrouping(request, set, points, history, capacity, choices,
                                                trees, is_cached, notes));
    }
    std::vector<GeneratedUnit> generated = GroupInstantiations(set, std::move(points), per_unit);
    auto context = std::make_shared<const SplitContext>(
        SplitContext{set, request.workspace_root(), toolchain, &cas, history, choices,
                     request.architecture_split() != v1::ARCHITECTURE_SPLIT_NEVER});
    RETURN_IF_ERROR(StoreSources(generated, cas, client_left));
    for (GeneratedUnit& point : generated) {
      ASSIGN_OR_RETURN(v1::CompileUnit unit,
                       GeneratedCompileUnit(set, request.workspace_root(), point));
      units.push_back(std::move(unit));
      families.push_back(absl::StrCat("set:", set.name()));
      instantiations.push_back(point.instantiations);
      groups.emplace_back(std::move(point), context);
    }
  }
  std::vector<PlannedUnit> planned;
  const size_t units_in_build = units.size();
  const v1::ArchitectureSplit mode = request.architecture_split();
  std::set<Digest> present;
  CheckedUnitParts checked;
  const std::vector<std::string> system_prefixes = SystemIncludePrefixes();
  for (size_t i = 0; i < units.size(); ++i) {
    if (i % 1024 == 0) RETURN_IF_ERROR(StillWanted(client_left));
    NvccCommand command;
    int64_t closure_bytes = 0;
    ASSIGN_OR_RETURN(Digest all_inputs, CheckUnit(units[i], cas, system_prefixes, checked, present,
                                                  trees, limits, command, closure_bytes));
    std::vector<std::string> markers = MarkersOf(units[i], trees);
    PlannedUnit plan = Plan(toolchain, std::move(units[i]), command, families[i], instantiations[i],
                            history, all_inputs, closure_bytes, std::move(markers));
    absl::StatusOr<std::vector<ArchitecturePart>> targets =
        absl::FailedPreconditionError("split by architecture: never");
    if (mode != v1::ARCHITECTURE_SPLIT_NEVER) {
      targets = SplitByArchitecture(command);
      if (!targets.ok() && !absl::IsFailedPrecondition(targets.status())) return targets.status();
      if (targets.ok()) {
        ASSIGN_OR_RETURN(std::vector<PlannedUnit> parts,
                         ArchitectureParts(plan, *targets, toolchain, families[i], history));
        if (mode == v1::ARCHITECTURE_SPLIT_ALWAYS ||
            ChooseArchitectureSplit(plan, parts, units_in_build, capacity, choices)) {
          for (PlannedUnit& part : parts) planned.push_back(std::move(part));
          continue;
        }
      }
    }
    if (groups[i].second != nullptr) {
      AllowSplit(plan, std::move(groups[i].first), groups[i].second);
    }
    if (mode != v1::ARCHITECTURE_SPLIT_NEVER) {
      AllowArchitectureSplit(plan, targets, toolchain, families[i], history, choices);
    }
    RETURN_IF_ERROR(AppendWithRememberedSplits(std::move(plan), choices, planned));
  }
  std::set<std::string> names;
  for (const PlannedUnit& plan : planned) {
    if (!names.insert(plan.unit.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two units are named '", plan.unit.name(), "'; unit names must be unique"));
    }
  }
  return planned;
}

}  // namespace distcc_cuda::coordinator
