// SPDX-License-Identifier: Apache-2.0
#include "coordinator/memory/memory_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "common/base/files.h"
#include "coordinator/scheduler/admission.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::coordinator {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

struct ParallelCase {
  const char* name;
  std::vector<std::string> arguments;
  int parallel;
};

class ParallelCompilationsTest : public ::testing::TestWithParam<ParallelCase> {};

TEST_P(ParallelCompilationsTest, CountsWhatRunsAtOnce) {
  EXPECT_EQ(ParallelCompilations(GetParam().arguments), GetParam().parallel);
}

const std::vector<std::string> kFiveTargets = {
    "-gencode", "arch=compute_80,code=sm_80",   "-gencode", "arch=compute_90,code=sm_90",
    "-gencode", "arch=compute_100,code=sm_100", "-gencode", "arch=compute_110,code=sm_110",
    "-gencode", "arch=compute_120,code=sm_120"};

std::vector<std::string> With(std::vector<std::string> base, std::vector<std::string> more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParallelCompilationsTest,
    ::testing::Values(
        ParallelCase{"PlainCompile", {"-O3", "-c", "a.cu", "-o", "a.o"}, 1},
        ParallelCase{"OneTarget", {"-gencode", "arch=compute_100,code=sm_100", "-c", "a.cu"}, 1},
        ParallelCase{"FiveTargetsSerial", kFiveTargets, 1},
        ParallelCase{"FiveTargetsThreads4", With(kFiveTargets, {"--threads", "4"}), 4},
        ParallelCase{"FiveTargetsThreads8", With(kFiveTargets, {"--threads", "8"}), 5},
        ParallelCase{"FiveTargetsAllThreads", With(kFiveTargets, {"-t", "0"}), 5},
        ParallelCase{"SplitCompile", {"--split-compile", "4", "-c", "a.cu"}, 4},
        ParallelCase{"ThreadsAndSplit", With(kFiveTargets, {"--threads", "2", "--split-compile=3"}),
                     6}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(PredictedAdmissionTest, MultiTargetThreadedUnitsReserveTheirParallelCompilations) {
  // A unit never measured: the default per compilation times what runs at once.
  absl::StatusOr<std::unique_ptr<PeakHistory>> history =
      PeakHistory::Open("", PredictionDefaults{1 * kGiB, absl::Seconds(60), 0.95});
  ASSERT_TRUE(history.ok());
  int parallel = ParallelCompilations(With(kFiveTargets, {"--threads", "4"}));
  UnitDemand demand = (*history)->Predict("id", "family", parallel);
  EXPECT_EQ(demand.peak_bytes, 4 * kGiB);
  EXPECT_EQ(demand.source, "default");
  WorkerLoad worker{8 * kGiB, 4 * kGiB + kMiB, 8, 1};
  EXPECT_FALSE(Admits(worker, ReservationOn(worker, demand.peak_bytes)))
      << "4 GiB more does not fit beside 4 GiB on an 8 GiB worker";
}

TEST(PeakHistoryTest, PredictsFromOwnHistoryThenSimilarUnitsThenTheDefault) {
  absl::StatusOr<std::unique_ptr<PeakHistory>> history =
      PeakHistory::Open("", PredictionDefaults{2 * kGiB, absl::Seconds(60), 0.95, 0.0});
  ASSERT_TRUE(history.ok());
  for (int64_t peak : {100, 300, 200}) {
    (*history)->Record("unit-a", "family-1", peak * kMiB, absl::Seconds(peak / 100));
  }
  UnitDemand own = (*history)->Predict("unit-a", "family-1", 1);
  EXPECT_EQ(own.source, "history");
  EXPECT_EQ(own.peak_bytes, 300 * kMiB) << "a high quantile of three samples is the largest";
  EXPECT_EQ(own.wall, absl::Seconds(3));
  UnitDemand similar = (*history)->Predict("unit-b", "family-1", 1);
  EXPECT_EQ(similar.source, "similar units");
  EXPECT_EQ(similar.peak_bytes, 300 * kMiB);
  UnitDemand unknown = (*history)->Predict("unit-c", "family-2", 3);
  EXPECT_EQ(unknown.source, "default");
  EXPECT_EQ(unknown.peak_bytes, 6 * kGiB);
}

TEST(PeakHistoryTest, HighQuantileIgnoresARareOutlier) {
  absl::StatusOr<std::unique_ptr<PeakHistory>> history =
      PeakHistory::Open("", PredictionDefaults{2 * kGiB, absl::Seconds(60), 0.95, 0.0});
  ASSERT_TRUE(history.ok());
  for (int i = 0; i < 99; ++i) (*history)->Record("u", "f", (500 + i) * kMiB, absl::Seconds(1));
  (*history)->Record("u", "f", 9 * kGiB, absl::Seconds(1));
  EXPECT_EQ((*history)->Predict("u", "f", 1).peak_bytes, 594 * kMiB) << "the 95th of 100";
}

TEST(PeakHistoryTest, SurvivesReopeningAndSkipsATornLine) {
  std::string path = testing::NewTempDir("history-") + "/history.tsv";
  {
    absl::StatusOr<std::unique_ptr<PeakHistory>> history = PeakHistory::Open(path, {});
    ASSERT_TRUE(history.ok());
    (*history)->Record("unit-a", "family-1", 700 * kMiB, absl::Seconds(12));
  }
  absl::StatusOr<std::string> content = ReadFile(path);
  ASSERT_TRUE(content.ok());
  ASSERT_TRUE(WriteFileAtomically(path, *content + "unit-b\tfamily-1\t12").ok());  // torn
  absl::StatusOr<std::unique_ptr<PeakHistory>> reopened = PeakHistory::Open(path, {});
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->samples(), 1u);
  UnitDemand demand = (*reopened)->Predict("unit-a", "family-1", 1);
  EXPECT_EQ(demand.source, "history");
  EXPECT_EQ(demand.peak_bytes, 735 * kMiB) << "700 MiB measured, plus the 5% margin";
}

TEST(PeakHistoryTest, ALearntRunPredictsAtOnceAndReachesTheFileWhenWritten) {
  std::string path = testing::NewTempDir("history-") + "/history.tsv";
  absl::StatusOr<std::unique_ptr<PeakHistory>> history = PeakHistory::Open(path, {});
  ASSERT_TRUE(history.ok());
  (*history)->Learn("unit-a", "family-1", 700 * kMiB, absl::Seconds(12));
  (*history)->Learn("unit-b", "family-1", 900 * kMiB, absl::Seconds(14));
  EXPECT_EQ((*history)->Predict("unit-a", "family-1", 1).source, "history");
  absl::StatusOr<std::string> before = ReadFile(path);
  EXPECT_TRUE(!before.ok() || before->empty()) << "written before WritePending: " << *before;
  (*history)->WritePending();
  (*history)->WritePending();  // nothing more to write
  absl::StatusOr<std::unique_ptr<PeakHistory>> reopened = PeakHistory::Open(path, {});
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->samples(), 2u) << "each run once, in the order learnt";
  EXPECT_EQ((*reopened)->Predict("unit-b", "family-1", 1).peak_bytes, 945 * kMiB);
}

TEST(UnitKeysTest, IdentityIgnoresNothingButFamilyIgnoresTheSource) {
  v1::CompileUnit a;
  for (const char* arg : {"-O3", "-c", "a.cu", "-o", "a.o"}) a.add_arguments(arg);
  auto* input = a.add_inputs();
  input->set_path("a.cu");
  input->mutable_digest()->set_hash(std::string(64, 'a'));
  v1::CompileUnit b = a;
  b.set_arguments(2, "b.cu");
  b.set_arguments(4, "b.o");
  b.mutable_inputs(0)->set_path("b.cu");
  EXPECT_NE(UnitIdentity("tc", a), UnitIdentity("tc", b));
  EXPECT_EQ(UnitFamily("tc", a, "set:x"), UnitFamily("tc", b, "set:x"));
  EXPECT_NE(UnitFamily("tc", a, "set:x"), UnitFamily("tc", a, "set:y"));
  EXPECT_NE(UnitIdentity("tc", a), UnitIdentity("other-toolchain", a));
  v1::CompileUnit edited = a;
  edited.mutable_inputs(0)->mutable_digest()->set_hash(std::string(64, 'b'));
  EXPECT_NE(UnitIdentity("tc", a), UnitIdentity("tc", edited)) << "the source's content counts";
}

TEST(UnitKeysTest, ClosureFamilyIsTheHeadersAndFlagsWhereverTheSourceIs) {
  auto unit = [](const std::string& source, const std::string& root,
                 std::vector<std::string> flags) {
    v1::CompileUnit unit;
    flags.insert(flags.end(), {"-c", source, "-o", source + ".o"});
    for (const std::string& arg : flags) unit.add_arguments(arg);
    if (!root.empty()) unit.mutable_input_root()->set_hash(root);
    return unit;
  };
  auto closure = [](const v1::CompileUnit& unit) {
    absl::StatusOr<NvccCommand> command =
        ParseNvccCommand({unit.arguments().begin(), unit.arguments().end()});
    EXPECT_TRUE(command.ok()) << command.status();
    return ClosureFamily("tc", *command, unit);
  };
  const std::string fwd(64, 'f'), bwd(64, 'b');
  v1::CompileUnit a = unit("src/flash_fwd_hdim64.cu", fwd, {"-O3"});
  EXPECT_FALSE(closure(a).empty());
  EXPECT_EQ(closure(a), closure(unit("other/flash_fwd_hdim128.cu", fwd, {"-O3"})))
      << "the same headers and flags, another source in another folder";
  EXPECT_NE(closure(a), closure(unit("src/flash_bwd_hdim64.cu", bwd, {"-O3"})))
      << "other headers in the same folder";
  EXPECT_NE(closure(a), closure(unit("src/flash_fwd_hdim64.cu", fwd, {"-O2"})));
  absl::StatusOr<NvccCommand> command = ParseNvccCommand({"-O3", "-c", "a.cu", "-o", "a.o"});
  ASSERT_TRUE(command.ok());
  EXPECT_NE(ClosureFamily("tc", *command, a), ClosureFamily("other-toolchain", *command, a));
  EXPECT_EQ(closure(unit("src/a.cu", "", {"-O3"})), "") << "no input tree, no closure family";
  EXPECT_NE(closure(a), UnitFamily("tc", *command, "")) << "not a family key";
}

TEST(PeakHistoryTest, UnitsWithTheSameHeadersPredictBeforeTheirFolder) {
  absl::StatusOr<std::unique_ptr<PeakHistory>> history =
      PeakHistory::Open("", PredictionDefaults{2 * kGiB, absl::Seconds(60), 0.95, 0.0});
  ASSERT_TRUE(history.ok());
  // A folder family of forward and backward kernels; only the backward
  // ones share their closure family "bwd".
  (*history)->Record("fwd-64", "folder", 3 * kGiB, absl::Seconds(100), 1, "fwd");
  (*history)->Record("bwd-64", "folder", 5 * kGiB, absl::Seconds(140), 1, "bwd");
  UnitDemand fwd = (*history)->Predict("fwd-128", "folder", 1, 1, "fwd");
  EXPECT_EQ(fwd.source, "same closure");
  EXPECT_EQ(fwd.basis, PredictionBasis::kSameClosure);
  EXPECT_EQ(fwd.peak_bytes, 3 * kGiB);
  EXPECT_EQ(fwd.wall, absl::Seconds(100));
  UnitDemand two = (*history)->Predict("fwd-pair", "folder", 1, 2, "fwd");
  EXPECT_EQ(two.peak_bytes, 6 * kGiB) << "per instantiation, times two";
  UnitDemand other = (*history)->Predict("split-64", "folder", 1, 1, "split");
  EXPECT_EQ(other.source, "similar units") << "a closure never measured: the folder's";
  EXPECT_EQ(other.basis, PredictionBasis::kSimilarUnits);
  EXPECT_EQ(other.peak_bytes, 5 * kGiB);
  EXPECT_EQ((*history)->Predict("fwd-64", "folder", 1, 1, "fwd").basis,
            PredictionBasis::kOwnHistory);
  EXPECT_EQ((*history)->Predict("x", "elsewhere", 2, 1, "").basis, PredictionBasis::kDefault);
}

// A unit of a family never built learns from other families whose inputs
// were of about its size: a CUTLASS-sized closure from CUTLASS-sized ones,
// not from small kernels; per compilation at once, so a threaded unit of
// two targets at once reserves two of them.
TEST(PeakHistoryTest, AFamilyNeverBuiltPredictsFromClosuresOfAboutItsSize) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  absl::StatusOr<std::unique_ptr<PeakHistory>> history =
      PeakHistory::Open("", PredictionDefaults{2 * kGiB, absl::Seconds(60), 0.95, 0.0});
  ASSERT_TRUE(history.ok());
  // Small kernels (200 KB of headers) and two families of large ones
  // (30 MB and 34 MB), one of them compiling two targets at once.
  (*history)->Record("small-1", "examples", 200 * kMiB, absl::Seconds(5), 1, "small", 200 * 1000,
                     1);
  (*history)->Record("gemm-1", "gemm-folder", 3 * kGiB, absl::Seconds(60), 1, "gemm",
                     30 * 1000 * 1000, 1);
  (*history)->Record("conv-1", "conv-folder", 7 * kGiB, absl::Seconds(90), 1, "conv",
                     34 * 1000 * 1000, 2);
  UnitDemand large = (*history)->Predict("new-1", "new-folder", 1, 1, "new", 32 * 1000 * 1000);
  EXPECT_EQ(large.source, "similar size");
  EXPECT_EQ(large.basis, PredictionBasis::kSimilarSize);
  EXPECT_EQ(large.peak_bytes, 7 * kGiB / 2) << "the dearest per compilation: conv's 3.5 GiB";
  EXPECT_EQ(large.wall, absl::Seconds(90));
  UnitDemand threaded = (*history)->Predict("new-2", "new-folder-2", 2, 1, "new-2", 31'000'000);
  EXPECT_EQ(threaded.peak_bytes, 7 * kGiB);
  UnitDemand grouped = (*history)->Predict("new-3", "new-folder-3", 1, 3, "new-3", 210'000);
  EXPECT_EQ(grouped.source, "similar size");
  EXPECT_EQ(grouped.peak_bytes, 3 * 2 * kGiB)
      << "never below the default: units of other closures may instantiate far more than a "
         "small one near their size (three of it would be 600 MiB)";
  // Nothing within 1.5x: 100 KB and 1 MB, or a size not known.
  for (int64_t bytes : {int64_t{100'000}, int64_t{1'000'000}, int64_t{0}}) {
    UnitDemand cold = (*history)->Predict("lone", "lone-folder", 1, 1, "lone", bytes);
    EXPECT_EQ(cold.basis, PredictionBasis::kDefault) << bytes;
    EXPECT_EQ(cold.peak_bytes, 2 * kGiB) << bytes;
  }
  // Its own family, once measured, comes first.
  (*history)->Record("new-1", "new-folder", 2 * kGiB, absl::Seconds(50), 1, "new", 32'000'000);
  EXPECT_EQ((*history)->Predict("new-4", "new-folder", 1, 1, "new", 32'000'000).basis,
            PredictionBasis::kSameClosure);
}

TEST(PeakHistoryTest, ClosureSizesSurviveReopening) {
  std::string path = testing::NewTempDir("history-") + "/history.tsv";
  {
    absl::StatusOr<std::unique_ptr<PeakHistory>> history = PeakHistory::Open(path, {});
    ASSERT_TRUE(history.ok());
    (*history)->Record("gemm-1", "gemm-folder", 6 * kGiB, absl::Seconds(60), 1, "gemm", 30'000'000,
                       2);
  }
  // A torn line of eight fields and one of seven are skipped.
  {
    std::ofstream(path, std::ios::app) << "torn\tf\t1\t2\t1\tc\tnot-a-number\t1\n"
                                       << "seven\tf\t1\t2\t1\tc\t5\n";
  }
  absl::StatusOr<std::unique_ptr<PeakHistory>> reopened = PeakHistory::Open(path, {});
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->samples(), 1u);
  UnitDemand sized = (*reopened)->Predict("new", "new-folder", 1, 1, "new", 30'000'000);
  EXPECT_EQ(sized.source, "similar size");
  EXPECT_EQ(sized.peak_bytes, (6 * kGiB / 2) + (6 * kGiB / 2) / 20) << "per compilation, margin";
}

TEST(PeakHistoryTest, ClosureFamiliesSurviveReopeningAndOldLinesStillLoad) {
  std::string path = testing::NewTempDir("history-") + "/history.tsv";
  // A line of the release before (five fields) and one of this release.
  ASSERT_TRUE(WriteFileAtomically(path, "old-unit\tfolder\t1073741824\t5000\t1\n").ok());
  {
    absl::StatusOr<std::unique_ptr<PeakHistory>> history = PeakHistory::Open(path, {});
    ASSERT_TRUE(history.ok());
    (*history)->Record("new-unit", "folder", 3 * kGiB, absl::Seconds(12), 1, "closure-1");
  }
  absl::StatusOr<std::unique_ptr<PeakHistory>> reopened = PeakHistory::Open(path, {});
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->samples(), 2u);
  EXPECT_EQ((*reopened)->Predict("old-unit", "folder", 1).source, "history");
  UnitDemand same = (*reopened)->Predict("another", "folder", 1, 1, "closure-1");
  EXPECT_EQ(same.source, "same closure");
  EXPECT_EQ(same.peak_bytes, 3 * kGiB + 3 * kGiB / 20);
}

}  // namespace
}  // namespace distcc_cuda::coordinator

namespace distcc_cuda::coordinator {
namespace {

struct UnitSizeCase {
  const char* name;
  int points;
  int64_t peak_per_instantiation;
  int64_t smallest_usable_cap;
  int total_slots;
  int per_unit;
};

class ChooseInstantiationsPerUnitTest : public ::testing::TestWithParam<UnitSizeCase> {};

TEST_P(ChooseInstantiationsPerUnitTest, KeepsUnitsWithinHalfACapAndTwoPerSlot) {
  const UnitSizeCase& c = GetParam();
  EXPECT_EQ(ChooseInstantiationsPerUnit(c.points, c.peak_per_instantiation, c.smallest_usable_cap,
                                        c.total_slots),
            c.per_unit);
}

INSTANTIATE_TEST_SUITE_P(Table, ChooseInstantiationsPerUnitTest,
                         ::testing::Values(
                             // 96 small instantiations on 4 slots: balance allows 12, memory 40.
                             UnitSizeCase{"BalanceLimits", 96, 200 * kMiB, 16 * kGiB, 4, 12},
                             // Large instantiations: half of 16 GiB holds two of 4 GiB.
                             UnitSizeCase{"MemoryLimits", 96, 4 * kGiB, 16 * kGiB, 4, 2},
                             UnitSizeCase{"NeverBelowOne", 96, 20 * kGiB, 16 * kGiB, 4, 1},
                             UnitSizeCase{"FewPointsManySlots", 8, 100 * kMiB, 16 * kGiB, 32, 1},
                             UnitSizeCase{"NoWorkers", 96, 100 * kMiB, 0, 0, 1},
                             UnitSizeCase{"OnePoint", 1, 100 * kMiB, 16 * kGiB, 1, 1}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(PeakHistoryTest, SimilarUnitsLearnTheCostPerInstantiation) {
  absl::StatusOr<std::unique_ptr<PeakHistory>> history =
      PeakHistory::Open("", PredictionDefaults{2 * kGiB, absl::Seconds(60), 0.95, 0.0});
  ASSERT_TRUE(history.ok());
  (*history)->Record("group-of-4", "family", 800 * kMiB, absl::Seconds(8), 4);
  EXPECT_EQ((*history)->Predict("group-of-4", "family", 1, 4).peak_bytes, 800 * kMiB)
      << "its own history, as measured";
  UnitDemand one = (*history)->Predict("single", "family", 1, 1);
  EXPECT_EQ(one.peak_bytes, 200 * kMiB);
  EXPECT_EQ(one.wall, absl::Seconds(2));
  EXPECT_EQ((*history)->Predict("pair", "family", 1, 2).peak_bytes, 400 * kMiB);
}

TEST(UnitSizeChoicesTest, ChoicesSurviveReopening) {
  std::string path = testing::NewTempDir("unit-sizes-") + "/unit_sizes.tsv";
  {
    absl::StatusOr<std::unique_ptr<UnitSizeChoices>> choices = UnitSizeChoices::Open(path);
    ASSERT_TRUE(choices.ok());
    EXPECT_FALSE((*choices)->Find("set-a").has_value());
    (*choices)->Remember("set-a", 6);
    (*choices)->Remember("set-a", 3);
  }
  absl::StatusOr<std::unique_ptr<UnitSizeChoices>> reopened = UnitSizeChoices::Open(path);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->Find("set-a"), 3) << "the last choice wins";
  // Opening rewrote the file with one line per set.
  absl::StatusOr<std::string> content = ReadFile(path);
  ASSERT_TRUE(content.ok());
  EXPECT_EQ(*content, "set-a\t3\n");
}

// A coordinator that runs for months must not read (or keep) every run ever
// measured: the file is compacted to each unit's latest runs when opened.
TEST(PeakHistoryTest, OpeningCompactsTheFileToEachUnitsLatestRuns) {
  std::string path = testing::NewTempDir("history-") + "/history.tsv";
  {
    absl::StatusOr<std::unique_ptr<PeakHistory>> history = PeakHistory::Open(path, {});
    ASSERT_TRUE(history.ok());
    // 140 runs of unit-a, the first 40 much larger; 2 of unit-b.
    for (int i = 0; i < 140; ++i) {
      (*history)->Record("unit-a", "family-1", (i < 40 ? 4000 : 700) * kMiB, absl::Seconds(12));
    }
    (*history)->Record("unit-b", "family-1", 300 * kMiB, absl::Seconds(3));
    (*history)->Record("unit-b", "family-1", 300 * kMiB, absl::Seconds(3));
  }
  absl::StatusOr<std::string> before = ReadFile(path);
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(WriteFileAtomically(path, *before + "unit-c\tfamily-1\t12").ok());  // torn
  absl::StatusOr<std::unique_ptr<PeakHistory>> reopened =
      PeakHistory::Open(path, PredictionDefaults{2 * kGiB, absl::Seconds(60), 0.95, 0.0});
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->samples(), PeakHistory::kRunsPerIdentity + 2);
  // Only the latest 100 runs of unit-a count: all of them 700 MiB.
  EXPECT_EQ((*reopened)->Predict("unit-a", "family-1", 1).peak_bytes, 700 * kMiB);
  absl::StatusOr<std::string> after = ReadFile(path);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(std::count(after->begin(), after->end(), '\n'),
            static_cast<long>(PeakHistory::kRunsPerIdentity + 2));
  EXPECT_THAT(*after, ::testing::Not(::testing::HasSubstr("unit-c")));
  // A file already compact is left as it is.
  absl::StatusOr<std::unique_ptr<PeakHistory>> again = PeakHistory::Open(path, {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(ReadFile(path).value_or(""), *after);
}

// A unit of a kind with a measured profile (UnitPriors) and nothing of its
// closure or family measured here is predicted from the profile: one
// compilation's cost times those at once, the waves of targets and the
// instantiations, plus the margin; anything measured here of its closure or
// family goes first, and the profile before units of about its size.
TEST(PeakHistoryTest, AMeasuredProfileComesAfterWhatIsMeasuredHereAndBeforeSimilarSizes) {
  absl::StatusOr<std::unique_ptr<PeakHistory>> history =
      PeakHistory::Open("", PredictionDefaults{2 * kGiB, absl::Seconds(60), 0.95, 0.05});
  ASSERT_TRUE(history.ok());
  const PriorCost bwd{6 * kGiB, absl::Seconds(150), "flash_bwd (a profile)"};
  // A unit of 5 targets compiled 4 at once: 4 x the memory, 2 waves.
  UnitDemand threaded = (*history)->Predict("bwd-x5", "folder", 4, 1, "bwd", 0, bwd, 2);
  EXPECT_EQ(threaded.basis, PredictionBasis::kPrior);
  EXPECT_EQ(threaded.source, "measured profile");
  EXPECT_EQ(threaded.peak_bytes, 24 * kGiB + 24 * kGiB / 20);
  EXPECT_EQ(threaded.wall, absl::Seconds(300));
  // A similar size knows less than the profile.
  (*history)->Record("other", "elsewhere", 9 * kGiB, absl::Seconds(10), 1, "other-closure",
                     1'000'000);
  EXPECT_EQ((*history)->Predict("bwd-1", "folder", 1, 1, "bwd", 1'000'000, bwd).basis,
            PredictionBasis::kPrior);
  EXPECT_EQ((*history)->Predict("bwd-1", "folder", 1, 1, "bwd", 1'000'000).basis,
            PredictionBasis::kSimilarSize);
  // Its family's runs here know more.
  (*history)->Record("bwd-0", "folder", 5 * kGiB, absl::Seconds(100), 1, "bwd");
  UnitDemand measured = (*history)->Predict("bwd-1", "folder", 1, 1, "bwd", 0, bwd);
  EXPECT_EQ(measured.basis, PredictionBasis::kSameClosure);
  EXPECT_EQ(measured.peak_bytes, 5 * kGiB + 5 * kGiB / 20);
}

// A folder's forward kernels ran; a backward kernel of the same folder (its
// family), of another closure, keeps its own kind's profile: the forward
// kernels' 3 GiB would have had it killed at 6 (the order ninja or a scan
// sends units in decides which ran first).
TEST(PeakHistoryTest, AProfileComesBeforeTheRunsOfItsFoldersOtherKinds) {
  absl::StatusOr<std::unique_ptr<PeakHistory>> history =
      PeakHistory::Open("", PredictionDefaults{2 * kGiB, absl::Seconds(60), 0.95, 0.0});
  ASSERT_TRUE(history.ok());
  (*history)->Record("fwd-64", "folder", 3 * kGiB, absl::Seconds(100), 1, "fwd");
  const PriorCost bwd{6 * kGiB, absl::Seconds(150), "flash_bwd (a profile)"};
  UnitDemand demand = (*history)->Predict("bwd-64", "folder", 1, 1, "bwd", 0, bwd);
  EXPECT_EQ(demand.basis, PredictionBasis::kPrior);
  EXPECT_EQ(demand.peak_bytes, 6 * kGiB);
}

// flash-attention's bench stub (471 MiB) and flash_api.cpp (1.9 GiB, all
// of torch's headers) share a folder and flags: the stub's run must not
// predict flash_api.cpp below the default. A unit with no closure known
// (no input tree) still takes its family's figure as it is.
TEST(PeakHistoryTest, AFamilysRunNeverPredictsAnotherClosureBelowTheDefault) {
  absl::StatusOr<std::unique_ptr<PeakHistory>> history =
      PeakHistory::Open("", PredictionDefaults{2 * kGiB, absl::Seconds(60), 0.95, 0.0});
  ASSERT_TRUE(history.ok());
  (*history)->Record("stubs", "folder", 471 * kMiB, absl::Seconds(4), 1, "stub-headers");
  UnitDemand api = (*history)->Predict("flash_api", "folder", 1, 1, "torch-headers");
  EXPECT_EQ(api.basis, PredictionBasis::kSimilarUnits);
  EXPECT_EQ(api.peak_bytes, 2 * kGiB);
  EXPECT_EQ(api.wall, absl::Seconds(4));
  EXPECT_EQ((*history)->Predict("flash_api", "folder", 2, 3, "torch-headers").peak_bytes, 12 * kGiB)
      << "the default of 2 compilations at once, 3 instantiations";
  EXPECT_EQ((*history)->Predict("no-tree", "folder", 1).peak_bytes, 471 * kMiB);
}

}  // namespace
}  // namespace distcc_cuda::coordinator
