// SPDX-License-Identifier: Apache-2.0
// A REAPI Action as a compile unit (reapi_action.h) and the ByteStream
// resource names of the REAPI content store (reapi_cas_service.h), against a
// real store.
#include "coordinator/reapi/reapi_action.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "coordinator/planning/result_cache.h"
#include "coordinator/reapi/reapi_cas_service.h"
#include "distcc_cuda/v1/cas.pb.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A store of its own for each test, and the REAPI messages put in it.
class ReapiStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = CasStore::Open(testing::NewTempDir("reapi-") + "/cas");
    ASSERT_TRUE(store.ok()) << store.status();
    cas_ = std::move(*store);
    pin_ = cas_->Pin({});
  }

  // Stores `message` and returns its REAPI digest.
  reapi::Digest Put(const google::protobuf::MessageLite& message) {
    absl::StatusOr<Digest> stored = cas_->PutBytes(message.SerializeAsString());
    EXPECT_TRUE(stored.ok()) << stored.status();
    return stored.ok() ? ToReapi(*stored) : reapi::Digest();
  }
  reapi::Digest PutText(const std::string& text) {
    absl::StatusOr<Digest> stored = cas_->PutBytes(text);
    EXPECT_TRUE(stored.ok()) << stored.status();
    return stored.ok() ? ToReapi(*stored) : reapi::Digest();
  }

  // The store's own Directory blob at `digest`.
  v1::Directory OursAt(const Digest& digest) {
    v1::Directory ours;
    absl::StatusOr<std::string> bytes = cas_->Get(digest);
    EXPECT_TRUE(bytes.ok()) << digest.ToString() << ": " << bytes.status();
    if (bytes.ok()) {
      EXPECT_TRUE(ours.ParseFromString(*bytes)) << digest.ToString();
    }
    return ours;
  }

  std::string BytesAt(const reapi::Digest& digest) {
    absl::StatusOr<std::string> bytes = cas_->Get(FromReapi(digest));
    EXPECT_TRUE(bytes.ok()) << digest.hash() << ": " << bytes.status();
    return bytes.ok() ? *bytes : "";
  }

  static void AddFile(reapi::Directory& folder, const std::string& name,
                      const reapi::Digest& digest, bool executable = false) {
    reapi::FileNode* file = folder.add_files();
    file->set_name(name);
    *file->mutable_digest() = digest;
    file->set_is_executable(executable);
  }
  static void AddFolder(reapi::Directory& folder, const std::string& name,
                        const reapi::Digest& digest) {
    reapi::DirectoryNode* child = folder.add_directories();
    child->set_name(name);
    *child->mutable_digest() = digest;
  }

  // A chain of `below` folders named "d" under a root: the root's digest.
  reapi::Digest Chain(int below) {
    reapi::Digest folder = Put(reapi::Directory());
    for (int i = 0; i < below; ++i) {
      reapi::Directory parent;
      AddFolder(parent, "d", folder);
      folder = Put(parent);
    }
    return folder;
  }

  std::unique_ptr<CasStore> cas_;
  std::unique_ptr<CasPin> pin_;  // what a conversion writes is held here
  BuildLimits limits_;
};

// ---------------------------------------------------------------------------
// ConvertInputRoot

using ReapiConvertInputRootTest = ReapiStoreTest;

TEST_F(ReapiConvertInputRootTest, ATwoLevelTreeBecomesTheStoresOwnWithTheExecutableBit) {
  const reapi::Digest header = PutText("#pragma once\n");
  const reapi::Digest tool = PutText("#!/bin/sh\nexit 0\n");
  const reapi::Digest source = PutText("__global__ void k() {}\n");
  reapi::Directory sub;
  AddFile(sub, "gen.sh", tool, /*executable=*/true);
  AddFile(sub, "k.cuh", header);
  const reapi::Digest sub_digest = Put(sub);
  reapi::Directory root;
  AddFile(root, "k.cu", source);
  AddFolder(root, "include", sub_digest);
  const reapi::Digest root_digest = Put(root);

  absl::StatusOr<Digest> converted = ConvertInputRoot(*cas_, root_digest, limits_, *pin_);
  ASSERT_TRUE(converted.ok()) << converted.status();
  // The executable bit is field 4 in REAPI and 3 in ours: the bytes differ.
  EXPECT_NE(*converted, FromReapi(root_digest));

  const v1::Directory ours_root = OursAt(*converted);
  ASSERT_EQ(ours_root.files_size(), 1);
  EXPECT_EQ(ours_root.files(0).name(), "k.cu");
  EXPECT_EQ(FromProto(ours_root.files(0).digest()), FromReapi(source));
  EXPECT_FALSE(ours_root.files(0).is_executable());
  ASSERT_EQ(ours_root.directories_size(), 1);
  EXPECT_EQ(ours_root.directories(0).name(), "include");
  const Digest ours_sub_digest = FromProto(ours_root.directories(0).digest());
  EXPECT_NE(ours_sub_digest, FromReapi(sub_digest)) << "the sub-folder was converted too";

  const v1::Directory ours_sub = OursAt(ours_sub_digest);
  ASSERT_EQ(ours_sub.files_size(), 2);
  EXPECT_EQ(ours_sub.files(0).name(), "gen.sh");
  EXPECT_EQ(FromProto(ours_sub.files(0).digest()), FromReapi(tool));
  EXPECT_TRUE(ours_sub.files(0).is_executable());
  EXPECT_EQ(ours_sub.files(1).name(), "k.cuh");
  EXPECT_EQ(FromProto(ours_sub.files(1).digest()), FromReapi(header));
  EXPECT_FALSE(ours_sub.files(1).is_executable());
  EXPECT_EQ(ours_sub.directories_size(), 0);

  // Exactly the blobs a client of our own would have made for that tree.
  v1::Directory expected_sub;
  v1::FileNode* gen = expected_sub.add_files();
  gen->set_name("gen.sh");
  *gen->mutable_digest() = ToProto(FromReapi(tool));
  gen->set_is_executable(true);
  v1::FileNode* cuh = expected_sub.add_files();
  cuh->set_name("k.cuh");
  *cuh->mutable_digest() = ToProto(FromReapi(header));
  EXPECT_EQ(ours_sub_digest, DigestOf(expected_sub.SerializeAsString()));
  v1::Directory expected_root;
  v1::FileNode* cu = expected_root.add_files();
  cu->set_name("k.cu");
  *cu->mutable_digest() = ToProto(FromReapi(source));
  v1::DirectoryNode* include = expected_root.add_directories();
  include->set_name("include");
  *include->mutable_digest() = ToProto(DigestOf(expected_sub.SerializeAsString()));
  EXPECT_EQ(*converted, DigestOf(expected_root.SerializeAsString()));
}

// Without an executable file the two encodings agree field for field
// (Directory files 1, directories 2; FileNode and DirectoryNode name 1,
// digest 2; Digest hash 1, size 2), so the store's tree is the very blobs
// the client sent, named by the same root digest.
TEST_F(ReapiConvertInputRootTest, ATreeWithoutExecutablesKeepsItsRootDigest) {
  reapi::Directory sub;
  AddFile(sub, "k.cuh", PutText("#pragma once\n"));
  const reapi::Digest sub_digest = Put(sub);
  reapi::Directory root;
  AddFile(root, "k.cu", PutText("__global__ void k() {}\n"));
  AddFolder(root, "include", sub_digest);
  const reapi::Digest root_digest = Put(root);

  absl::StatusOr<Digest> converted = ConvertInputRoot(*cas_, root_digest, limits_, *pin_);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(*converted, FromReapi(root_digest));
  EXPECT_EQ(FromProto(OursAt(*converted).directories(0).digest()), FromReapi(sub_digest));
}

TEST_F(ReapiConvertInputRootTest, AFolderUsedTwiceIsConvertedOnceAndSharedByBothNames) {
  reapi::Directory shared;
  AddFile(shared, "run.sh", PutText("#!/bin/sh\n"), /*executable=*/true);
  const reapi::Digest shared_digest = Put(shared);
  reapi::Directory root;
  AddFolder(root, "a", shared_digest);
  AddFolder(root, "b", shared_digest);
  const reapi::Digest root_digest = Put(root);

  absl::StatusOr<Digest> converted = ConvertInputRoot(*cas_, root_digest, limits_, *pin_);
  ASSERT_TRUE(converted.ok()) << converted.status();
  const v1::Directory ours = OursAt(*converted);
  ASSERT_EQ(ours.directories_size(), 2);
  EXPECT_EQ(ours.directories(0).name(), "a");
  EXPECT_EQ(ours.directories(1).name(), "b");
  const Digest a = FromProto(ours.directories(0).digest());
  EXPECT_EQ(a, FromProto(ours.directories(1).digest()));
  EXPECT_NE(a, FromReapi(shared_digest)) << "the executable bit makes the converted folder differ";
  const v1::Directory shared_ours = OursAt(a);
  ASSERT_EQ(shared_ours.files_size(), 1);
  EXPECT_EQ(shared_ours.files(0).name(), "run.sh");
  EXPECT_TRUE(shared_ours.files(0).is_executable());
}

TEST_F(ReapiConvertInputRootTest, AMissingSubFolderNamesTheBlobToUpload) {
  reapi::Directory absent;
  AddFile(absent, "k.cuh", PutText("#pragma once\n"));
  const Digest absent_digest = DigestOf(absent.SerializeAsString());  // never stored
  reapi::Directory root;
  AddFolder(root, "include", ToReapi(absent_digest));
  const reapi::Digest root_digest = Put(root);

  absl::StatusOr<Digest> converted = ConvertInputRoot(*cas_, root_digest, limits_, *pin_);
  ASSERT_FALSE(converted.ok());
  EXPECT_EQ(converted.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(NamesMissingBlobs(converted.status())) << converted.status();
  EXPECT_THAT(converted.status().message(),
              HasSubstr(absl::StrCat("blobs/", absent_digest.hash, "/", absent_digest.size_bytes)));
}

TEST_F(ReapiConvertInputRootTest, AMissingRootNamesTheBlobToUpload) {
  const Digest absent = DigestOf("not a stored folder");
  absl::StatusOr<Digest> converted = ConvertInputRoot(*cas_, ToReapi(absent), limits_, *pin_);
  ASSERT_FALSE(converted.ok());
  EXPECT_TRUE(NamesMissingBlobs(converted.status())) << converted.status();
  EXPECT_THAT(converted.status().message(), HasSubstr(absent.BlobSubject()));
}

TEST_F(ReapiConvertInputRootTest, ASymlinkIsRefused) {
  reapi::Directory sub;
  AddFile(sub, "k.cuh", PutText("#pragma once\n"));
  reapi::SymlinkNode* link = sub.add_symlinks();
  link->set_name("k_link.cuh");
  link->set_target("k.cuh");
  reapi::Directory root;
  AddFolder(root, "include", Put(sub));

  absl::StatusOr<Digest> converted = ConvertInputRoot(*cas_, Put(root), limits_, *pin_);
  ASSERT_FALSE(converted.ok());
  EXPECT_EQ(converted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(converted.status().message(), HasSubstr("symlink"));
  EXPECT_THAT(converted.status().message(), HasSubstr("k_link.cuh"));
}

TEST_F(ReapiConvertInputRootTest, ANameThatIsNotOnePathComponentIsRefused) {
  const reapi::Digest blob = PutText("int x;\n");
  for (const std::string& name : std::vector<std::string>{"..", ".", "a/b", ""}) {
    SCOPED_TRACE(absl::StrCat("file name '", name, "'"));
    reapi::Directory root;
    AddFile(root, name, blob);
    absl::StatusOr<Digest> converted = ConvertInputRoot(*cas_, Put(root), limits_, *pin_);
    ASSERT_FALSE(converted.ok());
    EXPECT_EQ(converted.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(converted.status().message(), HasSubstr("not one path component"));
  }
  // The same for a folder's name.
  reapi::Directory root;
  AddFolder(root, "..", Put(reapi::Directory()));
  absl::StatusOr<Digest> converted = ConvertInputRoot(*cas_, Put(root), limits_, *pin_);
  ASSERT_FALSE(converted.ok());
  EXPECT_EQ(converted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(converted.status().message(), HasSubstr("not one path component"));
}

TEST_F(ReapiConvertInputRootTest, ANameTwiceInAFolderIsRefused) {
  const reapi::Digest blob = PutText("int x;\n");
  {
    reapi::Directory root;
    AddFile(root, "k.cu", blob);
    AddFile(root, "k.cu", PutText("int y;\n"));
    absl::StatusOr<Digest> converted = ConvertInputRoot(*cas_, Put(root), limits_, *pin_);
    ASSERT_FALSE(converted.ok());
    EXPECT_EQ(converted.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(converted.status().message(), HasSubstr("'k.cu' twice"));
  }
  {
    // A file and a folder of one name.
    reapi::Directory root;
    AddFile(root, "include", blob);
    AddFolder(root, "include", Put(reapi::Directory()));
    absl::StatusOr<Digest> converted = ConvertInputRoot(*cas_, Put(root), limits_, *pin_);
    ASSERT_FALSE(converted.ok());
    EXPECT_EQ(converted.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(converted.status().message(), HasSubstr("'include' twice"));
  }
}

TEST_F(ReapiConvertInputRootTest, MoreFilesThanAUnitMayHaveAreRefused) {
  BuildLimits limits;
  limits.max_inputs_per_unit = 2;
  reapi::Directory sub;
  AddFile(sub, "b.cuh", PutText("// b\n"));
  reapi::Directory root;
  AddFile(root, "a.cu", PutText("// a\n"));
  AddFolder(root, "include", Put(sub));
  // Two files over the tree: allowed.
  absl::StatusOr<Digest> two = ConvertInputRoot(*cas_, Put(root), limits, *pin_);
  EXPECT_TRUE(two.ok()) << two.status();

  // Three, counted over both folders: refused.
  AddFile(sub, "c.cuh", PutText("// c\n"));
  root.mutable_directories(0)->mutable_digest()->CopyFrom(Put(sub));
  absl::StatusOr<Digest> three = ConvertInputRoot(*cas_, Put(root), limits, *pin_);
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(three.status().message(), HasSubstr("--max-inputs-per-unit"));
  EXPECT_THAT(three.status().message(), HasSubstr("more than 2 files"));
}

TEST_F(ReapiConvertInputRootTest, ATreeTooDeepIsRefused) {
  absl::StatusOr<Digest> deep = ConvertInputRoot(*cas_, Chain(70), limits_, *pin_);
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(deep.status().message(), HasSubstr("64 folders deep"));

  // The bound is the one the planner's tree walk holds a tree to
  // (InputTreeLimits::max_depth): 64 folders below the root pass, 65 do not.
  absl::StatusOr<Digest> at_bound = ConvertInputRoot(*cas_, Chain(64), limits_, *pin_);
  EXPECT_TRUE(at_bound.ok()) << at_bound.status();
  EXPECT_EQ(*at_bound, FromReapi(Chain(64))) << "no executable bit: the same blobs";
  absl::StatusOr<Digest> past = ConvertInputRoot(*cas_, Chain(65), limits_, *pin_);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// ReadMessageBlob

using ReapiReadMessageBlobTest = ReapiStoreTest;

TEST_F(ReapiReadMessageBlobTest, ReadsAStoredMessage) {
  reapi::Command command;
  command.add_arguments("nvcc");
  command.add_output_paths("k.o");
  reapi::Command read;
  ASSERT_TRUE(ReadMessageBlob(*cas_, Put(command), "the command", read).ok());
  EXPECT_THAT(std::vector<std::string>(read.arguments().begin(), read.arguments().end()),
              ElementsAre("nvcc"));
  EXPECT_THAT(std::vector<std::string>(read.output_paths().begin(), read.output_paths().end()),
              ElementsAre("k.o"));
}

TEST_F(ReapiReadMessageBlobTest, AMissingBlobIsNamedForUpload) {
  const Digest absent = DigestOf("an action nobody uploaded");
  reapi::Action action;
  absl::Status status = ReadMessageBlob(*cas_, ToReapi(absent), "the action", action);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(NamesMissingBlobs(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr(absent.BlobSubject()));
  EXPECT_THAT(status.message(), HasSubstr("the action"));
}

TEST_F(ReapiReadMessageBlobTest, BytesThatDoNotParseAreInvalid) {
  // A length-delimited field 1 that claims 127 bytes and has 2.
  const reapi::Digest garbage = PutText(std::string("\x0a\x7f\x41\x42", 4));
  reapi::Action action;
  absl::Status status = ReadMessageBlob(*cas_, garbage, "the action", action);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(NamesMissingBlobs(status));
  EXPECT_THAT(status.message(), HasSubstr("is not a Action message"));
}

TEST_F(ReapiReadMessageBlobTest, AMalformedDigestIsInvalid) {
  reapi::Digest malformed;
  malformed.set_hash("xyz");
  malformed.set_size_bytes(3);
  reapi::Action action;
  absl::Status status = ReadMessageBlob(*cas_, malformed, "the action", action);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(NamesMissingBlobs(status));
  EXPECT_THAT(status.message(), HasSubstr("the digest of the action"));
}

// ---------------------------------------------------------------------------
// ChooseToolchain

v1::ToolchainFingerprint Toolchain(const std::string& release) {
  v1::ToolchainFingerprint toolchain;
  toolchain.set_nvcc_release(release);
  toolchain.set_nvcc_build(absl::StrCat("cuda_", release, ".r", release, "/compiler.1_0"));
  toolchain.set_digest(DigestOf(absl::StrCat("toolchain ", release)).hash);
  return toolchain;
}

reapi::Platform Asking(const std::string& value) {
  reapi::Platform platform;
  reapi::Platform::Property* property = platform.add_properties();
  property->set_name(kToolchainProperty);
  property->set_value(value);
  return platform;
}

TEST(ReapiChooseToolchainTest, NoServedToolchainIsAFailedPrecondition) {
  absl::StatusOr<v1::ToolchainFingerprint> chosen = ChooseToolchain(reapi::Platform(), {});
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(NamesMissingBlobs(chosen.status())) << "an upload does not help";
  EXPECT_THAT(chosen.status().message(), HasSubstr("no distcc-cuda worker"));
}

TEST(ReapiChooseToolchainTest, TheOnlyServedToolchainIsChosenUnasked) {
  const v1::ToolchainFingerprint only = Toolchain("13.0");
  absl::StatusOr<v1::ToolchainFingerprint> chosen =
      ChooseToolchain(reapi::Platform(), {only, only});  // two workers, one toolchain
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->digest(), only.digest());
  EXPECT_EQ(chosen->nvcc_build(), only.nvcc_build());
}

TEST(ReapiChooseToolchainTest, TwoServedAndNoPropertyNamesBothAndTheProperty) {
  const v1::ToolchainFingerprint a = Toolchain("12.8");
  const v1::ToolchainFingerprint b = Toolchain("13.0");
  ASSERT_NE(a.digest(), b.digest());
  absl::StatusOr<v1::ToolchainFingerprint> chosen = ChooseToolchain(reapi::Platform(), {a, b});
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(chosen.status().message(), HasSubstr(a.digest().substr(0, 12)));
  EXPECT_THAT(chosen.status().message(), HasSubstr(b.digest().substr(0, 12)));
  EXPECT_THAT(chosen.status().message(), HasSubstr("'toolchain'"));
  // Another property is not the one asked for.
  reapi::Platform other;
  reapi::Platform::Property* property = other.add_properties();
  property->set_name("OSFamily");
  property->set_value("linux");
  EXPECT_EQ(ChooseToolchain(other, {a, b}).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ReapiChooseToolchainTest, ADigestPrefixOfTwelveDigitsChooses) {
  const v1::ToolchainFingerprint a = Toolchain("12.8");
  const v1::ToolchainFingerprint b = Toolchain("13.0");
  for (const v1::ToolchainFingerprint& wanted : {a, b}) {
    absl::StatusOr<v1::ToolchainFingerprint> chosen =
        ChooseToolchain(Asking(wanted.digest().substr(0, 12)), {a, b});
    ASSERT_TRUE(chosen.ok()) << chosen.status();
    EXPECT_EQ(chosen->digest(), wanted.digest());
  }
  // The whole digest too.
  absl::StatusOr<v1::ToolchainFingerprint> whole = ChooseToolchain(Asking(b.digest()), {a, b});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->digest(), b.digest());
}

TEST(ReapiChooseToolchainTest, AReleaseChooses) {
  const v1::ToolchainFingerprint a = Toolchain("12.8");
  const v1::ToolchainFingerprint b = Toolchain("13.0");
  absl::StatusOr<v1::ToolchainFingerprint> chosen = ChooseToolchain(Asking("13.0"), {a, b});
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->digest(), b.digest());
  chosen = ChooseToolchain(Asking("12.8"), {a, b});
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->digest(), a.digest());
}

TEST(ReapiChooseToolchainTest, APropertyNamingNothingServedIsAFailedPrecondition) {
  const v1::ToolchainFingerprint a = Toolchain("12.8");
  const v1::ToolchainFingerprint b = Toolchain("13.0");
  for (const std::string& value :
       std::vector<std::string>{"11.8", "0123456789ab", std::string(64, '0')}) {
    SCOPED_TRACE(value);
    absl::StatusOr<v1::ToolchainFingerprint> chosen = ChooseToolchain(Asking(value), {a, b});
    ASSERT_FALSE(chosen.ok());
    EXPECT_EQ(chosen.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(chosen.status().message(), HasSubstr(a.digest().substr(0, 12)));
    EXPECT_THAT(chosen.status().message(), HasSubstr(b.digest().substr(0, 12)));
  }
  // With one toolchain served, asking for another is refused too.
  EXPECT_EQ(ChooseToolchain(Asking("11.8"), {a}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ReapiChooseToolchainTest, ADigestPrefixShorterThanTwelveDigitsDoesNotMatch) {
  const v1::ToolchainFingerprint a = Toolchain("12.8");
  const v1::ToolchainFingerprint b = Toolchain("13.0");
  absl::StatusOr<v1::ToolchainFingerprint> chosen =
      ChooseToolchain(Asking(b.digest().substr(0, 11)), {a, b});
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().code(), absl::StatusCode::kFailedPrecondition);
  // Not even when it is the only toolchain served.
  EXPECT_FALSE(ChooseToolchain(Asking(b.digest().substr(0, 11)), {b}).ok());
}

// ---------------------------------------------------------------------------
// UnitBuildOf

reapi::Command CommandOf(const std::vector<std::string>& argv,
                         const std::vector<std::string>& output_files = {},
                         const std::vector<std::string>& output_paths = {}) {
  reapi::Command command;
  for (const std::string& argument : argv) command.add_arguments(argument);
  for (const std::string& output : output_files) command.add_output_files(output);
  for (const std::string& output : output_paths) command.add_output_paths(output);
  return command;
}

std::vector<std::string> ArgumentsOf(const v1::CompileUnit& unit) {
  return {unit.arguments().begin(), unit.arguments().end()};
}

class ReapiUnitBuildOfTest : public ::testing::Test {
 protected:
  const Digest root_ = DigestOf("a root folder");
  const v1::ToolchainFingerprint toolchain_ = Toolchain("13.0");
};

TEST_F(ReapiUnitBuildOfTest, AnNvccCompileIsOneUnit) {
  reapi::Command command = CommandOf({"/usr/local/cuda/bin/nvcc", "-c", "k.cu", "-o", "out/k.o"},
                                     /*output_files=*/{"out/k.o"});
  command.set_working_directory("src");
  absl::StatusOr<v1::SubmitBuildRequest> build = UnitBuildOf(command, root_, toolchain_);
  ASSERT_TRUE(build.ok()) << build.status();
  ASSERT_EQ(build->units_size(), 1);
  const v1::CompileUnit& unit = build->units(0);
  EXPECT_THAT(ArgumentsOf(unit), ElementsAre("-c", "k.cu", "-o", "out/k.o"));
  EXPECT_THAT(std::vector<std::string>(unit.output_paths().begin(), unit.output_paths().end()),
              ElementsAre("out/k.o"));
  EXPECT_EQ(unit.compiler(), v1::UNIT_COMPILER_NVCC);
  EXPECT_EQ(FromProto(unit.input_root()), root_);
  EXPECT_EQ(unit.name(), "k.o");
  EXPECT_EQ(unit.working_directory(), "src");
  EXPECT_EQ(unit.inputs_size(), 0) << "the inputs are the tree's";
  EXPECT_EQ(build->build_name(), "k.o");
  EXPECT_EQ(build->architecture_split(), v1::ARCHITECTURE_SPLIT_NEVER);
  EXPECT_EQ(build->toolchain().digest(), toolchain_.digest());
  EXPECT_EQ(build->toolchain().nvcc_release(), "13.0");
  EXPECT_EQ(build->toolchain().nvcc_build(), toolchain_.nvcc_build());
}

TEST_F(ReapiUnitBuildOfTest, OutputPathsArePreferredOverOutputFiles) {
  absl::StatusOr<v1::SubmitBuildRequest> build =
      UnitBuildOf(CommandOf({"nvcc", "-c", "k.cu", "-o", "out/k.o"}, /*output_files=*/{"old.o"},
                            /*output_paths=*/{"out/k.o"}),
                  root_, toolchain_);
  ASSERT_TRUE(build.ok()) << build.status();
  ASSERT_EQ(build->units_size(), 1);
  EXPECT_THAT(std::vector<std::string>(build->units(0).output_paths().begin(),
                                       build->units(0).output_paths().end()),
              ElementsAre("out/k.o"));
  EXPECT_EQ(build->units(0).name(), "k.o");

  // output_files are ignored where output_paths are set, however many.
  absl::StatusOr<v1::SubmitBuildRequest> two_old = UnitBuildOf(
      CommandOf({"nvcc", "-c", "k.cu", "-o", "k.o"}, {"a.o", "b.o"}, {"k.o"}), root_, toolchain_);
  ASSERT_TRUE(two_old.ok()) << two_old.status();
  EXPECT_EQ(two_old->units(0).output_paths(0), "k.o");
}

TEST_F(ReapiUnitBuildOfTest, TheHostCompilerIsAUnitOfItsOwnCompiler) {
  for (const std::string& argv0 : std::vector<std::string>{"g++", "/usr/bin/g++", "c++"}) {
    SCOPED_TRACE(argv0);
    absl::StatusOr<v1::SubmitBuildRequest> build =
        UnitBuildOf(CommandOf({argv0, "-c", "m.cpp", "-o", "m.o"}, {}, {"m.o"}), root_, toolchain_);
    ASSERT_TRUE(build.ok()) << build.status();
    EXPECT_EQ(build->units(0).compiler(), v1::UNIT_COMPILER_HOST_CXX);
    EXPECT_THAT(ArgumentsOf(build->units(0)), ElementsAre("-c", "m.cpp", "-o", "m.o"));
  }
}

TEST_F(ReapiUnitBuildOfTest, AnotherProgramIsRefusedByName) {
  for (const std::string& argv0 :
       std::vector<std::string>{"/bin/sh", "clang++", "nvcc.sh", "/usr/bin/gcc"}) {
    SCOPED_TRACE(argv0);
    absl::StatusOr<v1::SubmitBuildRequest> build =
        UnitBuildOf(CommandOf({argv0, "-c", "echo hi > out.o"}, {}, {"out.o"}), root_, toolchain_);
    ASSERT_FALSE(build.ok());
    EXPECT_EQ(build.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(build.status().message(), HasSubstr(absl::StrCat("'", argv0, "'")));
  }
}

TEST_F(ReapiUnitBuildOfTest, WhatIsNotOneCompileWithOneOutputIsRefused) {
  {
    absl::StatusOr<v1::SubmitBuildRequest> build =
        UnitBuildOf(CommandOf({}, {}, {"k.o"}), root_, toolchain_);
    ASSERT_FALSE(build.ok());
    EXPECT_EQ(build.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(build.status().message(), HasSubstr("no arguments"));
  }
  {
    absl::StatusOr<v1::SubmitBuildRequest> build = UnitBuildOf(
        CommandOf({"nvcc", "-c", "k.cu", "-o", "k.o"}, {}, {"k.d", "k.o"}), root_, toolchain_);
    ASSERT_FALSE(build.ok());
    EXPECT_EQ(build.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(build.status().message(), HasSubstr("2 outputs"));
  }
  {
    absl::StatusOr<v1::SubmitBuildRequest> build = UnitBuildOf(
        CommandOf({"nvcc", "-c", "k.cu", "-o", "k.o"}, {"k.d", "k.o"}), root_, toolchain_);
    ASSERT_FALSE(build.ok());
    EXPECT_EQ(build.status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    absl::StatusOr<v1::SubmitBuildRequest> build =
        UnitBuildOf(CommandOf({"nvcc", "-c", "k.cu"}), root_, toolchain_);
    ASSERT_FALSE(build.ok());
    EXPECT_EQ(build.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(build.status().message(), HasSubstr("0 outputs"));
  }
  {
    reapi::Command command = CommandOf({"nvcc", "-c", "k.cu", "-o", "out/k.o"}, {"out/k.o"});
    command.add_output_directories("out");
    absl::StatusOr<v1::SubmitBuildRequest> build = UnitBuildOf(command, root_, toolchain_);
    ASSERT_FALSE(build.ok());
    EXPECT_EQ(build.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(build.status().message(), HasSubstr("output directories"));
  }
}

TEST_F(ReapiUnitBuildOfTest, AnOutputWithOddCharactersGivesAUnitNameOfAllowedOnes) {
  absl::StatusOr<v1::SubmitBuildRequest> build = UnitBuildOf(
      CommandOf({"nvcc", "-c", "a.cu", "-o", "out/a b$.o"}, {}, {"out/a b$.o"}), root_, toolchain_);
  ASSERT_TRUE(build.ok()) << build.status();
  const v1::CompileUnit& unit = build->units(0);
  EXPECT_EQ(unit.name(), "a_b_.o");
  for (char c : unit.name()) {
    EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) ||
                std::string("_.+@=-").find(c) != std::string::npos)
        << "'" << c << "' in " << unit.name();
  }
  EXPECT_EQ(unit.output_paths(0), "out/a b$.o") << "the output itself is kept as it is";

  // A name a unit may not start with a dot.
  absl::StatusOr<v1::SubmitBuildRequest> hidden = UnitBuildOf(
      CommandOf({"nvcc", "-c", "a.cu", "-o", "out/.a.o"}, {}, {"out/.a.o"}), root_, toolchain_);
  ASSERT_TRUE(hidden.ok()) << hidden.status();
  EXPECT_EQ(hidden->units(0).name(), "action.a.o");
}

// ---------------------------------------------------------------------------
// ActionResultOf and ExecuteResponseOf

class ReapiActionResultTest : public ReapiStoreTest {
 protected:
  void SetUp() override {
    ReapiStoreTest::SetUp();
    unit_.set_name("k.o");
    object_ = FromReapi(PutText("an object file"));
    deps_ = FromReapi(PutText("k.o: k.cu\n"));
  }

  v1::TaskResult Completed() const {
    v1::TaskResult result;
    result.set_outcome(v1::TASK_COMPLETED);
    result.set_exit_code(0);
    result.set_stdout_text("hello");
    result.set_stderr_text("");
    result.set_worker_name("gpu-node-7");
    v1::OutputFile* object = result.add_outputs();
    object->set_path("out/k.o");
    *object->mutable_digest() = ToProto(object_);
    v1::OutputFile* deps = result.add_outputs();
    deps->set_path("out/k.d");
    *deps->mutable_digest() = ToProto(deps_);
    return result;
  }

  v1::TaskResult Ended(v1::TaskOutcome outcome, const std::string& error) const {
    v1::TaskResult result;
    result.set_outcome(outcome);
    result.set_error_message(error);
    result.set_worker_name("gpu-node-7");
    return result;
  }

  v1::CompileUnit unit_;
  Digest object_;
  Digest deps_;
};

TEST_F(ReapiActionResultTest, ACompletedUnitsOutputsAndTextAreItsActionResult) {
  absl::StatusOr<reapi::ActionResult> result = ActionResultOf(Completed(), unit_, *cas_);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->output_files_size(), 2);
  EXPECT_EQ(result->output_files(0).path(), "out/k.o");
  EXPECT_EQ(FromReapi(result->output_files(0).digest()), object_);
  EXPECT_EQ(result->output_files(1).path(), "out/k.d");
  EXPECT_EQ(FromReapi(result->output_files(1).digest()), deps_);
  EXPECT_EQ(result->exit_code(), 0);
  ASSERT_TRUE(result->has_stdout_digest());
  EXPECT_EQ(BytesAt(result->stdout_digest()), "hello");
  EXPECT_FALSE(result->has_stderr_digest());
  EXPECT_EQ(result->execution_metadata().worker(), "gpu-node-7");
}

TEST_F(ReapiActionResultTest, AFailedCompileKeepsItsExitCodeAndStderr) {
  v1::TaskResult failed = Completed();
  failed.clear_outputs();
  failed.set_exit_code(2);
  failed.set_stdout_text("");
  failed.set_stderr_text("k.cu(3): error: expected a \";\"\n");
  absl::StatusOr<reapi::ActionResult> result = ActionResultOf(failed, unit_, *cas_);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code(), 2);
  EXPECT_EQ(result->output_files_size(), 0);
  EXPECT_FALSE(result->has_stdout_digest());
  ASSERT_TRUE(result->has_stderr_digest());
  EXPECT_EQ(BytesAt(result->stderr_digest()), "k.cu(3): error: expected a \";\"\n");
}

TEST_F(ReapiActionResultTest, AUnitKilledForMemoryExitsAsIfKilled) {
  v1::TaskResult killed = Ended(v1::TASK_KILLED_FOR_MEMORY, "peak 31.9 GiB over the 32 GiB cap");
  killed.set_stderr_text("ptxas info: compiling\n");
  absl::StatusOr<reapi::ActionResult> result = ActionResultOf(killed, unit_, *cas_);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code(), 137);
  ASSERT_TRUE(result->has_stderr_digest());
  const std::string stderr_text = BytesAt(result->stderr_digest());
  EXPECT_THAT(stderr_text, HasSubstr("ptxas info: compiling\n")) << "the compiler's own kept";
  EXPECT_THAT(stderr_text, HasSubstr("killed for memory"));
  EXPECT_THAT(stderr_text, HasSubstr("k.o"));
  EXPECT_THAT(stderr_text, HasSubstr("peak 31.9 GiB over the 32 GiB cap"));

  absl::StatusOr<reapi::ExecuteResponse> response =
      ExecuteResponseOf(killed, unit_, /*cached=*/false, *cas_);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status().code(), 0) << "it ran: the action failed, not the execution";
  EXPECT_EQ(response->message(), "peak 31.9 GiB over the 32 GiB cap");
  ASSERT_TRUE(response->has_result());
  EXPECT_EQ(response->result().exit_code(), 137);
}

TEST_F(ReapiActionResultTest, ACompletedUnitIsAnOkResponseWithItsResult) {
  absl::StatusOr<reapi::ExecuteResponse> response =
      ExecuteResponseOf(Completed(), unit_, /*cached=*/false, *cas_);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status().code(), 0);
  EXPECT_FALSE(response->cached_result());
  EXPECT_EQ(response->message(), "");
  ASSERT_TRUE(response->has_result());
  ASSERT_EQ(response->result().output_files_size(), 2);
  EXPECT_EQ(FromReapi(response->result().output_files(0).digest()), object_);
  EXPECT_EQ(BytesAt(response->result().stdout_digest()), "hello");
}

TEST_F(ReapiActionResultTest, TheCachedFlagPassesToTheResponse) {
  absl::StatusOr<reapi::ExecuteResponse> cached =
      ExecuteResponseOf(Completed(), unit_, /*cached=*/true, *cas_);
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_TRUE(cached->cached_result());
  EXPECT_TRUE(cached->has_result());
}

TEST_F(ReapiActionResultTest, AUnitThatDidNotRunToTheEndIsAnErrorWithoutResult) {
  struct Case {
    v1::TaskOutcome outcome;
    int code;
  };
  for (const Case& c :
       {Case{v1::TASK_REJECTED, 3}, Case{v1::TASK_TIMED_OUT, 4}, Case{v1::TASK_CANCELLED, 1}}) {
    SCOPED_TRACE(v1::TaskOutcome_Name(c.outcome));
    absl::StatusOr<reapi::ExecuteResponse> response =
        ExecuteResponseOf(Ended(c.outcome, "what went wrong"), unit_, /*cached=*/false, *cas_);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->status().code(), c.code);
    EXPECT_THAT(response->status().message(), HasSubstr("k.o"));
    EXPECT_THAT(response->status().message(), HasSubstr("what went wrong"));
    EXPECT_FALSE(response->has_result());
  }
  // Nor one that failed to start: some error, never OK.
  absl::StatusOr<reapi::ExecuteResponse> unstarted = ExecuteResponseOf(
      Ended(v1::TASK_FAILED_TO_START, "inputs not fetched"), unit_, /*cached=*/false, *cas_);
  ASSERT_TRUE(unstarted.ok()) << unstarted.status();
  EXPECT_NE(unstarted->status().code(), 0);
  EXPECT_FALSE(unstarted->has_result());
}

// ---------------------------------------------------------------------------
// BlobOfResource

class ReapiBlobOfResourceTest : public ::testing::Test {
 protected:
  // A real blob's name: "hello world!" is 12 bytes.
  const Digest blob_ = DigestOf("hello world!");
  const std::string hash_ = blob_.hash;
};

TEST_F(ReapiBlobOfResourceTest, ReadFormsNameTheBlob) {
  ASSERT_EQ(blob_.size_bytes, 12);
  for (const std::string& resource : std::vector<std::string>{
           absl::StrCat("blobs/", hash_, "/12"), absl::StrCat("inst/a/blobs/", hash_, "/12")}) {
    SCOPED_TRACE(resource);
    absl::StatusOr<Digest> digest = BlobOfResource(resource, /*upload=*/false);
    ASSERT_TRUE(digest.ok()) << digest.status();
    EXPECT_EQ(*digest, blob_);
  }
}

TEST_F(ReapiBlobOfResourceTest, UploadFormsNameTheBlob) {
  for (const std::string& resource : std::vector<std::string>{
           absl::StrCat("uploads/3f1c2a9e-0b7d-4e55-9a41-5d2f0c8e7b16/blobs/", hash_, "/12"),
           absl::StrCat("inst/uploads/u/blobs/", hash_, "/12/meta")}) {
    SCOPED_TRACE(resource);
    absl::StatusOr<Digest> digest = BlobOfResource(resource, /*upload=*/true);
    ASSERT_TRUE(digest.ok()) << digest.status();
    EXPECT_EQ(*digest, blob_);
  }
}

TEST_F(ReapiBlobOfResourceTest, AReadFormIsNoUploadAndAnUploadFormNoRead) {
  absl::StatusOr<Digest> read_as_upload =
      BlobOfResource(absl::StrCat("blobs/", hash_, "/12"), /*upload=*/true);
  ASSERT_FALSE(read_as_upload.ok());
  EXPECT_EQ(read_as_upload.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read_as_upload.status().message(), HasSubstr("uploads/UUID/blobs/HASH/SIZE"));

  absl::StatusOr<Digest> upload_as_read =
      BlobOfResource(absl::StrCat("uploads/uuid/blobs/", hash_, "/12"), /*upload=*/false);
  ASSERT_FALSE(upload_as_read.ok());
  EXPECT_EQ(upload_as_read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(upload_as_read.status().message(), HasSubstr("'[INSTANCE/]blobs/HASH/SIZE'"));

  // Metadata after the size belongs to an upload only.
  EXPECT_EQ(
      BlobOfResource(absl::StrCat("blobs/", hash_, "/12/meta"), /*upload=*/false).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(ReapiBlobOfResourceTest, OtherResourcesAreInvalid) {
  const std::vector<std::pair<std::string, bool>> refused = {
      {absl::StrCat("compressed-blobs/zstd/", hash_, "/12"), false},
      {absl::StrCat("uploads/u/compressed-blobs/zstd/", hash_, "/12"), true},
      {"blobs/xyz/12", false},
      {absl::StrCat("blobs/", hash_.substr(0, 63), "/12"), false},
      {absl::StrCat("blobs/", absl::AsciiStrToUpper(hash_), "/12"), false},
      {absl::StrCat("blobs/", hash_, "/-12"), false},
      {absl::StrCat("uploads/u/blobs/", hash_, "/-1"), true},
      {absl::StrCat("blobs/", hash_, "/twelve"), false},
      {absl::StrCat("blobs/", hash_, "/"), false},
      {absl::StrCat("blobs/", hash_), false},
      {"", false},
      {"", true},
  };
  for (const auto& [resource, upload] : refused) {
    SCOPED_TRACE(absl::StrCat(resource, upload ? " (upload)" : " (read)"));
    absl::StatusOr<Digest> digest = BlobOfResource(resource, upload);
    ASSERT_FALSE(digest.ok()) << digest->ToString();
    EXPECT_EQ(digest.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(ReapiMemoryHintTest, AMemoryPropertyIsASize) {
  reapi::Platform platform;
  EXPECT_EQ(MemoryHint(platform).value(), std::nullopt);
  auto* other = platform.add_properties();
  other->set_name("OSFamily");
  other->set_value("Linux");
  EXPECT_EQ(MemoryHint(platform).value(), std::nullopt);
  auto* memory = platform.add_properties();
  memory->set_name("memory");
  memory->set_value("6GiB");
  EXPECT_EQ(MemoryHint(platform).value(), std::optional<int64_t>(int64_t{6} << 30));
  memory->set_name("EstimatedMemory");
  memory->set_value("512M");
  EXPECT_EQ(MemoryHint(platform).value(), std::optional<int64_t>(int64_t{512} << 20));
  for (const char* bad : {"lots", "", "0", "-1GiB"}) {
    memory->set_value(bad);
    absl::StatusOr<std::optional<int64_t>> hint = MemoryHint(platform);
    ASSERT_FALSE(hint.ok()) << bad;
    EXPECT_EQ(hint.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(hint.status().message(), HasSubstr("'EstimatedMemory'")) << bad;
  }
}

// An Action's cache entry is an alias of its unit's result: a result the
// coordinator forgets (a cross-check that disagreed) answers neither.
TEST_F(ReapiStoreTest, AnActionsEntryGoesWithItsUnitsResult) {
  ResultCache results(testing::NewTempDir("reapi-results-") + "/results", cas_.get());
  const std::string unit = DigestOf("the unit's action").hash;
  const std::string action = DigestOf("the REAPI action").hash;
  v1::TaskResult result;
  result.set_outcome(v1::TASK_COMPLETED);
  result.set_worker_name("w");
  results.Record(unit, result);
  EXPECT_FALSE(results.LookupAlias(action).has_value());
  results.RecordAlias(action, unit);
  ASSERT_TRUE(results.LookupAlias(action).has_value());
  EXPECT_EQ(results.LookupAlias(action)->worker_name(), "w");
  EXPECT_FALSE(results.Lookup(action).has_value());  // an alias is no result of its own
  results.Forget(unit);
  EXPECT_FALSE(results.LookupAlias(action).has_value());
}

}  // namespace
}  // namespace distcc_cuda::coordinator
