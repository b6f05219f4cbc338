// SPDX-License-Identifier: Apache-2.0
// A compile unit as a REAPI Action (unit_action.h): the memory property an
// engine schedules by, and the Command, input root and blobs of a unit.
#include "common/reapi/unit_action.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/store/digest.h"

namespace distcc_cuda {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(MemoryPropertyTest, NameAloneCountsBytes) {
  absl::StatusOr<MemoryProperty> property = ParseMemoryProperty("min-mem");
  ASSERT_TRUE(property.ok()) << property.status();
  EXPECT_EQ(property->name, "min-mem");
  EXPECT_EQ(property->unit_bytes, 1);
}

TEST(MemoryPropertyTest, EachUnit) {
  const std::pair<const char*, int64_t> cases[] = {
      {"memory:B", 1},
      {"memory_kb:KiB", int64_t{1} << 10},
      {"memory:MiB", int64_t{1} << 20},
      {"memory:GiB", int64_t{1} << 30},
      {"memory:KB", 1000},
      {"memory:kB", 1000},
      {"memory:MB", 1000 * 1000},
      {"memory:GB", 1000 * 1000 * 1000},
  };
  for (const auto& [text, unit_bytes] : cases) {
    absl::StatusOr<MemoryProperty> property = ParseMemoryProperty(text);
    ASSERT_TRUE(property.ok()) << text << ": " << property.status();
    EXPECT_EQ(property->name, std::string(text).substr(0, std::string(text).find(':'))) << text;
    EXPECT_EQ(property->unit_bytes, unit_bytes) << text;
  }
}

TEST(MemoryPropertyTest, RefusesOtherUnitsSayingWhichAreTaken) {
  for (const char* text :
       {"memory:TB", "memory:kib", "memory:", "memory:MiB:x", "memory: MiB", "memory:1024"}) {
    absl::StatusOr<MemoryProperty> property = ParseMemoryProperty(text);
    ASSERT_FALSE(property.ok()) << "'" << text << "' was taken";
    EXPECT_EQ(property.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(property.status().message(), HasSubstr("--remote-memory-property")) << text;
    EXPECT_THAT(property.status().message(), HasSubstr("B, KiB, MiB, GiB")) << text;
  }
}

TEST(MemoryPropertyTest, EmptyNameTurnsThePropertyOff) {
  absl::StatusOr<MemoryProperty> property = ParseMemoryProperty("");
  ASSERT_TRUE(property.ok()) << property.status();
  EXPECT_EQ(property->name, "");
}

TEST(MemoryPropertyTest, ValueIsWholeUnitsRoundedUp) {
  const MemoryProperty bytes{"memory", 1};
  const MemoryProperty kib{"memory_kb", 1024};
  const MemoryProperty gib{"mem", int64_t{1} << 30};
  const MemoryProperty mb{"mem", 1000 * 1000};
  EXPECT_EQ(MemoryPropertyValue(kib, 1025), "2");
  EXPECT_EQ(MemoryPropertyValue(kib, 1024), "1");
  EXPECT_EQ(MemoryPropertyValue(kib, 1), "1");
  EXPECT_EQ(MemoryPropertyValue(kib, 0), "0");
  EXPECT_EQ(MemoryPropertyValue(kib, -5), "0");
  EXPECT_EQ(MemoryPropertyValue(bytes, 0), "0");
  // Up to the next of 1, 2, 3, 4, 6, 8, 12, 16, 24, ...
  EXPECT_EQ(MemoryPropertyValue(bytes, 7), "8");
  EXPECT_EQ(MemoryPropertyValue(bytes, 3), "3");
  EXPECT_EQ(MemoryPropertyValue(bytes, 5), "6");
  EXPECT_EQ(MemoryPropertyValue(bytes, 13), "16");
  EXPECT_EQ(MemoryPropertyValue(bytes, 17), "24");
  EXPECT_EQ(MemoryPropertyValue(bytes, 203 << 20), absl::StrCat(256 << 20));
  EXPECT_EQ(MemoryPropertyValue(bytes, 199 << 20), absl::StrCat(256 << 20));
  EXPECT_EQ(MemoryPropertyValue(gib, (int64_t{8} << 30) + 1), "12");
  EXPECT_EQ(MemoryPropertyValue(gib, int64_t{8} << 30), "8");
  EXPECT_EQ(MemoryPropertyValue(mb, 1500 * 1000), "2");
  EXPECT_EQ(MemoryPropertyValue(mb, int64_t{1} << 40), "1572864");
  // A unit of zero bytes (never parsed, but a struct may be built so) counts bytes.
  EXPECT_EQ(MemoryPropertyValue(MemoryProperty{"m", 0}, 3), "3");
}

// The values a lookup tries: every step between two sizes, each once,
// smallest first, at most as many as asked.
TEST(MemoryPropertyTest, ValuesAreTheStepsBetweenTwoSizes) {
  const MemoryProperty gib{"memory", int64_t{1} << 30};
  EXPECT_THAT(MemoryPropertyValues(gib, int64_t{1} << 30, int64_t{16} << 30, 100),
              ::testing::ElementsAre("1", "2", "3", "4", "6", "8", "12", "16"));
  // Each end rounded as MemoryPropertyValue rounds it.
  EXPECT_THAT(MemoryPropertyValues(gib, (int64_t{2} << 30) + 1, (int64_t{7} << 30), 100),
              ::testing::ElementsAre("3", "4", "6", "8"));
  EXPECT_THAT(MemoryPropertyValues(gib, int64_t{1} << 30, int64_t{16} << 30, 3),
              ::testing::ElementsAre("1", "2", "3"));
  const MemoryProperty bytes{"memory", 1};
  EXPECT_THAT(MemoryPropertyValues(bytes, 600 << 20, int64_t{1} << 30, 100),
              ::testing::ElementsAre(absl::StrCat(768 << 20), absl::StrCat(int64_t{1} << 30)));
  // A value from either end alone; nothing the wrong way round.
  EXPECT_THAT(MemoryPropertyValues(gib, int64_t{5} << 30, int64_t{5} << 30, 100),
              ::testing::ElementsAre("6"));
  EXPECT_THAT(MemoryPropertyValues(gib, int64_t{8} << 30, int64_t{1} << 30, 100),
              ::testing::IsEmpty());
  EXPECT_THAT(MemoryPropertyValues(gib, 0, 0, 100), ::testing::ElementsAre("0"));
  for (const std::string& value :
       MemoryPropertyValues(bytes, 1, std::numeric_limits<int64_t>::max() / 2, 200)) {
    EXPECT_EQ(MemoryPropertyValue(bytes, std::stoll(value)), value);
  }
}

v1::InputFile* AddInput(v1::CompileUnit& unit, const std::string& path, const std::string& bytes,
                        bool executable = false) {
  v1::InputFile* input = unit.add_inputs();
  input->set_path(path);
  *input->mutable_digest() = ToProto(DigestOf(bytes));
  input->set_is_executable(executable);
  return input;
}

// Where the test's "store" keeps a file's bytes.
std::string StorePath(const Digest& digest) { return "/store/" + digest.hash; }

class UnitActionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unit_.set_name("kernel");
    unit_.add_arguments("-c");
    unit_.add_arguments("k.cu");
    unit_.add_arguments("-o");
    unit_.add_arguments("out/k.o");
    unit_.add_output_paths("out/k.o");
    unit_.set_working_directory("src");
    AddInput(unit_, "a/b.h", "b header");
    AddInput(unit_, "a/c/d.h", "d tool", /*executable=*/true);
    AddInput(unit_, "k.cu", "generated kernel")->set_content("generated kernel");
    settings_.compiler = "/usr/local/cuda/bin/nvcc";
    settings_.platform = {{"toolchain", "cuda-12.4"}, {"OSFamily", "linux"}, {"memory", "2048"}};
    settings_.timeout = absl::Minutes(5);
  }

  absl::StatusOr<UnitAction> Make(const v1::CompileUnit& unit) {
    return ActionOfUnit(unit, settings_, [this](const Digest& digest) {
      ++path_calls_;
      return StorePath(digest);
    });
  }

  // The blobs by digest, each checked to be named by its digest.
  static std::map<Digest, BlobSource> BlobsOf(const UnitAction& action) {
    std::map<Digest, BlobSource> blobs;
    for (const BlobSource& blob : action.blobs) {
      if (blob.path.empty()) {
        EXPECT_EQ(DigestOf(blob.bytes), blob.digest) << blob.digest.ToString();
      }
      blobs[blob.digest] = blob;
    }
    return blobs;
  }

  // The message `digest` names among `blobs`, parsed.
  template <typename Message>
  static Message Parsed(const std::map<Digest, BlobSource>& blobs, const reapi::Digest& digest) {
    Message message;
    auto found = blobs.find(FromReapi(digest));
    EXPECT_NE(found, blobs.end()) << "no blob " << digest.hash() << "/" << digest.size_bytes();
    if (found == blobs.end()) return message;
    EXPECT_TRUE(found->second.path.empty()) << "a message blob read from a file";
    EXPECT_TRUE(message.ParseFromString(found->second.bytes)) << digest.hash();
    return message;
  }

  v1::CompileUnit unit_;
  ActionSettings settings_;
  int path_calls_ = 0;
};

TEST_F(UnitActionTest, CommandIsCompilerThenArgumentsWithSortedPlatform) {
  absl::StatusOr<UnitAction> made = Make(unit_);
  ASSERT_TRUE(made.ok()) << made.status();
  std::map<Digest, BlobSource> blobs = BlobsOf(*made);
  auto command = Parsed<reapi::Command>(blobs, made->action.command_digest());
  EXPECT_THAT(command.arguments(),
              ElementsAre("/usr/local/cuda/bin/nvcc", "-c", "k.cu", "-o", "out/k.o"));
  EXPECT_THAT(command.output_files(), ElementsAre("out/k.o"));
  EXPECT_EQ(command.working_directory(), "src");
  ASSERT_EQ(command.environment_variables_size(), 1);
  EXPECT_EQ(command.environment_variables(0).name(), "PATH");
  EXPECT_THAT(command.environment_variables(0).value(), HasSubstr("/usr/bin"));
  std::vector<std::pair<std::string, std::string>> platform;
  for (const auto& property : command.platform().properties()) {
    platform.emplace_back(property.name(), property.value());
  }
  // Sorted by name, bytewise: upper case first.
  EXPECT_THAT(platform, ElementsAre(Pair("OSFamily", "linux"), Pair("memory", "2048"),
                                    Pair("toolchain", "cuda-12.4")));
  // The Action carries the same platform (REAPI 2.2), and the timeout.
  EXPECT_EQ(made->action.platform().SerializeAsString(), command.platform().SerializeAsString());
  EXPECT_EQ(made->action.timeout().seconds(), 300);
  EXPECT_FALSE(made->action.do_not_cache());
}

TEST_F(UnitActionTest, InputRootHoldsTheFilesInSortedFolders) {
  absl::StatusOr<UnitAction> made = Make(unit_);
  ASSERT_TRUE(made.ok()) << made.status();
  std::map<Digest, BlobSource> blobs = BlobsOf(*made);
  auto root = Parsed<reapi::Directory>(blobs, made->action.input_root_digest());
  ASSERT_EQ(root.files_size(), 1);
  EXPECT_EQ(root.files(0).name(), "k.cu");
  EXPECT_EQ(FromReapi(root.files(0).digest()), DigestOf("generated kernel"));
  EXPECT_FALSE(root.files(0).is_executable());
  ASSERT_EQ(root.directories_size(), 1);
  EXPECT_EQ(root.directories(0).name(), "a");
  EXPECT_EQ(root.symlinks_size(), 0);

  auto a = Parsed<reapi::Directory>(blobs, root.directories(0).digest());
  ASSERT_EQ(a.files_size(), 1);
  EXPECT_EQ(a.files(0).name(), "b.h");
  EXPECT_EQ(FromReapi(a.files(0).digest()), DigestOf("b header"));
  EXPECT_FALSE(a.files(0).is_executable());
  ASSERT_EQ(a.directories_size(), 1);
  EXPECT_EQ(a.directories(0).name(), "c");

  auto c = Parsed<reapi::Directory>(blobs, a.directories(0).digest());
  ASSERT_EQ(c.files_size(), 1);
  EXPECT_EQ(c.files(0).name(), "d.h");
  EXPECT_EQ(FromReapi(c.files(0).digest()), DigestOf("d tool"));
  EXPECT_TRUE(c.files(0).is_executable());
  EXPECT_EQ(c.directories_size(), 0);
}

TEST_F(UnitActionTest, NamesInAFolderAreSortedWhateverTheInputOrder) {
  v1::CompileUnit unit;
  AddInput(unit, "z.h", "z");
  AddInput(unit, "m/x.h", "x");
  AddInput(unit, "B.h", "B");
  AddInput(unit, "a.h", "a");
  AddInput(unit, "b/y.h", "y");
  AddInput(unit, "A/w.h", "w");
  absl::StatusOr<UnitAction> made = Make(unit);
  ASSERT_TRUE(made.ok()) << made.status();
  auto root = Parsed<reapi::Directory>(BlobsOf(*made), made->action.input_root_digest());
  std::vector<std::string> files, folders;
  for (const auto& file : root.files()) files.push_back(file.name());
  for (const auto& folder : root.directories()) folders.push_back(folder.name());
  EXPECT_THAT(files, ElementsAre("B.h", "a.h", "z.h"));
  EXPECT_THAT(folders, ElementsAre("A", "b", "m"));
}

TEST_F(UnitActionTest, EveryBlobIsThereAndFilesComeFromStoreOrContent) {
  absl::StatusOr<UnitAction> made = Make(unit_);
  ASSERT_TRUE(made.ok()) << made.status();
  std::map<Digest, BlobSource> blobs = BlobsOf(*made);
  // The Action itself, hashing to action_digest.
  ASSERT_TRUE(blobs.count(FromReapi(made->action_digest)));
  EXPECT_EQ(blobs[FromReapi(made->action_digest)].bytes, made->action.SerializeAsString());
  EXPECT_EQ(FromReapi(made->action_digest), DigestOf(made->action.SerializeAsString()));
  // The Command and three folders (root, a, a/c) are checked by Parsed.
  auto root = Parsed<reapi::Directory>(blobs, made->action.input_root_digest());
  auto a = Parsed<reapi::Directory>(blobs, root.directories(0).digest());
  Parsed<reapi::Directory>(blobs, a.directories(0).digest());
  Parsed<reapi::Command>(blobs, made->action.command_digest());
  // The generated source travels as bytes; the others are read from the store.
  const Digest kernel = DigestOf("generated kernel");
  ASSERT_TRUE(blobs.count(kernel));
  EXPECT_EQ(blobs[kernel].path, "");
  EXPECT_EQ(blobs[kernel].bytes, "generated kernel");
  for (const char* bytes : {"b header", "d tool"}) {
    const Digest digest = DigestOf(bytes);
    ASSERT_TRUE(blobs.count(digest)) << bytes;
    EXPECT_EQ(blobs[digest].path, StorePath(digest)) << bytes;
    EXPECT_EQ(blobs[digest].bytes, "") << bytes;
  }
  EXPECT_EQ(path_calls_, 2);  // not asked for the file that carries its bytes
  // 3 files, 3 folders, a Command and an Action.
  EXPECT_EQ(blobs.size(), 8u);
}

TEST_F(UnitActionTest, SameBytesAtTwoPathsAreOneBlob) {
  AddInput(unit_, "copy/b.h", "b header");
  absl::StatusOr<UnitAction> made = Make(unit_);
  ASSERT_TRUE(made.ok()) << made.status();
  int files_with_bytes = 0;
  for (const BlobSource& blob : made->blobs)
    files_with_bytes += blob.digest == DigestOf("b header");
  EXPECT_EQ(files_with_bytes, 1);
}

TEST_F(UnitActionTest, SameUnitSameActionDigest) {
  absl::StatusOr<UnitAction> first = Make(unit_);
  absl::StatusOr<UnitAction> second = Make(v1::CompileUnit(unit_));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(FromReapi(first->action_digest), FromReapi(second->action_digest));

  // The same inputs listed in another order: the same input root.
  v1::CompileUnit reordered = unit_;
  reordered.mutable_inputs()->SwapElements(0, 2);
  absl::StatusOr<UnitAction> third = Make(reordered);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(FromReapi(first->action_digest), FromReapi(third->action_digest));

  // The platform given in another order: the same Action.
  std::swap(settings_.platform[0], settings_.platform[2]);
  absl::StatusOr<UnitAction> fourth = Make(unit_);
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  EXPECT_EQ(FromReapi(first->action_digest), FromReapi(fourth->action_digest));

  // Another argument: another Action.
  v1::CompileUnit changed = unit_;
  changed.add_arguments("-O3");
  absl::StatusOr<UnitAction> fifth = Make(changed);
  ASSERT_TRUE(fifth.ok()) << fifth.status();
  EXPECT_NE(FromReapi(first->action_digest), FromReapi(fifth->action_digest));
}

// The same compile at another memory value is another Action, whose digest
// is known without building it again.
TEST_F(UnitActionTest, TheDigestAtAnotherMemoryValueIsThatActionsDigest) {
  absl::StatusOr<UnitAction> at_2048 = Make(unit_);
  ASSERT_TRUE(at_2048.ok()) << at_2048.status();
  settings_.platform[2].second = "3072";
  absl::StatusOr<UnitAction> at_3072 = Make(unit_);
  ASSERT_TRUE(at_3072.ok()) << at_3072.status();
  ASSERT_NE(FromReapi(at_2048->action_digest), FromReapi(at_3072->action_digest));
  EXPECT_EQ(FromReapi(ActionDigestWithProperty(*at_2048, "memory", "3072")),
            FromReapi(at_3072->action_digest));
  EXPECT_EQ(FromReapi(ActionDigestWithProperty(*at_3072, "memory", "2048")),
            FromReapi(at_2048->action_digest));
  EXPECT_EQ(FromReapi(ActionDigestWithProperty(*at_2048, "memory", "2048")),
            FromReapi(at_2048->action_digest));
  // A property the Action does not have changes nothing.
  EXPECT_EQ(FromReapi(ActionDigestWithProperty(*at_2048, "gpu", "1")),
            FromReapi(at_2048->action_digest));
}

TEST_F(UnitActionTest, NoTimeoutLeavesItToTheEngine) {
  settings_.timeout = absl::ZeroDuration();
  absl::StatusOr<UnitAction> made = Make(unit_);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_FALSE(made->action.has_timeout());
}

TEST_F(UnitActionTest, RefusesPathsThatAreNotCleanAndRelative) {
  for (const char* path : {"../x", "a//b", "/abs/x.h", "./x", "a/./b", "a/../b", "a/", ""}) {
    v1::CompileUnit unit = unit_;
    AddInput(unit, path, "x");
    absl::StatusOr<UnitAction> made = Make(unit);
    ASSERT_FALSE(made.ok()) << "'" << path << "' was taken";
    EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(made.status().message(), HasSubstr("not a clean relative path")) << path;
  }
}

TEST_F(UnitActionTest, RefusesANameThatIsBothFileAndFolder) {
  // The file first, then a folder of that name, and the other way round.
  for (const auto& [first, second] : {std::pair{"x", "x/y.h"}, std::pair{"x/y.h", "x"},
                                      std::pair{"p/q/r.h", "p/q"}, std::pair{"p/q", "p/q/r.h"}}) {
    v1::CompileUnit unit;
    AddInput(unit, first, "1");
    AddInput(unit, second, "2");
    absl::StatusOr<UnitAction> made = Make(unit);
    ASSERT_FALSE(made.ok()) << first << " and " << second << " were taken";
    EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(made.status().message(), HasSubstr("both a file and a folder"));
  }
}

TEST_F(UnitActionTest, RefusesAPathListedTwice) {
  v1::CompileUnit unit;
  AddInput(unit, "a/b.h", "1");
  AddInput(unit, "a/b.h", "2");
  absl::StatusOr<UnitAction> made = Make(unit);
  ASSERT_FALSE(made.ok());
  EXPECT_THAT(made.status().message(), HasSubstr("'a/b.h' is listed twice"));
}

}  // namespace
}  // namespace distcc_cuda
