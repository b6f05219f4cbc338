// SPDX-License-Identifier: Apache-2.0
#include "client/plan/unit_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/files.h"
#include "common/nvcc/nvcc_args.h"
#include "common/store/cas_client.h"
#include "common/store/digest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::client {
namespace {

using ::testing::HasSubstr;

v1::CompileUnit UnitIncluding(int unit, int headers) {
  v1::CompileUnit compile;
  compile.set_name(absl::StrCat("gemm_", unit));
  for (int i = 0; i < headers; ++i) {
    v1::InputFile* input = compile.add_inputs();
    input->set_path(absl::StrCat("include/cutlass/h", i, ".hpp"));
    *input->mutable_digest() = ToProto(DigestOf(absl::StrCat(i)));
  }
  v1::InputFile* source = compile.add_inputs();
  source->set_path(absl::StrCat("gemm_", unit, ".cu"));
  *source->mutable_digest() = ToProto(DigestOf(absl::StrCat("unit ", unit)));
  return compile;
}

// The folders every unit shares are uploaded once; with each unit's own
// source beside its tree, units that include the same headers share the
// whole tree.
TEST(UnitRequestTest, UnitsThatShareHeadersShareTheirFolders) {
  WorkspaceFiles files;
  for (int unit = 0; unit < 5; ++unit) {
    v1::CompileUnit compile = UnitIncluding(unit, 100);
    ASSERT_TRUE(
        MoveIntoInputTree(*compile.mutable_inputs(), *compile.mutable_input_root(), files).ok());
    EXPECT_EQ(compile.inputs_size(), 0);
    EXPECT_TRUE(ValidateDigest(FromProto(compile.input_root())).ok());
  }
  // Five roots, one include/ and one include/cutlass/.
  EXPECT_EQ(files.folders.size(), 7u);
  EXPECT_EQ(files.AllBlobs().size(), 7u);

  WorkspaceFiles shared;
  std::set<std::string> roots;
  for (int unit = 0; unit < 5; ++unit) {
    v1::CompileUnit compile = UnitIncluding(unit, 100);
    const std::string own = absl::StrCat("gemm_", unit, ".cu");
    ASSERT_TRUE(
        MoveIntoInputTree(*compile.mutable_inputs(), *compile.mutable_input_root(), shared, own)
            .ok());
    ASSERT_EQ(compile.inputs_size(), 1);
    EXPECT_EQ(compile.inputs(0).path(), own);
    roots.insert(compile.input_root().hash());
  }
  EXPECT_EQ(roots.size(), 1u);
  EXPECT_EQ(shared.folders.size(), 3u);
  // Their tree was made once; a list that differs in one header's content
  // is another tree.
  EXPECT_EQ(shared.roots.size(), 1u);
  v1::CompileUnit edited = UnitIncluding(0, 100);
  edited.mutable_inputs(1)->mutable_digest()->set_hash(DigestOf("edited").hash);
  ASSERT_TRUE(
      MoveIntoInputTree(*edited.mutable_inputs(), *edited.mutable_input_root(), shared, "gemm_0.cu")
          .ok());
  EXPECT_EQ(shared.roots.size(), 2u);
  EXPECT_EQ(roots.count(edited.input_root().hash()), 0u);
}

// The client's own checks before anything is sent: each distinct tree's
// files once, then each unit with its own source.
TEST(UnitRequestTest, EachTreesFilesAreCheckedOnceAndEachUnitWithItsOwnFiles) {
  WorkspaceFiles files;
  const std::vector<std::string> system_prefixes = SystemIncludePrefixes();
  for (int unit = 0; unit < 3; ++unit) {
    v1::CompileUnit compile = UnitIncluding(unit, 20);
    compile.set_workspace_root("/src/cutlass");
    for (const std::string& argument : {std::string("-c"), absl::StrCat("gemm_", unit, ".cu"),
                                        std::string("-o"), absl::StrCat("gemm_", unit, ".o")}) {
      compile.add_arguments(argument);
    }
    compile.add_output_paths(absl::StrCat("gemm_", unit, ".o"));
    absl::Status checked = CheckAndMoveIntoInputTree(
        compile, files, absl::StrCat("gemm_", unit, ".cu"), system_prefixes);
    ASSERT_TRUE(checked.ok()) << checked;
    EXPECT_EQ(compile.inputs_size(), 1);
  }
  EXPECT_EQ(files.roots.size(), 1u);
  // The 20 headers, each checked once, and the three sources.
  EXPECT_EQ(files.checked.input_paths["/src/cutlass"].size(), 23u);

  // A header of a new tree among the system's, and a unit's own arguments.
  v1::CompileUnit system = UnitIncluding(7, 2);
  system.set_workspace_root("/usr");
  system.mutable_inputs(0)->set_path("include/stdio.h");
  for (const char* argument : {"-c", "gemm_7.cu", "-o", "gemm_7.o"}) system.add_arguments(argument);
  system.add_output_paths("gemm_7.o");
  absl::Status refused = CheckAndMoveIntoInputTree(system, files, "gemm_7.cu", system_prefixes);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("unit gemm_7: input /usr/include/stdio.h"));
  v1::CompileUnit run = UnitIncluding(0, 20);
  run.set_workspace_root("/src/cutlass");
  for (const char* argument : {"--run", "-c", "gemm_0.cu", "-o", "gemm_0.o"}) {
    run.add_arguments(argument);
  }
  run.add_output_paths("gemm_0.o");
  EXPECT_THAT(
      std::string(CheckAndMoveIntoInputTree(run, files, "gemm_0.cu", system_prefixes).message()),
      HasSubstr("--run"));
}

// Units given their inputs from the closures their scans found: a closure
// seen before reuses its tree without its list being made again, whatever
// the source's place in it or the repeats; each file is hashed once; the
// tree is the one the full list makes (CheckAndMoveIntoInputTree), so the
// coordinator sees the same units either way.
TEST(UnitRequestTest, UnitsWithTheSameClosureShareTheTreeWithoutListingIt) {
  absl::StatusOr<std::string> dir = MakeTempDirectory(::testing::TempDir(), "closure-");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string root = *dir + "/workspace";
  std::vector<std::string> headers;
  for (int i = 0; i < 5; ++i) {
    headers.push_back(absl::StrCat(root, "/include/cutlass/h", i, ".hpp"));
    ASSERT_TRUE(WriteFileAtomically(headers.back(), absl::StrCat("// header ", i, "\n")).ok());
  }
  auto source = [&](int unit) { return absl::StrCat(root, "/gen/gemm_", unit, ".cu"); };
  const WorkspaceLayout layout = WorkspaceLayout::Relocated(root);
  auto unit = [&](int n) {
    v1::CompileUnit compile;
    compile.set_name(absl::StrCat("gemm_", n));
    PlaceUnit(compile, layout, root + "/gen");
    for (const std::string& argument :
         {std::string("-I../include"), std::string("-c"), absl::StrCat("gemm_", n, ".cu"),
          std::string("-o"), absl::StrCat("gemm_", n, ".o")}) {
      compile.add_arguments(argument);
    }
    compile.add_output_paths(absl::StrCat("gemm_", n, ".o"));
    return compile;
  };
  for (int n = 0; n < 4; ++n) {
    ASSERT_TRUE(WriteFileAtomically(source(n), absl::StrCat("// unit ", n, "\n")).ok());
  }
  const std::vector<std::string> prefixes = SystemIncludePrefixes();
  WorkspaceFiles files;
  std::vector<v1::CompileUnit> units;
  // The source first, last, or absent from its closure; a header twice.
  std::vector<std::vector<std::string>> closures = {
      {source(0), headers[0], headers[1], headers[2]},
      {headers[0], headers[1], headers[2], source(1)},
      {headers[0], headers[1], headers[2]},
      {headers[0], headers[1], headers[1], headers[3]},
  };
  for (int n = 0; n < 4; ++n) {
    units.push_back(unit(n));
    absl::Status added =
        AddUnitInputs(units.back(), closures[n], source(n), layout, files, prefixes);
    ASSERT_TRUE(added.ok()) << added;
    ASSERT_EQ(units.back().inputs_size(), 1);
    EXPECT_EQ(units.back().workspace_root(), "/");
    EXPECT_EQ(units.back().working_directory(), "distcc-cuda/workspace/gen");
    EXPECT_EQ(units.back().inputs(0).path(),
              absl::StrCat("distcc-cuda/workspace/gen/gemm_", n, ".cu"));
  }
  EXPECT_EQ(units[0].input_root().hash(), units[1].input_root().hash());
  EXPECT_EQ(units[0].input_root().hash(), units[2].input_root().hash());
  EXPECT_NE(units[0].input_root().hash(), units[3].input_root().hash());
  // Two trees made from lists (units 0 and 3); units 1 and 2 found unit 0's
  // closure, the source wherever it was or not at all.
  EXPECT_EQ(files.roots.size(), 2u);
  EXPECT_EQ(files.roots_by_closure.size(), 2u);
  EXPECT_EQ(files.blobs.size(), 4u + 4u);  // four headers and four sources, once each

  // The same tree as the full list gives.
  WorkspaceFiles listed;
  v1::CompileUnit whole = unit(0);
  for (const std::string& path : {source(0), headers[0], headers[1], headers[2]}) {
    ASSERT_TRUE(InputFor(path, layout, listed).ok());
    *whole.add_inputs() = *InputFor(path, layout, listed);
  }
  ASSERT_TRUE(
      CheckAndMoveIntoInputTree(whole, listed, "distcc-cuda/workspace/gen/gemm_0.cu", prefixes)
          .ok());
  EXPECT_EQ(whole.input_root().hash(), units[0].input_root().hash());
  EXPECT_EQ(whole.inputs(0).digest().hash(), units[0].inputs(0).digest().hash());

  // A file outside the workspace goes at its own path.
  ASSERT_TRUE(WriteFileAtomically(*dir + "/outside.h", "// outside\n").ok());
  v1::CompileUnit outside = unit(0);
  absl::Status added =
      AddUnitInputs(outside, {source(0), *dir + "/outside.h"}, source(0), layout, files, prefixes);
  ASSERT_TRUE(added.ok()) << added;
  EXPECT_EQ(files.by_path.at(*dir + "/outside.h").path(), dir->substr(1) + "/outside.h");
  // A closure whose source file is gone is an error naming it.
  v1::CompileUnit gone = unit(9);
  absl::Status missing = AddUnitInputs(gone, {headers[0]}, source(9), layout, files, prefixes);
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.message()), HasSubstr("gemm_9.cu"));
  ASSERT_TRUE(RemoveAll(*dir).ok());
}

// No count of units meets the 8 MiB limit on one message: a large build
// sends its units as a blob.
// A digest the scan cache vouched for is taken as it is: a rebuild's
// inputs are not hashed twice. Files it does not know are hashed.
TEST(UnitRequestTest, InputForTakesTheDigestsTheScanCacheKnows) {
  const std::string dir = AbsolutePath(testing::NewTempDir("unit_request-"));
  ASSERT_TRUE(WriteFileAtomically(dir + "/known.h", "known").ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/new.h", "new").ok());
  // Not the file's own digest, so that taking it cannot be mistaken for
  // hashing the file.
  const Digest vouched = DigestOf("what the scan cache remembered");
  WorkspaceFiles files;
  std::vector<std::string> asked;
  files.known_digest = [&](const std::string& path) -> std::optional<Digest> {
    asked.push_back(path);
    if (path == dir + "/known.h") return vouched;
    return std::nullopt;
  };
  const WorkspaceLayout layout = WorkspaceLayout::Relocated(dir);
  absl::StatusOr<v1::InputFile> known = InputFor(dir + "/known.h", layout, files);
  absl::StatusOr<v1::InputFile> unknown = InputFor(dir + "/new.h", layout, files);
  ASSERT_TRUE(known.ok() && unknown.ok());
  EXPECT_EQ(FromProto(known->digest()), vouched);
  EXPECT_EQ(FromProto(unknown->digest()), DigestOf("new"));
  EXPECT_EQ(known->path(), "distcc-cuda/workspace/known.h");
  ASSERT_EQ(files.blobs.size(), 2u);
  EXPECT_EQ(files.blobs[0].digest, vouched);
  // Each path is asked once; the second time it is the build's own.
  ASSERT_TRUE(InputFor(dir + "/known.h", layout, files).ok());
  EXPECT_EQ(asked.size(), 2u);
}

// The closure's files are read through links: a link to a private file or
// folder of this machine, anywhere in the path, is refused naming both;
// folders are resolved once for all the files in them.
TEST(UnitRequestTest, AClosureThatReadsAPrivateFileThroughALinkIsRefused) {
  const std::string dir = AbsolutePath(testing::NewTempDir("closure-links-"));
  std::vector<std::string> closure;
  for (int folder = 0; folder < 20; ++folder) {
    for (int file = 0; file < 10; ++file) {
      const std::string path = absl::StrCat(dir, "/inc/f", folder, "/h", file, ".h");
      ASSERT_TRUE(WriteFileAtomically(path, "").ok());
      closure.push_back(path);
    }
  }
  closure.push_back(dir + "/inc/f3/../f4/h1.h");
  closure.push_back(dir + "/not-there.h");  // nvcc's answer, gone since: not a private file
  EXPECT_TRUE(CheckClosure("unit k", closure).ok());

  std::filesystem::create_directories(dir + "/linked");
  std::filesystem::create_symlink("/etc", dir + "/linked/etc");
  std::filesystem::create_symlink("/etc/hostname", dir + "/inc/f7/hostname.h");
  std::filesystem::create_symlink(dir + "/inc/f2", dir + "/inc/harmless");
  EXPECT_TRUE(CheckClosure("unit k", {dir + "/inc/harmless/h1.h"}).ok())
      << "a link that stays in the project";
  for (const std::string& path : {dir + "/linked/etc/hostname", dir + "/inc/f7/hostname.h",
                                  dir + "/linked/etc/../etc/hostname"}) {
    std::vector<std::string> with = closure;
    with.insert(with.begin() + 50, path);
    absl::Status checked = CheckClosure("unit k", with);
    EXPECT_FALSE(checked.ok()) << path;
    EXPECT_THAT(checked.message(), HasSubstr("unit k reads " + path)) << checked;
    EXPECT_THAT(checked.message(), HasSubstr("(a link to /etc/hostname)")) << checked;
  }
}

TEST(UnitRequestTest, ALargePartTravelsAsAPlanBlob) {
  v1::AddUnitsRequest request;
  request.set_build_id("b-cutlass");
  auto add_units = [&](int count) {
    for (int unit = 0; unit < count; ++unit) {
      v1::CompileUnit* compile = request.add_units();
      compile->set_name(absl::StrCat("gemm_", request.units_size()));
      for (int i = 0; i < 100; ++i) {
        compile->add_arguments(absl::StrCat("-DCUTLASS_OPTION_", i, "=1"));
      }
    }
  };
  WorkspaceFiles files;
  add_units(10);
  EXPECT_FALSE(PackLargeBuild(request, files)) << "a small part stays in its message";
  EXPECT_EQ(request.units_size(), 10);
  EXPECT_TRUE(files.plan.empty());

  add_units(20000);  // about 40 MiB of arguments
  const std::string units = request.SerializeAsString();
  ASSERT_GT(static_cast<int64_t>(units.size()), kMaxMessageBytes);
  ASSERT_TRUE(PackLargeBuild(request, files));
  EXPECT_EQ(request.units_size(), 0);
  EXPECT_EQ(request.build_id(), "b-cutlass");
  EXPECT_LT(static_cast<int64_t>(request.ByteSizeLong()), 1024);
  ASSERT_EQ(files.plan.size(), 1u);
  EXPECT_EQ(FromProto(request.plan()), files.plan[0].digest);
  EXPECT_EQ(DigestOf(files.plan[0].bytes), files.plan[0].digest);
  v1::BuildPlan plan;
  ASSERT_TRUE(plan.ParseFromString(files.plan[0].bytes));
  EXPECT_EQ(plan.units_size(), 20010);
  EXPECT_EQ(plan.units(20009).name(), "gemm_20010");
  EXPECT_EQ(files.AllBlobs().size(), 1u);
}

// setuptools adds every venv's include folder, empty as a rule: a missing
// or empty header folder (or one of empty folders) outside the workspace changes no lookup and is
// dropped, so that two venvs' compiles are one; a folder with a file stays,
// and --absolute-paths keeps every flag as it was.
TEST(RelativeFlagsTest, AVacantHeaderFolderOutsideTheWorkspaceIsDropped) {
  const std::string root = testing::NewTempDir("relative-flags-");
  ASSERT_TRUE(std::filesystem::create_directories(root + "/proj"));
  ASSERT_TRUE(std::filesystem::create_directories(root + "/alice/.venv/include/python3.11"));
  ASSERT_TRUE(std::filesystem::create_directories(root + "/proj/empty"));
  ASSERT_TRUE(std::filesystem::create_directories(root + "/headers"));
  ASSERT_TRUE(std::filesystem::create_directories(root + "/headers/sub"));
  ASSERT_TRUE(WriteFileAtomically(root + "/headers/sub/x.h", "#pragma once\n").ok());
  const std::vector<std::string> flags = {
      "-I" + root + "/alice/.venv/include",
      "-isystem",
      root + "/missing",
      "-I" + root + "/headers",
      "-I" + root + "/proj/empty",
      "--include-path=" + root + "/missing," + root + "/headers",
      "-O2"};
  absl::StatusOr<std::vector<std::string>> moved =
      RelativeFlags(flags, root + "/proj", WorkspaceLayout::Relocated(root + "/proj"), {},
                    v1::UNIT_COMPILER_NVCC);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(absl::StrJoin(*moved, " "),
            absl::StrCat("-I", root, "/headers -Iempty --include-path=", root, "/headers -O2"));
  absl::StatusOr<std::vector<std::string>> host =
      RelativeFlags({"-I" + root + "/alice/.venv/include", "-O2"}, root + "/proj",
                    WorkspaceLayout::Relocated(root + "/proj"), {}, v1::UNIT_COMPILER_HOST_CXX);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(absl::StrJoin(*host, " "), "-O2");
  absl::StatusOr<std::vector<std::string>> as_is = RelativeFlags(
      flags, root + "/proj", WorkspaceLayout::AsIs(root + "/proj"), {}, v1::UNIT_COMPILER_NVCC);
  ASSERT_TRUE(as_is.ok()) << as_is.status();
  EXPECT_THAT(absl::StrJoin(*as_is, " "), HasSubstr(root + "/alice/.venv/include"));
  EXPECT_THAT(absl::StrJoin(*as_is, " "), HasSubstr(root + "/missing"));
  std::filesystem::remove_all(root);
}

// One toolkit at two names (a link and its folder, /usr/local/cuda and
// /usr/local/cuda-13.0, or anyone's ~/cuda) is one compile: nvcc's search
// folders in it are dropped, a host compiler's named at the canonical root;
// a conda environment's prefix is not relocated (its include folder holds
// more than the toolkit), and --absolute-paths keeps the host's flags.
TEST(RelativeFlagsTest, TheToolkitAtAnyPlaceIsNamedAtItsCanonicalRoot) {
  const std::string root = testing::NewTempDir("relative-toolkit-");
  ASSERT_TRUE(std::filesystem::create_directories(root + "/proj"));
  ASSERT_TRUE(std::filesystem::create_directories(root + "/cuda-13.0/include/crt"));
  ASSERT_TRUE(WriteFileAtomically(root + "/cuda-13.0/include/cuda.h", "#pragma once\n").ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/cuda-13.0/include/crt/host.h", "#pragma once\n").ok());
  std::filesystem::create_directory_symlink(root + "/cuda-13.0", root + "/cuda");
  const ToolkitPlaces toolkit = PlacesOfToolkit({root + "/cuda/", root + "/cuda-13.0/"});
  const WorkspaceLayout layout = WorkspaceLayout::Relocated(root + "/proj");
  for (const std::string& named : {root + "/cuda", root + "/cuda-13.0"}) {
    absl::StatusOr<std::vector<std::string>> host =
        RelativeFlags({"-I" + named + "/include", "-isystem", named + "/include/crt", "-O2"},
                      root + "/proj", layout, toolkit, v1::UNIT_COMPILER_HOST_CXX);
    ASSERT_TRUE(host.ok()) << host.status();
    EXPECT_EQ(absl::StrJoin(*host, " "),
              "-I/distcc-cuda/toolkit/include -isystem /distcc-cuda/toolkit/include/crt -O2");
    absl::StatusOr<std::vector<std::string>> nvcc =
        RelativeFlags({"-I" + named + "/include", "-include", named + "/include/cuda.h", "-O2"},
                      root + "/proj", layout, toolkit, v1::UNIT_COMPILER_NVCC);
    ASSERT_TRUE(nvcc.ok()) << nvcc.status();
    EXPECT_EQ(absl::StrJoin(*nvcc, " "), "-include /distcc-cuda/toolkit/include/cuda.h -O2");
  }
  absl::StatusOr<std::vector<std::string>> as_is =
      RelativeFlags({"-I" + root + "/cuda/include", "-O2"}, root + "/proj",
                    WorkspaceLayout::AsIs(root + "/proj"), toolkit, v1::UNIT_COMPILER_HOST_CXX);
  ASSERT_TRUE(as_is.ok()) << as_is.status();
  EXPECT_EQ(absl::StrJoin(*as_is, " "), "-I" + root + "/cuda/include -O2");
  ASSERT_TRUE(std::filesystem::create_directories(root + "/cuda-13.0/conda-meta"));
  absl::StatusOr<std::vector<std::string>> conda =
      RelativeFlags({"-I" + root + "/cuda-13.0/include", "-O2"}, root + "/proj", layout,
                    PlacesOfToolkit({root + "/cuda-13.0/"}), v1::UNIT_COMPILER_HOST_CXX);
  ASSERT_TRUE(conda.ok()) << conda.status();
  EXPECT_EQ(absl::StrJoin(*conda, " "), "-I" + root + "/cuda-13.0/include -O2");
  std::filesystem::remove_all(root);
}

// A unit compiled in an out-of-tree build folder names the workspace's
// include folders at their canonical place and the build folder's at its
// own; its source relative to where the folder is on the workers (the only
// way a worker takes it); in the workspace, relative as before.
TEST(RelativeFlagsTest, AnOutOfTreeBuildFoldersUnitNamesTheWorkspaceAtItsCanonicalRoot) {
  const std::string root = testing::NewTempDir("relative-build-");
  ASSERT_TRUE(WriteFileAtomically(root + "/proj/include/k.h", "#pragma once\n").ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/build/gen/config.h", "#pragma once\n").ok());
  WorkspaceLayout layout = WorkspaceLayout::Relocated(root + "/proj");
  layout.AddInputRoot({root + "/build", "/distcc-cuda/build", "build folder"});
  absl::StatusOr<std::vector<std::string>> flags =
      RelativeFlags({"-I" + root + "/proj/include", "-I" + root + "/build/gen", "-O2"},
                    root + "/build", layout, {}, v1::UNIT_COMPILER_NVCC);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(absl::StrJoin(*flags, " "),
            "-I/distcc-cuda/workspace/include -I/distcc-cuda/build/gen -O2");
  EXPECT_EQ(NamedFrom(root + "/proj/src/k.cu", root + "/build", layout), "../workspace/src/k.cu");
  EXPECT_EQ(NamedFrom(root + "/proj/src/k.cu", root + "/build/sub", layout),
            "../../workspace/src/k.cu");
  EXPECT_EQ(NamedFrom(root + "/proj/src/k.cu", root + "/proj/sub", layout), "../src/k.cu");
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace distcc_cuda::client
