// SPDX-License-Identifier: Apache-2.0
// The real binaries as separate processes and the real nvcc: a coordinator
// and two workers build examples/attention; the library's fatbinary has
// sm_100 code, and every unit's device code equals a local nvcc build's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/plan/kernel_manifest.h"
#include "common/base/files.h"
#include "common/nvcc/compile_identity.h"
#include "common/nvcc/fatbin.h"
#include "common/nvcc/instantiation.h"
#include "common/nvcc/toolchain.h"
#include "common/process/subprocess.h"
#include "common/store/digest.h"
#include "tests/support/background_process.h"
#include "tests/support/chrome_trace.h"
#include "tests/support/cuda_sources.h"
#include "tests/support/loopback_cluster.h"
#include "tests/support/process_tree.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class RealNvccTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nvcc_ = testing::RealNvccPath();
    if (nvcc_.empty()) GTEST_SKIP() << "needs the real nvcc at /usr/local/cuda/bin/nvcc";
    root_ = testing::NewTempDir("e2e-");
    auto cluster = testing::LoopbackCluster::Start(root_, nvcc_, {{"e2e-a"}, {"e2e-b"}});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    address_ = cluster_->address();
  }

  ProcessResult Client(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {testing::BinaryPath("distcc-cuda")};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::RunToEnd(argv);
  }

  // The second real nvcc (scripts/second_nvcc installs one from PyPI's
  // wheels; scripts/test exports DISTCC_SECOND_NVCC) and both fingerprints;
  // nullopt without it.
  struct SecondRelease {
    std::string nvcc;
    v1::ToolchainFingerprint theirs;
    v1::ToolchainFingerprint ours;
  };
  static constexpr char kNeedsSecond[] =
      "needs a second nvcc release: run ./scripts/second_nvcc and set DISTCC_SECOND_NVCC to the "
      "path it prints (scripts/test does)";
  std::optional<SecondRelease> Second() {
    const char* env = std::getenv("DISTCC_SECOND_NVCC");
    std::string second = env ? env : "";
    if (second.empty() || !IsExecutableFile(second)) return std::nullopt;
    absl::StatusOr<v1::ToolchainFingerprint> theirs = ComputeToolchainFingerprint(second);
    absl::StatusOr<v1::ToolchainFingerprint> ours = ComputeToolchainFingerprint(nvcc_);
    EXPECT_TRUE(theirs.ok() && ours.ok());
    if (!theirs.ok() || !ours.ok()) return std::nullopt;
    EXPECT_NE(theirs->nvcc_release(), ours->nvcc_release()) << "not a second release";
    return SecondRelease{second, *theirs, *ours};
  }

  std::string nvcc_;
  std::string root_;
  std::string address_;
  std::unique_ptr<testing::LoopbackCluster> cluster_;
};

// Compiles `source` in `directory` with the manifest's flags, as a user
// would without distcc-cuda.
absl::Status CompileLocally(const std::string& nvcc, const std::string& directory,
                            const std::string& source, const std::string& object) {
  ProcessSpec spec;
  spec.argv = {
      nvcc, "-O3",  "-std=c++17", "-gencode", "arch=compute_100,code=sm_100", "-Xcompiler=-fPIC",
      "-c", source, "-o",         object};
  spec.working_directory = directory;
  spec.timeout = absl::Minutes(5);
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  if (!result.ok()) return result.status();
  if (result->exit_code != 0) {
    return absl::InternalError(absl::StrCat(source, ": ", result->stderr_text));
  }
  return absl::OkStatus();
}

// Writes `proj`/compile_commands.json with one command: nvcc `flags` -c
// `source` -o obj/<object>.
void WriteCompileCommand(const std::string& nvcc, const std::string& proj,
                         const std::string& source, const std::vector<std::string>& flags,
                         const std::string& object) {
  std::string db = absl::StrCat(R"([{"directory": ")", proj, R"(", "file": ")", source,
                                R"(", "arguments": [")", nvcc, "\"");
  for (const std::string& flag : flags) absl::StrAppend(&db, ", \"", flag, "\"");
  absl::StrAppend(&db, R"(, "-c", ")", source, R"(", "-o", "obj/)", object, R"("]}])");
  ASSERT_TRUE(WriteFileAtomically(proj + "/compile_commands.json", db).ok());
}

// Runs nvcc `flags` -c `source` -o `object` in `directory`.
void CompileWith(const std::string& nvcc, const std::string& directory,
                 const std::vector<std::string>& flags, const std::string& source,
                 const std::string& object) {
  ProcessSpec local;
  local.argv = {nvcc};
  local.argv.insert(local.argv.end(), flags.begin(), flags.end());
  for (const std::string& arg : {std::string("-c"), source, std::string("-o"), object}) {
    local.argv.push_back(arg);
  }
  local.working_directory = directory;
  local.timeout = absl::Minutes(5);
  absl::StatusOr<ProcessResult> ran = RunProcess(local);
  ASSERT_TRUE(ran.ok()) << ran.status();
  ASSERT_EQ(ran->exit_code, 0) << ran->stderr_text;
}

// `readelf -d` of a library: its NEEDED and SONAME entries.
std::string DynamicSection(const std::string& library) {
  ProcessSpec readelf;
  readelf.argv = {"readelf", "-d", library};
  absl::StatusOr<ProcessResult> ran = RunProcess(readelf);
  EXPECT_TRUE(ran.ok() && ran->exit_code == 0) << library;
  return ran.ok() ? ran->stdout_text : "";
}

TEST_F(RealNvccTest, TwoWorkersBuildTheAttentionExampleLikeALocalNvcc) {
  std::string out = root_ + "/out";
  ProcessResult build =
      Client({"build", testing::SourceDir() + "/examples/attention/kernels.toml", "--coordinator",
              address_, "-o", out, "--trace", root_ + "/trace.json"});
  ASSERT_EQ(build.exit_code, 0) << build.stdout_text << build.stderr_text;
  EXPECT_THAT(build.stdout_text, HasSubstr("units     25 (25 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(build.stdout_text, HasSubstr("workers   2 (e2e-a: "));

  // The timeline: every unit's compile on a worker's one slot (one track:
  // a one-slot worker never ran two at once), with its peak memory.
  absl::StatusOr<std::vector<testing::TraceSpan>> trace =
      testing::ReadChromeTrace(root_ + "/trace.json");
  ASSERT_TRUE(trace.ok()) << trace.status();
  std::vector<testing::TraceSpan> compiles = testing::SpansOf(*trace, "compile");
  EXPECT_EQ(compiles.size(), 25u);
  std::set<std::string> places;
  for (const testing::TraceSpan& span : compiles) {
    places.insert(span.place);
    EXPECT_EQ(span.track, 0) << span.name << " on a second track of " << span.place;
    ASSERT_TRUE(span.args.count("peak memory")) << span.name;
    EXPECT_THAT(span.args.at("peak memory"), ::testing::EndsWith("iB")) << span.name;
  }
  EXPECT_EQ(places, (std::set<std::string>{"worker e2e-a", "worker e2e-b"}));
  EXPECT_EQ(testing::SpansOf(*trace, "queue").size(), 25u);
  EXPECT_EQ(testing::SpansOf(*trace, "download").size(), 25u);
  EXPECT_EQ(testing::SpansOf(*trace, "link").size(), 1u);

  std::string library = out + "/libattention_sm100.so";
  ProcessResult inspect = Client({"inspect", library});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.stderr_text;
  EXPECT_THAT(inspect.stdout_text, HasSubstr("sm_100 cubin\n"));
  // Linked as PyTorch's cpp_extension links an extension: the shared CUDA
  // runtime, no device-link image of nvcc -shared.
  EXPECT_THAT(inspect.stdout_text, Not(HasSubstr("sm_75")));
  EXPECT_THAT(DynamicSection(library), HasSubstr("Shared library: [libcudart.so"));
  EXPECT_THAT(build.stdout_text, HasSubstr("  link      g++ -shared [25 objects] -L"));

  // Rebuild every unit locally from the same generated text, next to the
  // headers, and compare device code image by image.
  std::string local = root_ + "/local";
  fs::copy(testing::SourceDir() + "/examples/attention", local, fs::copy_options::recursive);
  absl::StatusOr<client::KernelManifest> manifest =
      client::LoadKernelManifest(local + "/kernels.toml");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  std::vector<std::pair<std::string, std::string>> units;  // name, source
  for (const std::string& source : manifest->sources) {
    units.emplace_back(fs::path(source).stem().string(), source);
  }
  for (const v1::InstantiationSet& set : manifest->instantiation_sets) {
    absl::StatusOr<std::vector<GeneratedUnit>> generated = ExpandInstantiationSet(set);
    ASSERT_TRUE(generated.ok()) << generated.status();
    for (const GeneratedUnit& unit : *generated) {
      ASSERT_TRUE(WriteFileAtomically(local + "/" + unit.name + ".cu", unit.source_text).ok());
      units.emplace_back(unit.name, unit.name + ".cu");
    }
  }
  ASSERT_EQ(units.size(), 25u);
  for (size_t begin = 0; begin < units.size(); begin += 2) {
    std::vector<std::future<absl::Status>> running;
    for (size_t i = begin; i < std::min(units.size(), begin + 2); ++i) {
      running.push_back(std::async(std::launch::async, [&, i] {
        return CompileLocally(nvcc_, local, units[i].second, units[i].first + ".local.o");
      }));
    }
    for (auto& compile : running) ASSERT_TRUE(compile.get().ok());
  }
  for (const auto& [name, source] : units) {
    absl::StatusOr<std::vector<DeviceImage>> remote = ReadDeviceImages(out + "/obj/" + name + ".o");
    absl::StatusOr<std::vector<DeviceImage>> mine =
        ReadDeviceImages(local + "/" + name + ".local.o");
    ASSERT_TRUE(remote.ok()) << name << ": " << remote.status();
    ASSERT_TRUE(mine.ok()) << name << ": " << mine.status();
    ASSERT_FALSE(remote->empty()) << name;
    EXPECT_EQ((*remote)[0].arch, 100) << name;
    EXPECT_TRUE(*remote == *mine) << name << ": device code differs from a local build";
    // Byte for byte, whichever worker compiled it.
    absl::StatusOr<std::string> remote_object = ReadFile(out + "/obj/" + name + ".o");
    absl::StatusOr<std::string> local_object = ReadFile(local + "/" + name + ".local.o");
    ASSERT_TRUE(remote_object.ok() && local_object.ok()) << name;
    EXPECT_TRUE(*DeviceCodeSections(*remote_object, name) ==
                *DeviceCodeSections(*local_object, name))
        << name << ": .nv_fatbin differs from a local build's";
  }
  absl::StatusOr<std::vector<DeviceImage>> linked = ReadDeviceImages(library);
  ASSERT_TRUE(linked.ok()) << linked.status();
  int sm100 = 0;
  for (const DeviceImage& image : *linked) {
    sm100 += image.kind == DeviceImageKind::kCubin && image.arch == 100;
  }
  EXPECT_GE(sm100, 25) << "every unit's sm_100 cubin is in the library";
}

// nvcc hashes the source's absolute path into the names of internal device
// entities (_INTERNAL_<hash>_, _GLOBAL__N__<hash>_). With --absolute-paths
// workers mount the unit's inputs at the client's own path and run nvcc as
// PID 1 of its namespace, so a remote object's device code is byte for
// byte a local build's; the same source compiled at another path is not.
// (Without it, at the canonical root: relocatable_cache_test.)
TEST_F(RealNvccTest, DeviceCodeOfInternalEntitiesEqualsALocalBuildAtTheSamePath) {
  const std::string source = R"(
namespace { __device__ float scale = 2.0f; }
static __device__ int counter;
__global__ void Scale(float* x) { x[threadIdx.x] *= scale; atomicAdd(&counter, 1); }
void Launch(float* x) { Scale<<<1, 32>>>(x); }
)";
  std::string proj = root_ + "/samepath";
  ASSERT_TRUE(WriteFileAtomically(proj + "/k.cu", source).ok());
  ASSERT_TRUE(WriteFileAtomically(root_ + "/elsewhere/k.cu", source).ok());
  const std::vector<std::string> flags = {"-O3", "-Xcompiler=-fPIC", "-gencode",
                                          "arch=compute_100,code=[sm_100,compute_100]"};
  WriteCompileCommand(nvcc_, proj, "k.cu", flags, "k.o");
  ProcessResult build =
      Client({"build", proj + "/compile_commands.json", "--coordinator", address_, "--library",
              "libk.so", "-o", proj, "--nvcc", nvcc_, "--absolute-paths"});
  ASSERT_EQ(build.exit_code, 0) << build.stdout_text << build.stderr_text;
  // CMake's link of a CUDA shared library: SONAME, the shared runtime.
  std::string dynamic = DynamicSection(proj + "/libk.so");
  EXPECT_THAT(dynamic, HasSubstr("Library soname: [libk.so]"));
  EXPECT_THAT(dynamic, HasSubstr("Shared library: [libcudart.so"));
  CompileWith(nvcc_, proj, flags, "k.cu", "local.o");
  CompileWith(nvcc_, root_ + "/elsewhere", flags, "k.cu", "local.o");
  absl::StatusOr<std::vector<DeviceImage>> remote = ReadDeviceImages(proj + "/obj/k.o");
  absl::StatusOr<std::vector<DeviceImage>> here = ReadDeviceImages(proj + "/local.o");
  absl::StatusOr<std::vector<DeviceImage>> there = ReadDeviceImages(root_ + "/elsewhere/local.o");
  ASSERT_TRUE(remote.ok() && here.ok() && there.ok());
  ASSERT_EQ(remote->size(), 2u) << "an sm_100 cubin and compute_100 PTX";
  EXPECT_TRUE(*remote == *here) << "the worker's device code differs from a local build's";
  EXPECT_FALSE(*there == *here) << "the control: another path gives other internal names";

  // The same unit built by the embedded default (its own sandboxed worker)
  // into another folder.
  ProcessResult embedded =
      Client({"build", proj + "/compile_commands.json", "--library", "libk.so", "-o",
              root_ + "/embedded", "--objects-dir", root_ + "/embedded/obj", "--state-dir",
              root_ + "/embedded-state", "--nvcc", nvcc_, "--absolute-paths"});
  ASSERT_EQ(embedded.exit_code, 0) << embedded.stdout_text << embedded.stderr_text;
  // Byte for byte: the .nv_fatbin sections of the cluster's, the embedded
  // default's and a local nvcc's object.
  absl::StatusOr<std::string> cluster_object = ReadFile(proj + "/obj/k.o");
  absl::StatusOr<std::string> embedded_object = ReadFile(root_ + "/embedded/obj/k.cu.o");
  absl::StatusOr<std::string> local_object = ReadFile(proj + "/local.o");
  ASSERT_TRUE(cluster_object.ok() && embedded_object.ok() && local_object.ok());
  absl::StatusOr<std::string> cluster_fatbin = DeviceCodeSections(*cluster_object, "cluster");
  absl::StatusOr<std::string> embedded_fatbin = DeviceCodeSections(*embedded_object, "embedded");
  absl::StatusOr<std::string> local_fatbin = DeviceCodeSections(*local_object, "local");
  ASSERT_TRUE(cluster_fatbin.ok() && embedded_fatbin.ok() && local_fatbin.ok());
  EXPECT_TRUE(*cluster_fatbin == *local_fatbin) << ".nv_fatbin differs from a local nvcc's";
  EXPECT_TRUE(*embedded_fatbin == *local_fatbin) << ".nv_fatbin differs from a local nvcc's";
  // The whole objects: the cluster's and the embedded default's are the
  // same file; a local nvcc's differs only in the name of nvcc's temporary
  // file in .strtab, tmpxft_<nvcc's pid in hex>_..., where a sandboxed nvcc
  // is process 1.
  EXPECT_TRUE(*cluster_object == *embedded_object);
  ASSERT_EQ(cluster_object->size(), local_object->size());
  size_t at = cluster_object->find("tmpxft_00000001_");
  ASSERT_NE(at, std::string::npos);
  std::string normalised = *local_object;
  size_t local_at = normalised.find("tmpxft_");
  ASSERT_EQ(local_at, at) << "the same place in .strtab";
  normalised.replace(local_at, 16, "tmpxft_00000001_");
  EXPECT_TRUE(normalised == *cluster_object) << "more than the temporary file name differs";
}

// A compile for two targets with --threads 2 runs as one unit per target
// on the workers; the object the client merges has the device code and
// the host code (including what __CUDA_ARCH_LIST__ selects) of a local
// whole compile, and the library links.
TEST_F(RealNvccTest, TargetsCompiledAsUnitsOfTheirOwnMergeIntoTheWholeCompilesObject) {
  std::string proj = root_ + "/proj";
  ASSERT_TRUE(WriteFileAtomically(proj + "/scale.cu", R"(
#define STRINGIFY2(...) #__VA_ARGS__
#define STRINGIFY(...) STRINGIFY2(__VA_ARGS__)
__global__ void Scale(float* x, float by) { x[threadIdx.x] *= by; }
const char* CompiledFor() { return STRINGIFY(__CUDA_ARCH_LIST__); }
void LaunchScale(float* x, float by) { Scale<<<1, 32>>>(x, by); }
)")
                  .ok());
  const std::vector<std::string> flags = {
      "-O3",       "-Xcompiler=-fPIC",
      "--threads", "2",
      "-gencode",  "arch=compute_90,code=sm_90",
      "-gencode",  "arch=compute_100,code=[sm_100,compute_100]"};
  WriteCompileCommand(nvcc_, proj, "scale.cu", flags, "scale.o");
  ProcessResult build = Client({"build", proj + "/compile_commands.json", "--coordinator", address_,
                                "--library", "libscale.so", "-o", proj, "--nvcc", nvcc_});
  ASSERT_EQ(build.exit_code, 0) << build.stdout_text << build.stderr_text;
  EXPECT_THAT(build.stdout_text, HasSubstr("scale.cu@sm_90 "));
  EXPECT_THAT(build.stdout_text,
              HasSubstr("targets   1 units compiled one target per unit (2 parts"));

  CompileWith(nvcc_, proj, flags, "scale.cu", "whole.o");
  absl::StatusOr<std::vector<DeviceImage>> merged = ReadDeviceImages(proj + "/obj/scale.o");
  absl::StatusOr<std::vector<DeviceImage>> expected = ReadDeviceImages(proj + "/whole.o");
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_EQ(merged->size(), 3u);
  EXPECT_TRUE(*merged == *expected) << "device code differs from the whole compile";
  for (const char* section : {".text", ".rodata"}) {
    ProcessSpec dump;
    dump.argv = {"/bin/sh", "-c",
                 absl::StrCat("objcopy -O binary --only-section=", section,
                              " obj/scale.o merged.bin && objcopy -O binary --only-section=",
                              section, " whole.o whole.bin && cmp merged.bin whole.bin")};
    dump.working_directory = proj;
    absl::StatusOr<ProcessResult> same = RunProcess(dump);
    ASSERT_TRUE(same.ok());
    EXPECT_EQ(same->exit_code, 0) << section << " differs: " << same->stdout_text;
  }
  absl::StatusOr<std::string> rodata = ReadFile(proj + "/obj/scale.o");
  ASSERT_TRUE(rodata.ok());
  EXPECT_THAT(*rodata, HasSubstr("900,1000")) << "host code saw the whole's architecture list";
  absl::StatusOr<std::vector<DeviceImage>> library = ReadDeviceImages(proj + "/libscale.so");
  ASSERT_TRUE(library.ok()) << library.status();
  int ours = 0;
  for (const DeviceImage& image : *library) {
    ours += std::find(merged->begin(), merged->end(), image) != merged->end();
  }
  EXPECT_EQ(ours, 3) << "the library holds the merged object's three images";
}

// The names of internal device entities in `bytes`, with the compile
// identity (and the mangled length before it, whose digits follow the
// identity's) replaced by "ID": comparable between compiles.
std::set<std::string> InternalNames(std::string_view bytes) {
  std::set<std::string> names;
  for (const std::string& identity : CompileIdentitiesIn(bytes)) {
    for (const std::string prefix : {"_INTERNAL_", "_GLOBAL__N__"}) {
      std::string needle = prefix + identity;
      for (size_t at = bytes.find(needle); at != std::string_view::npos;
           at = bytes.find(needle, at + 1)) {
        size_t begin = at, end = at + needle.size();
        while (begin > 0 && absl::ascii_isdigit(bytes[begin - 1])) --begin;
        size_t start = begin;
        while (start > 0 && (absl::ascii_isalnum(bytes[start - 1]) || bytes[start - 1] == '_')) {
          --start;
        }
        size_t stop = end;
        while (stop < bytes.size() && (absl::ascii_isalnum(bytes[stop]) || bytes[stop] == '_')) {
          ++stop;
        }
        names.insert(std::string(bytes.substr(start, begin - start)) + "N" + prefix + "ID" +
                     std::string(bytes.substr(end, stop - end)));
      }
    }
  }
  return names;
}

// Internal names by place ("host code", "sm_100 cubin", "compute_100 ptx").
std::map<std::string, std::set<std::string>> InternalNamesByPlace(const std::string& object) {
  std::map<std::string, std::set<std::string>> places;
  absl::StatusOr<std::string> bytes = ReadFile(object);
  absl::StatusOr<std::vector<DeviceImage>> images = ReadDeviceImages(object);
  absl::StatusOr<std::string> host = bytes.ok() ? HostCodeOf(*bytes, object) : bytes.status();
  EXPECT_TRUE(images.ok() && host.ok()) << object;
  if (!images.ok() || !host.ok()) return places;
  for (const DeviceImage& image : *images) {
    places[DescribeDeviceImage(image)] = InternalNames(image.payload);
  }
  places["host code"] = InternalNames(*host);
  return places;
}

// A unit whose only host function is an explicit specialization: nvcc
// names its internal device entities after its process id and the
// source's modification time. Split one target per unit, compiled on two
// workers seconds apart, the parts must still name them alike, or a GPU
// that compiles the PTX finds no variable the host code registers.
TEST_F(RealNvccTest, SplitUnitsPartsShareOneCompileIdentityAsAWholeCompileDoes) {
  std::string proj = root_ + "/identity";
  ASSERT_TRUE(WriteFileAtomically(proj + "/nine.cu", testing::kPidNamedUnit).ok());
  // Three targets on two one-slot workers: the third part starts when one
  // of the first two is done, seconds later.
  const std::vector<std::string> flags = {"-Xcompiler=-fPIC",
                                          "--threads",
                                          "2",
                                          "-gencode",
                                          "arch=compute_90,code=sm_90",
                                          "-gencode",
                                          "arch=compute_100,code=sm_100",
                                          "-gencode",
                                          "arch=compute_100,code=compute_100"};
  WriteCompileCommand(nvcc_, proj, "nine.cu", flags, "nine.o");
  ProcessResult build =
      Client({"build", proj + "/compile_commands.json", "--coordinator", address_, "--library",
              "libnine.so", "-o", proj + "/out", "--split-architectures", "always"});
  ASSERT_EQ(build.exit_code, 0) << build.stdout_text << build.stderr_text;
  EXPECT_THAT(build.stdout_text, HasSubstr("(3 parts, merged here before the link)"));
  EXPECT_THAT(build.stdout_text, HasSubstr("e2e-a")) << "both workers compiled parts";
  EXPECT_THAT(build.stdout_text, HasSubstr("e2e-b")) << "both workers compiled parts";

  absl::StatusOr<std::string> merged = ReadFile(proj + "/obj/nine.o");
  ASSERT_TRUE(merged.ok());
  EXPECT_TRUE(CheckOneCompileIdentity(*merged, "nine.o").ok())
      << CheckOneCompileIdentity(*merged, "nine.o");
  absl::StatusOr<std::map<std::string, std::set<std::string>>> identities =
      CompileIdentitiesByPlace(*merged, "nine.o");
  ASSERT_TRUE(identities.ok()) << identities.status();
  EXPECT_EQ(identities->size(), 4u) << "three images and the host code name internal entities";

  CompileWith(nvcc_, proj, flags, "nine.cu", "whole.o");
  std::map<std::string, std::set<std::string>> ours = InternalNamesByPlace(proj + "/obj/nine.o");
  std::map<std::string, std::set<std::string>> whole = InternalNamesByPlace(proj + "/whole.o");
  ASSERT_EQ(ours.size(), whole.size());
  for (const auto& [place, names] : whole) {
    EXPECT_FALSE(names.empty()) << place;
    EXPECT_EQ(ours[place], names) << place << ": other internal names than a whole compile";
  }
  // What the host code registers (cuda::std's customization point objects)
  // is named so in the PTX a newer GPU compiles.
  for (const std::string& name : ours["host code"]) {
    EXPECT_TRUE(ours["compute_100 ptx"].count(name)) << "the PTX lacks " << name;
  }
}

// A manifest's [link] table is the link: here the static runtime, a
// SONAME and a library of the user's.
TEST_F(RealNvccTest, ManifestLinkTableIsTheLink) {
  std::string dir = root_ + "/linked";
  ASSERT_TRUE(WriteFileAtomically(dir + "/kernels.toml", R"([build]
output = "liblinked.so"
sources = ["k.cu"]
[link]
cudart = "static"
soname = "liblinked.so.1"
flags = ["-Wl,--no-as-needed"]
libraries = ["m"]
)")
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/k.cu",
                                  "__global__ void k(float* x) { x[0] = 1; }\n"
                                  "void Launch(float* x) { k<<<1, 1>>>(x); }\n")
                  .ok());
  ProcessResult build =
      Client({"build", dir + "/kernels.toml", "--coordinator", address_, "-o", dir + "/out"});
  ASSERT_EQ(build.exit_code, 0) << build.stdout_text << build.stderr_text;
  EXPECT_THAT(build.stdout_text,
              HasSubstr("  link      g++ -shared -Wl,-soname,liblinked.so.1 -Wl,--no-as-needed "
                        "[1 objects] -L"));
  EXPECT_THAT(build.stdout_text, HasSubstr(" -lcudart_static -ldl -lrt -lpthread -lm -o "));
  std::string dynamic = DynamicSection(dir + "/out/liblinked.so");
  EXPECT_THAT(dynamic, HasSubstr("Library soname: [liblinked.so.1]"));
  EXPECT_THAT(dynamic, HasSubstr("Shared library: [libm.so.6]"));
  EXPECT_THAT(dynamic, Not(HasSubstr("libcudart"))) << "the runtime is linked in statically";
}

// --verify rebuilds units here in the workers' sandbox and compares device
// code. A result the coordinator serves for unit a that is really unit b's
// object (a wrong cached result, as a lying or broken worker would leave)
// links silently without --verify and fails the build with it.
TEST_F(RealNvccTest, VerifyCatchesAWrongResultThatWouldOtherwiseBeLinked) {
  std::string dir = root_ + "/verify";
  ASSERT_TRUE(WriteFileAtomically(dir + "/kernels.toml",
                                  "[build]\noutput = \"libv.so\"\nsources = [\"a.cu\", \"b.cu\"]\n")
                  .ok());
  // Explicit instantiations only: their symbols are COMDAT, so a library
  // holding b's object twice still links (the wrong result goes unnoticed).
  ASSERT_TRUE(WriteFileAtomically(dir + "/a.cu",
                                  "template <int N> __global__ void a(float* x) { x[0] = N; }\n"
                                  "template __global__ void a<1>(float*);\n")
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/b.cu",
                                  "template <int N> __global__ void b(float* x) { x[1] = N; }\n"
                                  "template __global__ void b<2>(float*);\n")
                  .ok());
  const std::vector<std::string> build = {
      "build", dir + "/kernels.toml", "--coordinator", address_,
      "-o",    dir + "/out",          "--state-dir",   root_ + "/client-state"};
  std::vector<std::string> verify_all = build;
  verify_all.push_back("--verify=all");
  ProcessResult first = Client(verify_all);
  ASSERT_EQ(first.exit_code, 0) << first.stdout_text << first.stderr_text;
  EXPECT_THAT(first.stdout_text, HasSubstr("  verified a (e2e-"));
  EXPECT_THAT(first.stdout_text, HasSubstr("  verified b (e2e-"));
  EXPECT_THAT(first.stdout_text, HasSubstr("  verify    2 of 2 units rebuilt here in "));

  // Point unit a's cached result at unit b's object.
  absl::StatusOr<std::string> a_object = ReadFile(dir + "/out/obj/a.o");
  absl::StatusOr<std::string> b_object = ReadFile(dir + "/out/obj/b.o");
  ASSERT_TRUE(a_object.ok() && b_object.ok());
  const Digest a_digest = DigestOf(*a_object), b_digest = DigestOf(*b_object);
  int rewritten = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root_ + "/state")) {
    if (!entry.is_regular_file() || entry.path().string().find("/results/") == std::string::npos) {
      continue;
    }
    v1::TaskResult result;
    absl::StatusOr<std::string> bytes = ReadFile(entry.path().string());
    if (!bytes.ok() || !result.ParseFromString(*bytes) || result.outputs_size() != 1 ||
        FromProto(result.outputs(0).digest()) != a_digest) {
      continue;
    }
    *result.mutable_outputs(0)->mutable_digest() = ToProto(b_digest);
    ASSERT_TRUE(WriteFileAtomically(entry.path().string(), result.SerializeAsString()).ok());
    ++rewritten;
  }
  ASSERT_EQ(rewritten, 1) << "unit a's cached result";

  ProcessResult unverified = Client(build);
  ASSERT_EQ(unverified.exit_code, 0) << unverified.stdout_text << unverified.stderr_text;
  EXPECT_EQ(*ReadFile(dir + "/out/obj/a.o"), *b_object) << "the control: linked without a word";

  ProcessResult verified = Client(verify_all);
  EXPECT_EQ(verified.exit_code, 2) << verified.stdout_text;
  EXPECT_THAT(verified.stderr_text, HasSubstr("verify: unit a: the device code worker e2e-"));
  EXPECT_THAT(verified.stderr_text, HasSubstr("differs from a rebuild here with the same "
                                              "toolchain and inputs (the returned sm_100 cubin"));
  EXPECT_THAT(verified.stderr_text, HasSubstr("the library was not linked"));
  EXPECT_THAT(verified.stdout_text, Not(HasSubstr("distcc-cuda: built")));
}

TEST_F(RealNvccTest, CompileErrorOfTheRealNvccReachesTheUser) {
  std::string dir = root_ + "/broken";
  ASSERT_TRUE(WriteFileAtomically(dir + "/kernels.toml",
                                  "[build]\noutput = \"libbroken.so\"\nsources = [\"bad.cu\"]\n")
                  .ok());
  ASSERT_TRUE(
      WriteFileAtomically(dir + "/bad.cu", "__global__ void k(int* x) { *x = undefined_name; }\n")
          .ok());
  ProcessResult build =
      Client({"build", dir + "/kernels.toml", "--coordinator", address_, "-o", root_ + "/bout"});
  EXPECT_EQ(build.exit_code, 1);
  EXPECT_THAT(build.stdout_text, HasSubstr("error: unit bad failed on worker"));
  EXPECT_THAT(build.stdout_text, HasSubstr("nvcc exit code"));
  EXPECT_THAT(build.stdout_text,
              HasSubstr("bad.cu(1): error: identifier \"undefined_name\" is undefined"));
  EXPECT_THAT(build.stderr_text, HasSubstr("1 of 1 units failed to compile"));
}

TEST_F(RealNvccTest, StatusListsBothWorkersWithTheirToolchain) {
  ProcessResult status = Client({"status", "--coordinator", address_});
  ASSERT_EQ(status.exit_code, 0) << status.stderr_text;
  EXPECT_THAT(status.stdout_text, HasSubstr("2 workers"));
  EXPECT_THAT(status.stdout_text, HasSubstr("e2e-a"));
  EXPECT_THAT(status.stdout_text, HasSubstr("nvcc 13.0"));
}

// A second real nvcc of another CUDA release (scripts/second_nvcc installs
// one from PyPI's wheels; scripts/test exports DISTCC_SECOND_NVCC).
TEST_F(RealNvccTest, SecondReleaseTakesOnlyBuildsPinnedToIt) {
  std::optional<SecondRelease> pair = Second();
  if (!pair) GTEST_SKIP() << kNeedsSecond;
  const std::string& second = pair->nvcc;
  const v1::ToolchainFingerprint* ours = &pair->ours;
  const std::string release = pair->theirs.nvcc_release();

  // Pinned to this machine's release, the second nvcc's worker refuses to start.
  auto refused = testing::BackgroundProcess::Start(
      {testing::BinaryPath("distcc-cuda-worker"), "--coordinator", address_, "--name", "refused",
       "--nvcc", second, "--require-nvcc", ours->nvcc_release(), "--work-dir", root_ + "/refused"},
      root_ + "/refused.log");
  ASSERT_TRUE(refused.ok());
  absl::StatusOr<std::string> line = (*refused)->WaitForLog("is required", absl::Seconds(60));
  ASSERT_TRUE(line.ok()) << (*refused)->Log();
  EXPECT_THAT((*refused)->Log(),
              HasSubstr(absl::StrCat("nvcc ", ours->nvcc_release(), " is required, but ", second,
                                     " is release ", release)));
  // Pinned to its own release, it joins.
  auto joined = testing::BackgroundProcess::Start(
      {testing::BinaryPath("distcc-cuda-worker"), "--coordinator", address_, "--name", "second",
       "--slots", "1", "--memory-cap", "4GiB", "--nvcc", second, "--require-nvcc", release,
       "--work-dir", root_ + "/second"},
      root_ + "/second.log");
  ASSERT_TRUE(joined.ok());
  ASSERT_TRUE((*joined)->WaitForLog("registered", absl::Seconds(60)).ok()) << (*joined)->Log();

  std::string dir = root_ + "/pinned";
  ASSERT_TRUE(WriteFileAtomically(dir + "/kernels.toml", R"(
[build]
output = "libpinned.so"
flags = ["-O3", "-std=c++17"]

[[instantiations]]
name = "scale"
unit = "scale_{n}"
headers = ["scale.cuh"]
text = "template __global__ void Scale<{n}>(float*);"
per_unit = 1

[instantiations.axes]
n = [1, 2, 3]
)")
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/scale.cuh",
                                  "template <int N> __global__ void Scale(float* x) {\n"
                                  "  x[threadIdx.x] *= N;\n}\n")
                  .ok());
  // A build pinned to this machine's nvcc never reaches the second release.
  ProcessResult ours_build =
      Client({"build", dir + "/kernels.toml", "--coordinator", address_, "-o", root_ + "/ours",
              "--nvcc", nvcc_, "--require-nvcc", ours->nvcc_release()});
  ASSERT_EQ(ours_build.exit_code, 0) << ours_build.stdout_text << ours_build.stderr_text;
  EXPECT_THAT(ours_build.stdout_text, HasSubstr("(2 workers with this toolchain)"));
  EXPECT_THAT(ours_build.stdout_text, ::testing::Not(HasSubstr("second")));
  // Pinned to the second release, it compiles there and nowhere else.
  ProcessResult theirs_build =
      Client({"build", dir + "/kernels.toml", "--coordinator", address_, "-o", root_ + "/theirs",
              "--nvcc", second, "--require-nvcc", release});
  ASSERT_EQ(theirs_build.exit_code, 0) << theirs_build.stdout_text << theirs_build.stderr_text;
  EXPECT_THAT(theirs_build.stdout_text, HasSubstr("units     3 (3 compiled, 0 cached, 0 failed)"));
  EXPECT_THAT(theirs_build.stdout_text, HasSubstr("workers   1 (second: 3)"));
  ProcessResult inspect = Client({"inspect", root_ + "/theirs/libpinned.so"});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.stderr_text;
  EXPECT_THAT(inspect.stdout_text, HasSubstr("sm_100 cubin\n"));
}

// A compile is what its command asked: a compile_commands.json entry made
// for the second release's nvcc is never compiled with this build's nvcc;
// the build refuses before anything runs, naming both and --nvcc.
TEST_F(RealNvccTest, ACompileCommandsEntryOfAnotherReleaseIsRefusedNotSubstituted) {
  std::optional<SecondRelease> pair = Second();
  if (!pair) GTEST_SKIP() << kNeedsSecond;
  const std::string& second = pair->nvcc;
  const v1::ToolchainFingerprint* theirs = &pair->theirs;
  const v1::ToolchainFingerprint* ours = &pair->ours;
  const std::string proj = root_ + "/their-database";
  ASSERT_TRUE(
      WriteFileAtomically(proj + "/k.cu", "__global__ void K(float* x) { x[0] = 1; }\n").ok());
  WriteCompileCommand(second, proj, "k.cu", {"-O3", "-arch=sm_100"}, "k.o");
  ProcessResult build = Client({"build", proj + "/compile_commands.json", "--coordinator", address_,
                                "--library", "libk.so", "-o", proj + "/out", "--nvcc", nvcc_});
  EXPECT_NE(build.exit_code, 0) << build.stdout_text << build.stderr_text;
  EXPECT_THAT(build.stderr_text, HasSubstr(absl::StrCat("1 entry (k.cu) are compiled with ", second,
                                                        ", nvcc ", theirs->nvcc_release())));
  EXPECT_THAT(build.stderr_text, HasSubstr(absl::StrCat("but this build's nvcc is ", nvcc_,
                                                        ", nvcc ", ours->nvcc_release())));
  EXPECT_THAT(build.stderr_text, HasSubstr("build with --nvcc " + second));
  EXPECT_FALSE(fs::exists(proj + "/out/libk.so"));
  EXPECT_FALSE(fs::exists(proj + "/obj/k.o"));
}

// Ctrl-C of an embedded build: every process the build started (bwrap,
// nvcc, cicc, ptxas, cc1plus) is gone within 2 s, the client says what it
// cancelled and dies of SIGINT, as an interrupted program should.
TEST(EmbeddedCancelTest, CtrlCLeavesNoCompilerOfTheBuildRunning) {
  const std::string nvcc = testing::RealNvccPath();
  if (nvcc.empty()) GTEST_SKIP() << "needs the real nvcc at /usr/local/cuda/bin/nvcc";
  const std::string root = testing::NewTempDir("ctrl-c-");
  ASSERT_TRUE(WriteFileAtomically(root + "/src/slow.cu", testing::SlowUnit(60)).ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/src/kernels.toml", R"([build]
output = "libslow.so"
flags = ["-O3", "-gencode", "arch=compute_100,code=sm_100"]
sources = ["slow.cu"]
)")
                  .ok());
  auto client = testing::BackgroundProcess::Start(
      {testing::BinaryPath("distcc-cuda"), "build", root + "/src/kernels.toml", "-o", root + "/out",
       "--state-dir", root + "/state", "--nvcc", nvcc, "--slots", "1"},
      root + "/client.log");
  ASSERT_TRUE(client.ok()) << client.status();
  // Wait until the compile is deep in nvcc's pipeline.
  std::vector<testing::ProcessId> build;
  for (int i = 0; i < 1200; ++i) {
    build = testing::DescendantsOf((*client)->pid());
    bool compiling = std::any_of(build.begin(), build.end(), [](const testing::ProcessId& p) {
      return p.command == "cicc" || p.command == "ptxas";
    });
    if (compiling) break;
    build.clear();
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_FALSE(build.empty()) << "no cicc or ptxas under the client within 60 s\n"
                              << (*client)->Log();
  absl::Time interrupted = absl::Now();
  absl::StatusOr<int> ended = (*client)->Stop(SIGINT, absl::Seconds(10));
  ASSERT_TRUE(ended.ok()) << (*client)->Log();
  std::vector<testing::ProcessId> left = testing::StillRunning(build);
  while (!left.empty() && absl::Now() - interrupted < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(20));
    left = testing::StillRunning(build);
  }
  absl::Duration all_gone = absl::Now() - interrupted;
  EXPECT_TRUE(left.empty()) << testing::Describe(left) << " outlived the build";
  EXPECT_LT(all_gone, absl::Seconds(5)) << "of " << testing::Describe(build);
  std::cout << "Ctrl-C to the last of " << build.size()
            << " processes of the build gone: " << absl::FormatDuration(all_gone) << std::endl;
  EXPECT_TRUE(WIFSIGNALED(*ended) && WTERMSIG(*ended) == SIGINT) << *ended;
  std::string log = (*client)->Log();
  EXPECT_THAT(log, HasSubstr("Ctrl-C: cancelling the build (Ctrl-C again quits at once)"));
  EXPECT_THAT(log, HasSubstr("build cancelled (Ctrl-C)"));
  EXPECT_THAT(log, HasSubstr("1 units were compiling; they are stopped with this process"));
  // The sandbox went with it.
  std::error_code error;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root + "/state", error)) {
    EXPECT_FALSE(absl::StartsWith(entry.path().filename().string(), "task-")) << entry.path();
  }
}

}  // namespace
}  // namespace distcc_cuda
