// SPDX-License-Identifier: Apache-2.0
#include "coordinator/planning/build_planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/nvcc/instantiation.h"
#include "common/store/input_tree.h"
#include "coordinator/planning/build_inputs.h"
#include "coordinator/planning/result_cache.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::coordinator {
namespace {

using ::testing::HasSubstr;

class BuildPlannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = CasStore::Open(testing::NewTempDir("planner-") + "/cas");
    ASSERT_TRUE(store.ok());
    cas_ = std::move(*store);
    auto header = cas_->PutBytes("template <int N> void K() {}\n");
    ASSERT_TRUE(header.ok());
    header_ = *header;
    request_.mutable_toolchain()->set_digest("toolchain-a");
    v1::InstantiationSet* set = request_.add_instantiation_sets();
    set->set_name("k");
    set->set_unit_name_template("k_{n}");
    set->add_headers("k.cuh");
    set->set_text_template("template void K<{n}>();");
    auto* axis = set->add_axes();
    axis->set_name("n");
    axis->add_values("1");
    axis->add_values("2");
    set->set_directory("kernels");
    set->add_arguments("-O3");
    auto* input = set->add_inputs();
    input->set_path("kernels/k.cuh");
    *input->mutable_digest() = ToProto(header_);
  }

  // The bytes of a generated unit's source: carried in the unit (it must
  // hash to its digest), or stored.
  std::string SourceOf(const v1::InputFile& input) const {
    if (input.has_content()) {
      EXPECT_EQ(DigestOf(input.content()), FromProto(input.digest())) << input.path();
      return input.content();
    }
    absl::StatusOr<std::string> stored = cas_->Get(FromProto(input.digest()));
    EXPECT_TRUE(stored.ok()) << input.path() << ": " << stored.status();
    return stored.ok() ? *stored : "";
  }
  // The source of `unit`, a generated one: its last input.
  std::string SourceOf(const v1::CompileUnit& unit) const {
    return SourceOf(unit.inputs(unit.inputs_size() - 1));
  }

  std::unique_ptr<CasStore> cas_;
  Digest header_;
  v1::SubmitBuildRequest request_;
};

TEST_F(BuildPlannerTest, ExpandsTheGridIntoUnitsThatCarryTheirSources) {
  absl::StatusOr<std::vector<PlannedUnit>> units =
      PlanBuild(request_, *cas_, nullptr, ClusterCapacity{}, nullptr);
  ASSERT_TRUE(units.ok()) << units.status();
  ASSERT_EQ(units->size(), 2u);
  const v1::CompileUnit& unit = (*units)[1].unit;
  EXPECT_EQ(unit.name(), "k_2");
  EXPECT_EQ(unit.working_directory(), "kernels");
  EXPECT_THAT(std::vector<std::string>(unit.arguments().begin(), unit.arguments().end()),
              ::testing::ElementsAre("-O3", "-c", "k_2.cu", "-o", "k_2.o"));
  ASSERT_EQ(unit.inputs_size(), 2);
  EXPECT_EQ(unit.inputs(1).path(), "kernels/k_2.cu");
  ASSERT_TRUE(unit.inputs(1).has_content()) << "a small source travels in its unit";
  EXPECT_THAT(SourceOf(unit), HasSubstr("#include \"k.cuh\"\ntemplate void K<2>();"));
  EXPECT_FALSE(cas_->Contains(FromProto(unit.inputs(1).digest())));
  EXPECT_FALSE(unit.inputs(0).has_content()) << "the set's header is the client's";
  EXPECT_NE((*units)[0].action_digest, (*units)[1].action_digest);
}

// A grid of 1,600 points: every point's source travels whole in its unit,
// and the store does not grow (each was a file of a 4 KiB disk block: a
// 316 x 316 grid wrote about 390 MB). A source larger than a block is
// stored, in batches (CasStore::PutMany), no temporary file left.
TEST_F(BuildPlannerTest, AGridsSourcesTravelInItsUnitsAndOnlyLargeOnesAreStored) {
  v1::InstantiationSet* set = request_.mutable_instantiation_sets(0);
  set->set_unit_name_template("k_{n}_{m}");
  set->set_text_template("template void K<{n} * 100 + {m}>();");
  set->clear_axes();
  for (const char* name : {"n", "m"}) {
    v1::InstantiationAxis* axis = set->add_axes();
    axis->set_name(name);
    for (int i = 0; i < 40; ++i) axis->add_values(absl::StrCat(i));
  }
  const int64_t stored_before = cas_->size_bytes();
  absl::StatusOr<std::vector<PlannedUnit>> units =
      PlanBuild(request_, *cas_, nullptr, ClusterCapacity{}, nullptr);
  ASSERT_TRUE(units.ok()) << units.status();
  ASSERT_EQ(units->size(), 1600u);
  for (const PlannedUnit& planned : *units) {
    const v1::CompileUnit& unit = planned.unit;
    ASSERT_EQ(unit.inputs_size(), 2) << unit.name();
    ASSERT_TRUE(unit.inputs(1).has_content()) << unit.name();
    const std::string point = unit.name().substr(2);  // "n_m"
    const std::string n = point.substr(0, point.find('_'));
    const std::string m = point.substr(point.find('_') + 1);
    EXPECT_THAT(SourceOf(unit),
                HasSubstr(absl::StrCat("template void K<", n, " * 100 + ", m, ">();")))
        << unit.name();
  }
  EXPECT_EQ(cas_->size_bytes(), stored_before) << "the store grew by the grid's sources";

  // Sources of more than a disk block are stored.
  set->set_text_template(absl::StrCat("template void K<{n} * 100 + {m}>(); // ",
                                      std::string(kInlinedSourceBytes, 'x')));
  units = PlanBuild(request_, *cas_, nullptr, ClusterCapacity{}, nullptr);
  ASSERT_TRUE(units.ok()) << units.status();
  ASSERT_EQ(units->size(), 1600u);
  for (const PlannedUnit& planned : *units) {
    const v1::InputFile& source = planned.unit.inputs(1);
    ASSERT_FALSE(source.has_content()) << planned.unit.name();
    ASSERT_TRUE(cas_->Contains(FromProto(source.digest()))) << planned.unit.name();
  }
  EXPECT_THAT(SourceOf((*units)[41].unit), HasSubstr("template void K<1 * 100 + 1>();"));
  EXPECT_TRUE(std::filesystem::is_empty(cas_->root() + "/tmp"));
}

// Only the coordinator inlines a file: a client's unit or set whose input
// carries its bytes is refused, as sent or in a plan blob.
TEST_F(BuildPlannerTest, AnInputThatCarriesItsBytesFromAClientIsRefused) {
  v1::SubmitBuildRequest carried = request_;
  carried.mutable_instantiation_sets(0)->mutable_inputs(0)->set_content(
      "template <int N> void K() {}\n");
  absl::StatusOr<v1::SubmitBuildRequest> read = ReadBuildPlan(carried, *cas_, BuildLimits{});
  EXPECT_TRUE(absl::IsInvalidArgument(read.status())) << read.status();
  EXPECT_THAT(read.status().message(),
              HasSubstr("instantiation set 0's input 0 carries its bytes"));

  v1::BuildPlan plan;
  v1::CompileUnit* unit = plan.add_units();
  unit->set_name("u");
  v1::InputFile* input = unit->add_inputs();
  input->set_path("u.cu");
  input->set_content("");
  *input->mutable_digest() = ToProto(DigestOf(""));
  absl::StatusOr<Digest> blob = cas_->PutBytes(plan.SerializeAsString());
  ASSERT_TRUE(blob.ok());
  v1::SubmitBuildRequest planned;
  *planned.mutable_plan() = ToProto(*blob);
  read = ReadBuildPlan(planned, *cas_, BuildLimits{});
  EXPECT_TRUE(absl::IsInvalidArgument(read.status())) << read.status();
  EXPECT_THAT(read.status().message(), HasSubstr("unit 0's input 0 carries its bytes"));
}

TEST_F(BuildPlannerTest, ActionDigestDependsOnToolchainAndInputs) {
  auto first = PlanBuild(request_, *cas_, nullptr, ClusterCapacity{}, nullptr);
  request_.mutable_toolchain()->set_digest("toolchain-b");
  auto other_toolchain = PlanBuild(request_, *cas_, nullptr, ClusterCapacity{}, nullptr);
  ASSERT_TRUE(first.ok() && other_toolchain.ok());
  EXPECT_NE((*first)[0].action_digest, (*other_toolchain)[0].action_digest);
  request_.mutable_toolchain()->set_digest("toolchain-a");
  auto again = PlanBuild(request_, *cas_, nullptr, ClusterCapacity{}, nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*first)[0].action_digest, (*again)[0].action_digest) << "stable";
}

TEST_F(BuildPlannerTest, InputMissingFromTheStoreIsNamed) {
  auto* input = request_.mutable_instantiation_sets(0)->add_inputs();
  input->set_path("kernels/other.h");
  *input->mutable_digest() = ToProto(DigestOf("never uploaded"));
  absl::StatusOr<std::vector<PlannedUnit>> units =
      PlanBuild(request_, *cas_, nullptr, ClusterCapacity{}, nullptr);
  EXPECT_EQ(units.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(units.status().message(), HasSubstr("kernels/other.h"));
}

// A set (or unit) sent as an input tree plans as its list: the same units
// and action digests, so results cached from a list serve a tree. The
// planned units keep the root, and the files a worker expands from it are
// the list's.
TEST_F(BuildPlannerTest, AnInputTreePlansAsItsList) {
  v1::SubmitBuildRequest as_tree = request_;
  v1::InstantiationSet* set = as_tree.mutable_instantiation_sets(0);
  absl::StatusOr<InputTree> tree = BuildInputTree(set->inputs());
  ASSERT_TRUE(tree.ok()) << tree.status();
  for (const auto& [digest, bytes] : tree->directories) ASSERT_TRUE(cas_->Put(digest, bytes).ok());
  *set->mutable_input_root() = ToProto(tree->root);
  set->clear_inputs();
  auto from_list = PlanBuild(request_, *cas_, nullptr, ClusterCapacity{}, nullptr);
  auto from_tree = PlanBuild(as_tree, *cas_, nullptr, ClusterCapacity{}, nullptr);
  ASSERT_TRUE(from_list.ok() && from_tree.ok()) << from_tree.status();
  ASSERT_EQ(from_list->size(), from_tree->size());
  auto listed = [](const v1::CompileUnit& unit) {
    std::vector<std::string> files;
    for (const v1::InputFile& input : unit.inputs()) {
      files.push_back(absl::StrCat(input.path(), " ", input.digest().hash()));
    }
    std::sort(files.begin(), files.end());
    return files;
  };
  for (size_t i = 0; i < from_list->size(); ++i) {
    EXPECT_EQ((*from_list)[i].action_digest, (*from_tree)[i].action_digest);
    EXPECT_EQ((*from_list)[i].inputs, (*from_tree)[i].inputs);
    v1::CompileUnit unit = (*from_tree)[i].unit;
    EXPECT_EQ(FromProto(unit.input_root()), tree->root);
    EXPECT_EQ(unit.inputs_size(), 1) << "only its own generated source is listed";
    ASSERT_TRUE(ExpandUnitInputs(unit, FoldersFrom(*cas_)).ok());
    EXPECT_FALSE(unit.has_input_root());
    EXPECT_EQ(listed(unit), listed((*from_list)[i].unit));
    // The set's units share one tree of headers and their flags: one
    // closure family, learned from whichever of them runs first.
    EXPECT_FALSE((*from_tree)[i].closure.empty());
    EXPECT_EQ((*from_tree)[i].closure, (*from_tree)[0].closure);
    EXPECT_EQ((*from_list)[i].closure, "") << "a unit sent as a list has no tree to key";
    // Its inputs' size, for predicting units of other families of about
    // that size: the header in the tree, the generated source beside it.
    EXPECT_EQ((*from_tree)[i].closure_bytes,
              header_.size_bytes + (*from_tree)[i].unit.inputs(0).digest().size_bytes());
    EXPECT_EQ((*from_list)[i].closure_bytes, (*from_tree)[i].closure_bytes);
  }

  // A tree beside a list (a unit's own source) is both; a path in both is
  // refused.
  v1::SubmitBuildRequest both = as_tree;
  *both.mutable_instantiation_sets(0)->mutable_inputs() = request_.instantiation_sets(0).inputs();
  EXPECT_THAT(PlanBuild(both, *cas_, nullptr, ClusterCapacity{}, nullptr).status().message(),
              HasSubstr("unit k_1: input 'kernels/k.cuh' is listed twice"));

  // A root the store lacks is named, and the client told to upload it.
  v1::SubmitBuildRequest lacking = as_tree;
  *lacking.mutable_instantiation_sets(0)->mutable_input_root() =
      ToProto(DigestOf("never uploaded"));
  absl::Status missing = PlanBuild(lacking, *cas_, nullptr, ClusterCapacity{}, nullptr).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.message(), HasSubstr("instantiation set k: its folder "));
  EXPECT_THAT(missing.message(), HasSubstr("upload the tree's folders"));

  // A tree small to send may list many files: the build's total is bounded.
  BuildLimits limits;
  limits.max_input_listings = 3;
  for (int i = 0; i < 3; ++i) {
    v1::CompileUnit* unit = as_tree.add_units();
    unit->set_name(absl::StrCat("u", i));
    *unit->mutable_input_root() = ToProto(tree->root);
  }
  absl::Status listings = BuildInputs::Read(as_tree, *cas_, limits).status();
  EXPECT_EQ(listings.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(listings.message(), HasSubstr("--max-input-listings-per-build"));
  limits.max_input_listings = 4;
  absl::StatusOr<std::unique_ptr<BuildInputs>> read = BuildInputs::Read(as_tree, *cas_, limits);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ((*read)->FilesIn(ToProto(tree->root)), 1);
  // What the store must keep: the header and the tree's two folders, once
  // however many units name them.
  EXPECT_EQ((*read)->blobs().size(), 3u);

  // A damaged folder in the store is dropped and reported missing.
  ASSERT_TRUE(WriteFileAtomically(cas_->PathOf(tree->directories.back().first), "rot").ok());
  EXPECT_EQ(BuildInputs::Read(as_tree, *cas_, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(cas_->Contains(tree->directories.back().first));
}

// The files of a tree are checked as listed inputs are, once per build:
// their paths at the build's workspace root, their blobs in the store, and
// the unit's output is none of them.
TEST_F(BuildPlannerTest, AnInputTreesFilesAreCheckedAsListedInputs) {
  auto tree_of = [&](std::vector<std::pair<std::string, std::string>> files) {
    google::protobuf::RepeatedPtrField<v1::InputFile> inputs;
    for (const auto& [path, content] : files) {
      v1::InputFile* input = inputs.Add();
      input->set_path(path);
      *input->mutable_digest() = ToProto(DigestOf(content));
      if (content != "never uploaded") {
        EXPECT_TRUE(cas_->PutBytes(content).ok());
      }
    }
    absl::StatusOr<InputTree> tree = BuildInputTree(inputs);
    EXPECT_TRUE(tree.ok()) << tree.status();
    for (const auto& [digest, bytes] : tree->directories) {
      EXPECT_TRUE(cas_->Put(digest, bytes).ok());
    }
    return ToProto(tree->root);
  };
  auto plan_unit = [&](const std::string& root, const v1::Digest& tree) {
    v1::SubmitBuildRequest request;
    request.mutable_toolchain()->set_digest("toolchain-a");
    request.set_workspace_root(root);
    v1::CompileUnit* unit = request.add_units();
    unit->set_name("gemm");
    for (const char* arg : {"-c", "a.cu", "-o", "a.o"}) unit->add_arguments(arg);
    unit->add_output_paths("a.o");
    v1::InputFile* source = unit->add_inputs();
    source->set_path("a.cu");
    *source->mutable_digest() = ToProto(*cas_->PutBytes("#include \"cutlass/gemm.h\"\n"));
    *unit->mutable_input_root() = tree;
    return PlanBuild(request, *cas_, nullptr, ClusterCapacity{}, nullptr);
  };
  absl::StatusOr<std::vector<PlannedUnit>> good =
      plan_unit("/src/cutlass", tree_of({{"cutlass/gemm.h", "gemm"}}));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE((*good)[0].unit.has_input_root());

  struct Case {
    const char* what;
    std::string root;
    std::vector<std::pair<std::string, std::string>> files;
    absl::StatusCode code;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"a header among the system's",
       "/usr",
       {{"include/stdio.h", "stdio"}},
       absl::StatusCode::kInvalidArgument,
       "would lie among the toolchain's own files"},
      {"a header never uploaded",
       "/src",
       {{"cutlass/gemm.h", "never uploaded"}},
       absl::StatusCode::kFailedPrecondition,
       "input cutlass/gemm.h ("},
      {"the output in the tree",
       "/src",
       {{"a.o", "an old object"}},
       absl::StatusCode::kInvalidArgument,
       "its output 'a.o' is also one of its inputs"},
      {"the source in the tree too",
       "/src",
       {{"a.cu", "another source"}},
       absl::StatusCode::kInvalidArgument,
       "input 'a.cu' is listed twice"},
      {"a file under the source's name",
       "/src",
       {{"a.cu/x.h", "x"}},
       absl::StatusCode::kInvalidArgument,
       "input 'a.cu' is also a folder of inputs"},
  };
  for (const Case& c : cases) {
    absl::Status status = plan_unit(c.root, tree_of(c.files)).status();
    EXPECT_EQ(status.code(), c.code) << c.what << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("unit gemm: ")) << c.what;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.error)) << c.what;
  }
}

// A launcher's unit: all its inputs in one tree (the source with its
// headers), never split by architecture.
class CachedBuildTest : public BuildPlannerTest {
 protected:
  // A unit whose inputs are all in its tree, or (`own_source`) with its
  // source beside the tree, as the launcher sends it.
  v1::CompileUnit& AddUnit(v1::SubmitBuildRequest& request, const std::string& name,
                           bool own_source = false) {
    google::protobuf::RepeatedPtrField<v1::InputFile> files;
    google::protobuf::RepeatedPtrField<v1::InputFile> own;
    for (const auto& [path, content] : std::vector<std::pair<std::string, std::string>>{
             {"src/" + name + ".cu", "#include \"k.cuh\"\n// " + name}, {"src/k.cuh", "k"}}) {
      v1::InputFile* input = own_source && path == "src/" + name + ".cu" ? own.Add() : files.Add();
      input->set_path(path);
      *input->mutable_digest() = ToProto(*cas_->PutBytes(content));
    }
    absl::StatusOr<InputTree> tree = BuildInputTree(files);
    EXPECT_TRUE(tree.ok()) << tree.status();
    for (const auto& [digest, bytes] : tree->directories) {
      EXPECT_TRUE(cas_->Put(digest, bytes).ok());
    }
    v1::CompileUnit* unit = request.add_units();
    unit->set_name(name + ".cu");
    unit->set_working_directory("src");
    for (const std::string& arg :
         {std::string("-O3"), std::string("-c"), name + ".cu", std::string("-o"), name + ".o"}) {
      unit->add_arguments(arg);
    }
    unit->add_output_paths(name + ".o");
    *unit->mutable_input_root() = ToProto(tree->root);
    *unit->mutable_inputs() = own;
    return *unit;
  }

  v1::SubmitBuildRequest Launched(const std::vector<std::string>& names, bool own_source = false) {
    v1::SubmitBuildRequest request;
    request.mutable_toolchain()->set_digest("toolchain-a");
    request.set_workspace_root("/src/project");
    request.set_architecture_split(v1::ARCHITECTURE_SPLIT_NEVER);
    for (const std::string& name : names) AddUnit(request, name, own_source);
    return request;
  }

  // The result cache as holding what PlanBuild keys `request`'s units by.
  IsCached CachedAsPlanned(const v1::SubmitBuildRequest& request) {
    absl::StatusOr<std::vector<PlannedUnit>> planned =
        PlanBuild(request, *cas_, nullptr, ClusterCapacity{}, nullptr);
    EXPECT_TRUE(planned.ok()) << planned.status();
    std::set<std::string> digests;
    if (planned.ok()) {
      for (const PlannedUnit& unit : *planned) digests.insert(unit.action_digest);
    }
    return [digests](const std::string& digest) { return digests.count(digest) > 0; };
  }
};

TEST_F(CachedBuildTest, ACachedBuildIsKeyedAsPlanBuildKeysItWithoutItsTrees) {
  const v1::SubmitBuildRequest request = Launched({"a", "b"});
  absl::StatusOr<std::vector<PlannedUnit>> planned =
      PlanBuild(request, *cas_, nullptr, ClusterCapacity{}, nullptr);
  ASSERT_TRUE(planned.ok()) << planned.status();
  std::optional<std::vector<PlannedUnit>> cached =
      PlanCachedBuild(request, nullptr, {}, CachedAsPlanned(request));
  ASSERT_TRUE(cached.has_value());
  ASSERT_EQ(cached->size(), planned->size());
  for (size_t i = 0; i < planned->size(); ++i) {
    EXPECT_EQ((*cached)[i].action_digest, (*planned)[i].action_digest);
    EXPECT_EQ((*cached)[i].identity, (*planned)[i].identity);
    EXPECT_EQ((*cached)[i].family, (*planned)[i].family);
    EXPECT_EQ((*cached)[i].closure, (*planned)[i].closure);
    EXPECT_EQ((*cached)[i].unit.name(), (*planned)[i].unit.name());
    EXPECT_EQ((*cached)[i].unit.workspace_root(), "/src/project");
  }
  // Nothing of the trees is read: with an empty store PlanBuild asks for
  // them, the cached plan does not.
  auto empty = CasStore::Open(testing::NewTempDir("planner-empty-") + "/cas");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(PlanBuild(request, **empty, nullptr, ClusterCapacity{}, nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// The launcher sends a unit's source beside its tree: the cached plan reads
// the folders on the source's path from the store (not the tree's files)
// and keys it as PlanBuild does.
// A unit whose tree holds a header of a kind the coordinator has a
// measured profile of (UnitPriors) is predicted from it, sized by its file
// name, not from the default or units of about its size: a CUTLASS GEMM
// kernel, a flash-attention backward kernel of head dimension 256.
TEST_F(CachedBuildTest, AUnitOfAKindWithAMeasuredProfileIsPredictedFromIt) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  v1::SubmitBuildRequest request = Launched({});
  auto add = [&](const std::string& source, const std::string& header) {
    google::protobuf::RepeatedPtrField<v1::InputFile> files;
    for (const std::string& path : {"src/" + source, header}) {
      v1::InputFile* input = files.Add();
      input->set_path(path);
      *input->mutable_digest() = ToProto(*cas_->PutBytes("// " + path));
    }
    absl::StatusOr<InputTree> tree = BuildInputTree(files);
    ASSERT_TRUE(tree.ok()) << tree.status();
    for (const auto& [digest, bytes] : tree->directories)
      ASSERT_TRUE(cas_->Put(digest, bytes).ok());
    v1::CompileUnit* unit = request.add_units();
    unit->set_name(source);
    unit->set_working_directory("src");
    for (const std::string& arg : {std::string("-c"), source, std::string("-o"), source + ".o"}) {
      unit->add_arguments(arg);
    }
    unit->add_output_paths(source + ".o");
    *unit->mutable_input_root() = ToProto(tree->root);
  };
  add("flash_bwd_hdim256_fp16_sm80.cu", "src/flash_bwd_launch_template.h");
  add("cutlass3x_sm100_gemm_f16.cu", "include/cutlass/gemm/collective/collective_builder.hpp");
  add("plain.cu", "include/plain.h");
  absl::StatusOr<std::vector<PlannedUnit>> planned =
      PlanBuild(request, *cas_, nullptr, ClusterCapacity{}, nullptr);
  ASSERT_TRUE(planned.ok()) << planned.status();
  ASSERT_EQ(planned->size(), 3u);
  const UnitDemand& bwd = (*planned)[0].demand;
  EXPECT_EQ(bwd.basis, PredictionBasis::kPrior);
  EXPECT_EQ(bwd.peak_bytes, 7069 * kMiB + 7069 * kMiB / 20) << "its profile, plus the margin";
  EXPECT_EQ(bwd.wall, absl::Seconds(166.6));
  ASSERT_TRUE((*planned)[0].prior.has_value());
  EXPECT_EQ((*planned)[1].demand.source, "measured profile");
  EXPECT_EQ((*planned)[1].demand.peak_bytes, 3605 * kMiB + 3605 * kMiB / 20);
  EXPECT_EQ((*planned)[2].demand.basis, PredictionBasis::kDefault);
  EXPECT_FALSE((*planned)[2].prior.has_value());
}

TEST_F(CachedBuildTest, AUnitWithItsSourceBesideItsTreeIsKeyedAsPlanBuildKeysIt) {
  const v1::SubmitBuildRequest request = Launched({"a", "b"}, /*own_source=*/true);
  ASSERT_EQ(request.units(0).inputs_size(), 1);
  absl::StatusOr<std::vector<PlannedUnit>> planned =
      PlanBuild(request, *cas_, nullptr, ClusterCapacity{}, nullptr);
  ASSERT_TRUE(planned.ok()) << planned.status();
  std::optional<std::vector<PlannedUnit>> cached =
      PlanCachedBuild(request, nullptr, {}, CachedAsPlanned(request), cas_.get());
  ASSERT_TRUE(cached.has_value());
  ASSERT_EQ(cached->size(), planned->size());
  for (size_t i = 0; i < planned->size(); ++i) {
    EXPECT_EQ((*cached)[i].action_digest, (*planned)[i].action_digest);
    EXPECT_EQ((*cached)[i].identity, (*planned)[i].identity);
    EXPECT_EQ((*cached)[i].closure, (*planned)[i].closure);
  }
  // The same unit with its source in the tree names the same inputs.
  const v1::SubmitBuildRequest whole = Launched({"a", "b"});
  EXPECT_EQ(PlanCachedBuild(whole, nullptr, {}, CachedAsPlanned(whole))->at(0).action_digest,
            (*cached)[0].action_digest);
  const IsCached everything = [](const std::string&) { return true; };
  EXPECT_FALSE(PlanCachedBuild(request, nullptr, {}, everything).has_value()) << "no store given";
  struct Case {
    const char* what;
    std::function<void(v1::SubmitBuildRequest&)> change;
  };
  const std::vector<Case> cases = {
      {"its source not in the store",
       [](v1::SubmitBuildRequest& r) {
         *r.mutable_units(0)->mutable_inputs(0)->mutable_digest() = ToProto(DigestOf("absent"));
       }},
      {"a malformed digest",
       [](v1::SubmitBuildRequest& r) {
         r.mutable_units(0)->mutable_inputs(0)->mutable_digest()->set_hash("../../etc/passwd");
       }},
      {"a path out of the workspace",
       [](v1::SubmitBuildRequest& r) {
         r.mutable_units(0)->mutable_inputs(0)->set_path("../a.cu");
       }},
      {"a file the tree has too",
       [](v1::SubmitBuildRequest& r) {
         r.mutable_units(0)->mutable_inputs(0)->set_path("src/k.cuh");
       }},
      {"its tree's folders not in the store",
       [](v1::SubmitBuildRequest& r) {
         *r.mutable_units(0)->mutable_input_root() = ToProto(DigestOf("no such folder"));
       }},
  };
  for (const Case& c : cases) {
    v1::SubmitBuildRequest changed = request;
    c.change(changed);
    EXPECT_FALSE(PlanCachedBuild(changed, nullptr, {}, everything, cas_.get()).has_value())
        << c.what;
  }
  BuildLimits limits;
  limits.max_inputs_per_unit = 0;  // more own files than a unit may have
  EXPECT_FALSE(PlanCachedBuild(request, nullptr, limits, everything, cas_.get()).has_value());
}

TEST_F(CachedBuildTest, AnythingButAWholeCachedBuildOfTreeUnitsIsLeftToPlanBuild) {
  const IsCached everything = [](const std::string&) { return true; };
  const IsCached nothing = [](const std::string&) { return false; };
  EXPECT_TRUE(PlanCachedBuild(Launched({"a"}), nullptr, {}, everything).has_value());
  EXPECT_FALSE(PlanCachedBuild(Launched({"a"}), nullptr, {}, nothing).has_value());
  EXPECT_FALSE(PlanCachedBuild(Launched({"a"}), nullptr, {}, nullptr).has_value());
  {
    // One unit of two cached: the other must be compiled, from its tree.
    v1::SubmitBuildRequest a = Launched({"a"});
    IsCached only_a = CachedAsPlanned(a);
    EXPECT_TRUE(PlanCachedBuild(a, nullptr, {}, only_a).has_value());
    EXPECT_FALSE(PlanCachedBuild(Launched({"a", "b"}), nullptr, {}, only_a).has_value());
  }
  struct Case {
    const char* what;
    std::function<void(v1::SubmitBuildRequest&)> change;
  };
  const std::vector<Case> cases = {
      {"a unit with a list of its own, with no store to read its folders from",
       [&](v1::SubmitBuildRequest& r) {
         v1::InputFile* input = r.mutable_units(0)->add_inputs();
         input->set_path("src/extra.h");
         *input->mutable_digest() = ToProto(header_);
       }},
      {"a unit without a tree",
       [](v1::SubmitBuildRequest& r) { r.mutable_units(0)->clear_input_root(); }},
      {"a malformed root",
       [](v1::SubmitBuildRequest& r) {
         r.mutable_units(0)->mutable_input_root()->set_hash("not a digest");
       }},
      {"split by architecture when it pays",
       [](v1::SubmitBuildRequest& r) { r.set_architecture_split(v1::ARCHITECTURE_SPLIT_AUTO); }},
      {"an instantiation set",
       [&](v1::SubmitBuildRequest& r) {
         *r.add_instantiation_sets() = request_.instantiation_sets(0);
       }},
      {"two units of one name", [&](v1::SubmitBuildRequest& r) { *r.add_units() = r.units(0); }},
      {"an output outside the workspace",
       [](v1::SubmitBuildRequest& r) {
         v1::CompileUnit* unit = r.mutable_units(0);
         unit->set_arguments(4, "/etc/cron.d/a.o");
         unit->set_output_paths(0, "/etc/cron.d/a.o");
       }},
      {"an argument that reads a host file",
       [](v1::SubmitBuildRequest& r) {
         r.mutable_units(0)->add_arguments("--options-file=/etc/shadow");
       }},
  };
  for (const Case& c : cases) {
    v1::SubmitBuildRequest request = Launched({"a"});
    c.change(request);
    EXPECT_FALSE(PlanCachedBuild(request, nullptr, {}, everything).has_value()) << c.what;
  }
  BuildLimits limits;
  limits.max_units = 1;
  EXPECT_FALSE(PlanCachedBuild(Launched({"a", "b"}), nullptr, limits, everything).has_value())
      << "over the build's limits";
}

TEST_F(BuildPlannerTest, ABuildPlanBlobIsReadInPlaceOfItsDigest) {
  v1::BuildPlan plan;
  *plan.mutable_instantiation_sets() = request_.instantiation_sets();
  v1::CompileUnit* unit = plan.add_units();
  unit->set_name("api");
  absl::StatusOr<Digest> stored = cas_->PutBytes(plan.SerializeAsString());
  ASSERT_TRUE(stored.ok());
  v1::SubmitBuildRequest packed;
  packed.set_build_name("b");
  *packed.mutable_toolchain() = request_.toolchain();
  *packed.mutable_plan() = ToProto(*stored);
  absl::StatusOr<v1::SubmitBuildRequest> read = ReadBuildPlan(packed, *cas_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_FALSE(read->has_plan());
  EXPECT_EQ(read->build_name(), "b");
  ASSERT_EQ(read->units_size(), 1);
  EXPECT_EQ(read->units(0).name(), "api");
  EXPECT_EQ(read->instantiation_sets(0).SerializeAsString(),
            request_.instantiation_sets(0).SerializeAsString());
  // A request without a plan is as it was.
  EXPECT_EQ(ReadBuildPlan(request_, *cas_)->SerializeAsString(), request_.SerializeAsString());

  v1::SubmitBuildRequest both = packed;
  both.add_units()->set_name("x");
  EXPECT_THAT(ReadBuildPlan(both, *cas_).status().message(),
              HasSubstr("both a plan blob and units of its own"));
  v1::SubmitBuildRequest lacking = packed;
  *lacking.mutable_plan() = ToProto(DigestOf("never uploaded"));
  EXPECT_EQ(ReadBuildPlan(lacking, *cas_).status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Digest> junk = cas_->PutBytes("\xff\xff not a plan");
  ASSERT_TRUE(junk.ok());
  v1::SubmitBuildRequest garbled = packed;
  *garbled.mutable_plan() = ToProto(*junk);
  EXPECT_THAT(ReadBuildPlan(garbled, *cas_).status().message(),
              HasSubstr("is not a BuildPlan message"));
  // A plan is parsed whole: its size is bounded before it is read.
  BuildLimits small;
  small.max_plan_bytes = stored->size_bytes - 1;
  absl::Status over = ReadBuildPlan(packed, *cas_, small).status();
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("--max-build-plan-size"));
}

TEST_F(BuildPlannerTest, UnitThatWritesOutsideTheSandboxIsRejected) {
  v1::CompileUnit* unit = request_.add_units();
  unit->set_name("escape");
  for (const char* arg : {"-c", "a.cu", "-o", "../../etc/x.o"}) unit->add_arguments(arg);
  unit->add_output_paths("../../etc/x.o");
  absl::StatusOr<std::vector<PlannedUnit>> units =
      PlanBuild(request_, *cas_, nullptr, ClusterCapacity{}, nullptr);
  EXPECT_EQ(units.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(units.status().message(), HasSubstr("unit escape"));
}

TEST_F(BuildPlannerTest, PlaceholderWithoutAxisIsRejected) {
  request_.mutable_instantiation_sets(0)->set_text_template("template void K<{n}, {m}>();");
  absl::StatusOr<std::vector<PlannedUnit>> units =
      PlanBuild(request_, *cas_, nullptr, ClusterCapacity{}, nullptr);
  EXPECT_EQ(units.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(units.status().message(), HasSubstr("{m}"));
}

TEST_F(BuildPlannerTest, DuplicateUnitNamesAreRejected) {
  request_.add_instantiation_sets()->CopyFrom(request_.instantiation_sets(0));
  absl::StatusOr<std::vector<PlannedUnit>> units =
      PlanBuild(request_, *cas_, nullptr, ClusterCapacity{}, nullptr);
  EXPECT_EQ(units.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(units.status().message(), HasSubstr("k_1"));
}

}  // namespace
}  // namespace distcc_cuda::coordinator

namespace distcc_cuda::coordinator {
namespace {

class UnitSizeTest : public BuildPlannerTest {
 protected:
  void SetUp() override {
    BuildPlannerTest::SetUp();
    auto* axis = request_.mutable_instantiation_sets(0)->mutable_axes(0);
    for (int n = 3; n <= 8; ++n) axis->add_values(std::to_string(n));  // 8 points
  }
  absl::StatusOr<std::vector<PlannedUnit>> Plan(ClusterCapacity capacity,
                                                UnitSizeChoices* choices) {
    return PlanBuild(request_, *cas_, nullptr, capacity, choices);
  }
};

TEST_F(UnitSizeTest, CoordinatorGroupsInstantiationsToFitTheCapsAndBalance) {
  // Default 2 GiB per instantiation; half of 16 GiB holds 4; one slot wants
  // at least two units.
  absl::StatusOr<std::vector<PlannedUnit>> units = Plan({16 * (int64_t{1} << 30), 1}, nullptr);
  ASSERT_TRUE(units.ok()) << units.status();
  ASSERT_EQ(units->size(), 2u);
  EXPECT_EQ((*units)[0].unit.name(), "k_1of2");
  EXPECT_EQ((*units)[0].instantiations, 4);
  EXPECT_THAT(SourceOf((*units)[0].unit),
              HasSubstr("#include \"k.cuh\"\ntemplate void K<1>();\ntemplate void "
                        "K<2>();\ntemplate void K<3>();\ntemplate void K<4>();\n"));
  EXPECT_EQ((*units)[0].demand.peak_bytes, 4 * PredictionDefaults().peak_bytes);
}

TEST_F(UnitSizeTest, GroupSplitsIntoHalvesThatSplitAgainDownToOnePoint) {
  absl::StatusOr<std::vector<PlannedUnit>> units = Plan({16 * (int64_t{1} << 30), 1}, nullptr);
  ASSERT_TRUE(units.ok()) << units.status();
  const PlannedUnit& group = (*units)[1];  // K<5> .. K<8>
  ASSERT_TRUE(group.split);
  absl::StatusOr<std::vector<PlannedUnit>> halves = group.split();
  ASSERT_TRUE(halves.ok()) << halves.status();
  ASSERT_EQ(halves->size(), 2u);
  EXPECT_EQ((*halves)[0].unit.name(), "k_2of2_1of2");
  EXPECT_EQ((*halves)[1].unit.name(), "k_2of2_2of2");
  EXPECT_EQ((*halves)[1].instantiations, 2);
  EXPECT_EQ((*halves)[1].demand.peak_bytes, 2 * PredictionDefaults().peak_bytes);
  EXPECT_THAT(std::vector<std::string>((*halves)[1].unit.arguments().begin(),
                                       (*halves)[1].unit.arguments().end()),
              ::testing::ElementsAre("-O3", "-c", "k_2of2_2of2.cu", "-o", "k_2of2_2of2.o"));
  const auto& input = (*halves)[1].unit.inputs((*halves)[1].unit.inputs_size() - 1);
  EXPECT_EQ(input.path(), "kernels/k_2of2_2of2.cu");
  const std::string source = SourceOf(input);
  EXPECT_THAT(source, HasSubstr("#include \"k.cuh\"\ntemplate void K<7>();\ntemplate void "
                                "K<8>();\n"));
  EXPECT_THAT(source, ::testing::Not(HasSubstr("K<6>")));
  EXPECT_NE((*halves)[0].action_digest, group.action_digest);
  // A half of two splits once more; a single point cannot.
  ASSERT_TRUE((*halves)[1].split);
  absl::StatusOr<std::vector<PlannedUnit>> quarters = (*halves)[1].split();
  ASSERT_TRUE(quarters.ok());
  ASSERT_EQ(quarters->size(), 2u);
  EXPECT_EQ((*quarters)[0].unit.name(), "k_7") << "a single point has its own name";
  EXPECT_EQ((*quarters)[0].instantiations, 1);
  EXPECT_FALSE((*quarters)[0].split);
}

TEST_F(UnitSizeTest, ManifestCanForceOneInstantiationPerUnit) {
  request_.mutable_instantiation_sets(0)->set_instantiations_per_unit(1);
  absl::StatusOr<std::vector<PlannedUnit>> units = Plan({16 * (int64_t{1} << 30), 1}, nullptr);
  ASSERT_TRUE(units.ok());
  EXPECT_EQ(units->size(), 8u);
}

TEST_F(UnitSizeTest, ChoiceSticksWhileItFitsSoCachedUnitsKeepTheirNames) {
  absl::StatusOr<std::unique_ptr<UnitSizeChoices>> choices = UnitSizeChoices::Open("");
  ASSERT_TRUE(choices.ok());
  int64_t gib = int64_t{1} << 30;
  ASSERT_EQ(Plan({16 * gib, 1}, choices->get())->size(), 2u);
  // More slots would choose smaller units, but the units built before stay.
  ASSERT_EQ(Plan({16 * gib, 4}, choices->get())->size(), 2u);
  // Smaller workers: four instantiations no longer fit; choose again.
  ASSERT_EQ(Plan({4 * gib, 4}, choices->get())->size(), 8u);
}

// A prediction that grew (the history learned more) does not throw away
// units that compiled: a kept size whose units are in the result cache
// stays though it is now predicted not to fit (they did fit); with none
// cached, the size is chosen again.
TEST_F(UnitSizeTest, AKeptSizeWithCachedUnitsStaysWhenItIsPredictedNotToFit) {
  absl::StatusOr<std::unique_ptr<UnitSizeChoices>> choices = UnitSizeChoices::Open("");
  ASSERT_TRUE(choices.ok());
  const int64_t gib = int64_t{1} << 30;
  absl::StatusOr<std::vector<PlannedUnit>> first = Plan({16 * gib, 1}, choices->get());
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 2u);
  const std::string cached = (*first)[1].action_digest;
  auto plan = [&](bool with_cache) {
    return PlanBuild(request_, *cas_, nullptr, {4 * gib, 4}, choices->get(), {},
                     [&](const std::string& digest) { return with_cache && digest == cached; });
  };
  absl::StatusOr<std::vector<PlannedUnit>> kept = plan(true);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->size(), 2u);
  EXPECT_EQ((*kept)[1].action_digest, cached);
  EXPECT_EQ(plan(false)->size(), 8u);
}

// Item 5 of issue 13: a size chosen from the cold default (one point per
// unit on small workers) is not kept forever when bigger units would do;
// it is planned again on a build whose kept units miss the cache anyway.
TEST_F(UnitSizeTest, AKeptSizeIsRegroupedWhenItPaysAndCostsNoCachedResult) {
  const int64_t gib = int64_t{1} << 30;
  std::string hit;                 // with `cached` false, the one unit the cache holds
  std::vector<std::string> notes;  // of the last plan
  auto plan = [&](ClusterCapacity capacity, UnitSizeChoices* choices, bool cached) {
    notes.clear();
    return PlanBuild(
        request_, *cas_, nullptr, capacity, choices, {},
        [cached, &hit](const std::string& digest) { return cached || digest == hit; }, &notes);
  };
  absl::StatusOr<std::unique_ptr<UnitSizeChoices>> choices = UnitSizeChoices::Open("");
  ASSERT_TRUE(choices.ok());
  // 4 GiB workers hold one 2 GiB instantiation per unit.
  absl::StatusOr<std::vector<PlannedUnit>> first = plan({4 * gib, 4}, choices->get(), false);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 8u);
  // Bigger workers would take 4 per unit (2 units, 4x fewer); an unchanged
  // rebuild keeps its 8 cached units.
  EXPECT_EQ(plan({64 * gib, 1}, choices->get(), true)->size(), 8u);
  // One unit missing (a compile error fixed, one source edited) keeps the
  // other units' results.
  hit = (*first)[5].action_digest;
  EXPECT_EQ(plan({64 * gib, 1}, choices->get(), false)->size(), 8u);
  EXPECT_TRUE(notes.empty());
  hit.clear();
  // A build whose units all miss the cache anyway regroups, and the new
  // size sticks for the builds after it.
  absl::StatusOr<std::vector<PlannedUnit>> regrouped = plan({64 * gib, 1}, choices->get(), false);
  ASSERT_TRUE(regrouped.ok());
  ASSERT_EQ(regrouped->size(), 2u);
  EXPECT_EQ((*regrouped)[0].unit.name(), "k_1of2");
  EXPECT_EQ((*regrouped)[0].instantiations, 4);
  // The user is told, in words.
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("set k: regrouped from 1 to 4 instantiations per unit (2 units "
                                  "instead of 8; one instantiation is now predicted at "));
  EXPECT_THAT(notes[0], HasSubstr("none of its units was cached"));
  EXPECT_EQ(plan({64 * gib, 1}, choices->get(), true)->size(), 2u);
  EXPECT_EQ(plan({64 * gib, 1}, choices->get(), false)->size(), 2u);

  // Without the cache's answer (or without kept choices) nothing regroups.
  absl::StatusOr<std::unique_ptr<UnitSizeChoices>> unasked = UnitSizeChoices::Open("");
  ASSERT_EQ(PlanBuild(request_, *cas_, nullptr, {4 * gib, 4}, unasked->get())->size(), 8u);
  EXPECT_EQ(PlanBuild(request_, *cas_, nullptr, {64 * gib, 1}, unasked->get())->size(), 8u);

  // 1.5x fewer units is not enough: 3 per unit (3 units) stays against 4
  // per unit (2 units).
  absl::StatusOr<std::unique_ptr<UnitSizeChoices>> threes = UnitSizeChoices::Open("");
  ASSERT_EQ(plan({12 * gib, 1}, threes->get(), false)->size(), 3u);
  EXPECT_EQ(plan({64 * gib, 1}, threes->get(), false)->size(), 3u);

  // Kept units that an earlier build split by target hold their results
  // in their parts: they count as cached, and nothing regroups.
  absl::StatusOr<std::unique_ptr<UnitSizeChoices>> split = UnitSizeChoices::Open("");
  first = plan({4 * gib, 4}, split->get(), false);
  ASSERT_TRUE(first.ok());
  for (const PlannedUnit& unit : *first) {
    (*split)->Remember(absl::StrCat("architectures:", unit.action_digest), 1);
  }
  EXPECT_EQ(plan({64 * gib, 1}, split->get(), false)->size(), 8u);
}

}  // namespace
}  // namespace distcc_cuda::coordinator

namespace distcc_cuda::coordinator {
namespace {

// An ordinary unit compiled for five targets, as flash-attention's are.
class ArchitectureSplitTest : public BuildPlannerTest {
 protected:
  void SetUp() override {
    BuildPlannerTest::SetUp();
    request_.clear_instantiation_sets();
    auto source = cas_->PutBytes("__global__ void k() {}\n");
    ASSERT_TRUE(source.ok());
    v1::CompileUnit* unit = request_.add_units();
    unit->set_name("mha");
    for (const char* arg :
         {"-O3", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
          "-gencode", "arch=compute_100,code=sm_100", "-gencode", "arch=compute_110,code=sm_110",
          "-gencode", "arch=compute_120,code=sm_120", "-c", "mha.cu", "-o", "mha.o"}) {
      unit->add_arguments(arg);
    }
    unit->add_output_paths("mha.o");
    auto* input = unit->add_inputs();
    input->set_path("mha.cu");
    *input->mutable_digest() = ToProto(*source);
  }
  void SetThreads(const std::string& threads) {
    request_.mutable_units(0)->add_arguments("--threads");
    request_.mutable_units(0)->add_arguments(threads);
  }
  absl::StatusOr<std::vector<PlannedUnit>> Plan(int total_slots,
                                                UnitSizeChoices* choices = nullptr) {
    // One worker of 16 GiB: a slot's share is 16 GiB / slots.
    return PlanBuild(request_, *cas_, nullptr,
                     {kGiB * 16, total_slots, kGiB * 16 / std::max(1, total_slots)}, choices);
  }
  static constexpr int64_t kGiB = int64_t{1} << 30;
};

std::vector<std::string> Names(const std::vector<PlannedUnit>& units) {
  std::vector<std::string> names;
  for (const PlannedUnit& unit : units) names.push_back(unit.unit.name());
  return names;
}

TEST_F(ArchitectureSplitTest, ThreadedUnitsWhoseWholesLeaveMemoryIdleCompileOneUnitPerTarget) {
  // Four units of five targets, four at once (--threads 4): a whole holds
  // 4 x 2 GiB, so one at a time fits a worker of 10 GiB and four slots
  // (two waves of device passes each: 4 x 102 s); a part holds 2 GiB and
  // four run at once (20 parts in 5 waves of 60 s).
  SetThreads("4");
  for (const char* name : {"mha2", "mha3", "mha4"}) {
    request_.add_units()->CopyFrom(request_.units(0));
    request_.mutable_units(request_.units_size() - 1)->set_name(name);
  }
  absl::StatusOr<std::vector<PlannedUnit>> units =
      PlanBuild(request_, *cas_, nullptr, {kGiB * 10, 4, kGiB * 10 / 4}, nullptr);
  ASSERT_TRUE(units.ok()) << units.status();
  ASSERT_EQ(units->size(), 20u);
  EXPECT_THAT(Names(*units), ::testing::IsSupersetOf({"mha@sm_80", "mha@sm_90", "mha@sm_100",
                                                      "mha@sm_110", "mha@sm_120"}));
  for (int i = 0; i < 5; ++i) {
    const PlannedUnit& part = (*units)[i];
    EXPECT_EQ(part.unit.architecture_part().of(), "mha");
    EXPECT_EQ(part.unit.architecture_part().index(), i);
    EXPECT_EQ(part.unit.architecture_part().count(), 5);
    EXPECT_EQ(part.parallel, 1);
    // One target's memory, where the whole would reserve four at once.
    EXPECT_EQ(part.demand.peak_bytes, PredictionDefaults().peak_bytes);
    EXPECT_FALSE(part.split) << "a part cannot split again";
  }
  EXPECT_EQ((*units)[2].unit.output_paths(0), "mha.sm_100.o");
}

TEST_F(ArchitectureSplitTest, ThreadedUnitsStayWholeWhereTheSplitWouldOnlyRepeatHostPasses) {
  // Three units of five targets four at once, 8 GiB each: on one slot of
  // 16 GiB, or three slots of 5.3 GiB (two wholes fit at once: 2 waves of
  // 102 s, against 15 parts in 5 waves of 60 s), the whole saves the
  // parts' repeated host passes.
  SetThreads("4");
  for (const char* name : {"mha2", "mha3"}) {
    request_.add_units()->CopyFrom(request_.units(0));
    request_.mutable_units(request_.units_size() - 1)->set_name(name);
  }
  for (int slots : {1, 3}) {
    absl::StatusOr<std::vector<PlannedUnit>> units = Plan(slots);
    ASSERT_TRUE(units.ok()) << units.status();
    EXPECT_THAT(Names(*units), ::testing::ElementsAre("mha", "mha2", "mha3")) << slots << " slots";
  }
  // A whole that fits no worker splits whatever it costs.
  absl::StatusOr<std::vector<PlannedUnit>> tight =
      PlanBuild(request_, *cas_, nullptr, {kGiB * 6, 3, kGiB * 2}, nullptr);
  ASSERT_TRUE(tight.ok());
  EXPECT_EQ(tight->size(), 15u);
}

TEST_F(ArchitectureSplitTest, SequentialTargetsStayWholeUnlessSlotsWouldIdle) {
  // Five targets one after another on a cluster of one slot: the whole
  // saves four host passes. With more slots than units, the parts use them.
  absl::StatusOr<std::vector<PlannedUnit>> one_slot = Plan(1);
  ASSERT_TRUE(one_slot.ok()) << one_slot.status();
  EXPECT_THAT(Names(*one_slot), ::testing::ElementsAre("mha"));
  absl::StatusOr<std::vector<PlannedUnit>> many = Plan(8);
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(many->size(), 5u);
}

// The estimate behind the choice, case by case: the build's time whole and
// split, from the predictions (the defaults here: 2 GiB and 60 s a target)
// and the cluster's shape; measured times where the history has them.
TEST(WeighArchitectureSplitTest, MakespansOfTheWholeAndItsParts) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  auto unit = [](int64_t peak, absl::Duration wall, int parallel, PredictionBasis basis) {
    PlannedUnit plan;
    plan.demand.peak_bytes = peak;
    plan.demand.wall = wall;
    plan.demand.basis = basis;
    plan.parallel = parallel;
    return plan;
  };
  const PlannedUnit part = unit(2 * kGiB, absl::Seconds(60), 1, PredictionBasis::kDefault);
  const std::vector<PlannedUnit> two(2, part), five(5, part);
  struct Case {
    std::string what;
    PlannedUnit whole;
    const std::vector<PlannedUnit>* parts;
    size_t units;
    ClusterCapacity capacity;
    absl::Duration whole_time, parts_time;
  };
  const absl::Duration w2 = absl::Seconds(60) * (kHostPassShare + 1 - kHostPassShare);
  const absl::Duration w5 = absl::Seconds(60) * (kHostPassShare + 5 * (1 - kHostPassShare));
  const std::vector<Case> cases = {
      // flash-attention's setup.py (--threads 4, two targets) on two
      // workers of two slots and 6 GiB: a tie, the whole saves the CPU.
      {"two targets at once, memory for one whole per worker",
       unit(4 * kGiB, absl::Seconds(60), 2, PredictionBasis::kDefault), &two, 4,
       ClusterCapacity{kGiB * 11 / 2, 4, kGiB * 11 / 4}, 2 * w2, 2 * absl::Seconds(60)},
      {"five targets in turn, more slots than units",
       unit(2 * kGiB, absl::Seconds(60), 1, PredictionBasis::kDefault), &five, 1,
       ClusterCapacity{16 * kGiB, 8, 2 * kGiB}, w5, absl::Seconds(60)},
      {"five targets in turn, one slot",
       unit(2 * kGiB, absl::Seconds(60), 1, PredictionBasis::kDefault), &five, 1,
       ClusterCapacity{16 * kGiB, 1, 16 * kGiB}, w5, 5 * absl::Seconds(60)},
      {"a whole that fits no worker",
       unit(20 * kGiB, absl::Seconds(60), 5, PredictionBasis::kDefault), &five, 1,
       ClusterCapacity{16 * kGiB, 4, 4 * kGiB}, absl::InfiniteDuration(), 2 * absl::Seconds(60)},
      // Measured: the whole took 300 s on its own; the parts are derived.
      {"the whole's own time", unit(2 * kGiB, absl::Seconds(300), 1, PredictionBasis::kOwnHistory),
       &five, 1, ClusterCapacity{16 * kGiB, 8, 2 * kGiB}, absl::Seconds(300),
       absl::Seconds(300) / (kHostPassShare + 5 * (1 - kHostPassShare))},
  };
  for (const Case& c : cases) {
    ArchitectureSplitCosts costs = WeighArchitectureSplit(c.whole, *c.parts, c.units, c.capacity);
    EXPECT_EQ(costs.whole, c.whole_time) << c.what;
    EXPECT_EQ(costs.parts, c.parts_time) << c.what;
    EXPECT_GT(costs.repeated_host_passes, absl::ZeroDuration()) << c.what;
  }
}

TEST_F(ArchitectureSplitTest, UserCanForceOrForbidTheSplit) {
  request_.set_architecture_split(v1::ARCHITECTURE_SPLIT_ALWAYS);
  absl::StatusOr<std::vector<PlannedUnit>> always = Plan(1);
  ASSERT_TRUE(always.ok());
  EXPECT_EQ(always->size(), 5u);
  SetThreads("4");
  request_.set_architecture_split(v1::ARCHITECTURE_SPLIT_NEVER);
  absl::StatusOr<std::vector<PlannedUnit>> never = Plan(64);
  ASSERT_TRUE(never.ok());
  ASSERT_THAT(Names(*never), ::testing::ElementsAre("mha"));
  EXPECT_FALSE((*never)[0].split) << "never means the ladder does not split it either";
}

TEST_F(ArchitectureSplitTest, WholeUnitSplitsByTargetOnTheLaddersLastRungAndTheNextBuildKeepsIt) {
  absl::StatusOr<std::unique_ptr<UnitSizeChoices>> choices = UnitSizeChoices::Open("");
  ASSERT_TRUE(choices.ok());
  absl::StatusOr<std::vector<PlannedUnit>> whole = Plan(1, choices->get());
  ASSERT_TRUE(whole.ok());
  ASSERT_EQ(whole->size(), 1u);
  ASSERT_TRUE((*whole)[0].split);
  absl::StatusOr<std::vector<PlannedUnit>> parts = (*whole)[0].split();
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_EQ(parts->size(), 5u);
  EXPECT_EQ((*parts)[4].unit.name(), "mha@sm_120");
  absl::StatusOr<std::vector<PlannedUnit>> next = Plan(1, choices->get());
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(Names(*next), Names(*parts));
  EXPECT_EQ((*next)[0].action_digest, (*parts)[0].action_digest) << "so the cache serves them";
}

TEST_F(ArchitectureSplitTest, UnitThatCannotSplitStaysWhole) {
  request_.mutable_units(0)->add_arguments("-rdc=true");
  SetThreads("4");
  absl::StatusOr<std::vector<PlannedUnit>> units = Plan(64);
  ASSERT_TRUE(units.ok()) << units.status();
  ASSERT_THAT(Names(*units), ::testing::ElementsAre("mha"));
  EXPECT_FALSE((*units)[0].split);
}

// The report: a 1,000,000-point grid grew the coordinator to 1.5 GB. The
// limit is checked from the axes' sizes, before anything is expanded.
TEST_F(BuildPlannerTest, AMillionPointGridIsRefusedBeforeItIsExpanded) {
  v1::InstantiationSet* set = request_.mutable_instantiation_sets(0);
  set->clear_axes();
  set->set_unit_name_template("k_{a}{b}{c}{d}{e}{f}");
  set->set_text_template("template void K<{a}{b}{c}{d}{e}{f}>();");
  for (const char* name : {"a", "b", "c", "d", "e", "f"}) {
    auto* axis = set->add_axes();
    axis->set_name(name);
    for (int v = 0; v < 10; ++v) axis->add_values(std::to_string(v));
  }
  EXPECT_EQ(GridPoints(*set), 1000000);
  absl::Time start = absl::Now();
  absl::StatusOr<std::vector<PlannedUnit>> units =
      PlanBuild(request_, *cas_, nullptr, ClusterCapacity{}, nullptr);
  ASSERT_FALSE(units.ok());
  EXPECT_EQ(units.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(units.status().message(), HasSubstr("1000000 instantiation grid points"));
  EXPECT_THAT(units.status().message(), HasSubstr("--max-grid-points"));
  // Nothing was generated: the store holds only the header.
  int blobs = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(cas_->root());
       it != std::filesystem::recursive_directory_iterator(); ++it) {
    blobs += it->is_regular_file();
  }
  EXPECT_EQ(blobs, 1);
  (void)start;
}

TEST_F(BuildPlannerTest, GridPointsSaturateInsteadOfOverflowing) {
  v1::InstantiationSet set;
  for (int i = 0; i < 40; ++i) {
    auto* axis = set.add_axes();
    axis->set_name(absl::StrCat("x", i));
    for (int v = 0; v < 1000; ++v) axis->add_values("v");
  }
  EXPECT_EQ(GridPoints(set), int64_t{1} << 62);
  EXPECT_EQ(GridPoints(v1::InstantiationSet{}), 0);
}

struct LimitCase {
  std::string name;
  std::function<void(v1::SubmitBuildRequest&, BuildLimits&)> setup;
  std::string message_has;
};

class BuildLimitsTest : public BuildPlannerTest, public ::testing::WithParamInterface<LimitCase> {};

TEST_P(BuildLimitsTest, IsRefusedNamingItsFlag) {
  BuildLimits limits;
  GetParam().setup(request_, limits);
  absl::Status status = CheckBuildLimits(request_, limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr(GetParam().message_has));
  // The defaults take a build of this size.
  EXPECT_TRUE(CheckBuildLimits(request_, BuildLimits{}).ok() || GetParam().name == "InputBytes");
}

INSTANTIATE_TEST_SUITE_P(
    Limits, BuildLimitsTest,
    ::testing::Values(LimitCase{"Units",
                                [](v1::SubmitBuildRequest& request, BuildLimits& limits) {
                                  limits.max_units = 2;
                                  request.add_units()->set_name("extra");
                                },
                                "--max-units-per-build"},
                      LimitCase{"Arguments",
                                [](v1::SubmitBuildRequest& request, BuildLimits& limits) {
                                  limits.max_arguments_per_unit = 3;
                                  for (int i = 0; i < 4; ++i) {
                                    request.mutable_instantiation_sets(0)->add_arguments("-O3");
                                  }
                                },
                                "--max-arguments-per-unit"},
                      LimitCase{"ArgumentLength",
                                [](v1::SubmitBuildRequest& request, BuildLimits& limits) {
                                  limits.max_argument_bytes = 10;
                                  request.mutable_instantiation_sets(0)->add_arguments(
                                      "-DX=" + std::string(20, 'y'));
                                },
                                "--max-argument-length"},
                      LimitCase{"InputsPerUnit",
                                [](v1::SubmitBuildRequest& request, BuildLimits& limits) {
                                  limits.max_inputs_per_unit = 0;
                                },
                                "--max-inputs-per-unit"},
                      LimitCase{"InputBytes",
                                [](v1::SubmitBuildRequest& request, BuildLimits& limits) {
                                  limits.max_input_bytes = 4;
                                  auto* input = request.add_units()->add_inputs();
                                  input->mutable_digest()->set_hash(std::string(64, 'b'));
                                  input->mutable_digest()->set_size_bytes(int64_t{1} << 60);
                                },
                                "--max-build-input-size"}),
    [](const ::testing::TestParamInfo<LimitCase>& info) { return info.param.name; });

}  // namespace
}  // namespace distcc_cuda::coordinator
