// SPDX-License-Identifier: Apache-2.0
// A coordinator's toolkit is hostile until checked (issue 55): the real
// client (`distcc-cuda toolkit install RELEASE --coordinator`) and the real
// worker (`distcc-cuda-worker --served-toolkit RELEASE`) against a scripted
// coordinator on loopback (tests/support/scripted_coordinator.h) that
// serves what each case makes it: manifests that climb out through links,
// paths of every wrong shape, sizes that lie, blobs that trickle or never
// end, escape codes, a toolkit whose nvcc tries to write outside. Each case
// asserts that a victim file beside the toolkit's folder keeps its content
// and mode, that nothing of a failed fetch stays, that the program ended in
// bounded time and memory, and that its message says what was refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "common/store/digest.h"
#include "tests/support/background_process.h"
#include "tests/support/scripted_coordinator.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ScriptedCoordinator;

constexpr char kVictimContent[] = "the victim's own content\n";
constexpr int64_t kMiB = int64_t{1} << 20;

// A served toolkit's manifest as a case writes it, its blobs stored on the
// scripted coordinator as the lines are added.
class ManifestWriter {
 public:
  explicit ManifestWriter(ScriptedCoordinator& coordinator) : coordinator_(coordinator) {}

  // A file line for `content`, stored; `mode` is the manifest's x or -.
  ManifestWriter& File(const std::string& path, const std::string& content,
                       const std::string& mode = "-") {
    const Digest digest = coordinator_.Put(content);
    return Line(absl::StrCat("file ", digest.hash, " ", digest.size_bytes, " ", mode, " ", path));
  }
  ManifestWriter& Link(const std::string& path, const std::string& target) {
    return Line(absl::StrCat("link ", target, " ", path));
  }
  ManifestWriter& Line(const std::string& line) {
    absl::StrAppend(&text_, line, "\n");
    return *this;
  }
  // The honest part of every toolkit: an nvcc that says it is 13.2.86,
  // with the user it ran as in its build, and tries to write `marker`.
  ManifestWriter& Nvcc(const std::string& marker) {
    return File("bin/nvcc",
                absl::StrCat("#!/bin/sh\n"
                             "echo pwned > '",
                             marker,
                             "' 2>/dev/null\n"
                             "echo 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                             "echo 'Cuda compilation tools, release 13.2, V13.2.86'\n"
                             "echo \"Build cuda_13.2.r13.2/compiler.uid$(id -u)_0\"\n"),
                "x");
  }
  const std::string& text() const { return text_; }

  // Serves the manifest (stored, its lines in the order of their paths, as
  // a coordinator writes them) as CUDA `version`; what is listed.
  v1::ServedToolkit Serve(const std::string& version = "13.2.86") {
    v1::ServedToolkit toolkit;
    toolkit.set_version(version);
    toolkit.set_release("13.2");
    *toolkit.mutable_manifest() = ToProto(coordinator_.Put(Sorted()));
    toolkit.set_files(1);
    toolkit.set_added_from("/opt/cuda-13.2");
    coordinator_.Serve({toolkit});
    return toolkit;
  }

 private:
  std::string Sorted() const {
    std::vector<std::string> lines = absl::StrSplit(text_, '\n', absl::SkipEmpty());
    std::stable_sort(lines.begin() + 1, lines.end(),
                     [](const std::string& a, const std::string& b) {
                       return a.substr(a.rfind(' ') + 1) < b.substr(b.rfind(' ') + 1);
                     });
    return absl::StrJoin(lines, "\n") + "\n";
  }

  ScriptedCoordinator& coordinator_;
  std::string text_ = "distcc-cuda toolkit manifest 1\n";
};

class HostileCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::NewTempDir("hostile-coordinator-");
    coordinator_ = ScriptedCoordinator::Start();
    victim_ = root_ + "/victim";
    ASSERT_TRUE(WriteNewFile(victim_, kVictimContent, 0600).ok());
    marker_ = root_ + "/marker";
  }

  void TearDown() override {
    // Whatever the case, the victim beside the toolkit's folder is as it was.
    absl::StatusOr<std::string> content = ReadFile(victim_);
    ASSERT_TRUE(content.ok()) << content.status();
    EXPECT_EQ(*content, kVictimContent) << "the coordinator's bytes reached a file outside";
    struct stat info {};
    ASSERT_EQ(lstat(victim_.c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 07777, 0600u) << "the victim's mode changed";
    EXPECT_TRUE(S_ISREG(info.st_mode));
  }

  ManifestWriter Toolkit() { return ManifestWriter(*coordinator_); }

  // `distcc-cuda toolkit install 13.2 --coordinator ...` with `flags`.
  ProcessResult Install(const std::vector<std::string>& flags = {},
                        const std::string& release = "13.2") {
    ProcessSpec spec;
    spec.argv = {testing::BinaryPath("distcc-cuda"),
                 "toolkit",
                 "install",
                 release,
                 "--coordinator",
                 coordinator_->address(),
                 "--toolkit-dir",
                 root_ + "/toolkits"};
    spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
    spec.environment = {{"HOME", root_ + "/home"}};
    spec.timeout = absl::Minutes(3);
    return Timed(spec);
  }

  // distcc-cuda-worker --served-toolkit `wanted`: it fetches, fingerprints,
  // registers and is refused (or stops before).
  // (`wanted` empty: no --served-toolkit on the command line.)
  ProcessResult Worker(const std::string& wanted, const std::vector<std::string>& flags = {}) {
    ProcessSpec spec;
    spec.argv = {testing::BinaryPath("distcc-cuda-worker"),
                 "--coordinator",
                 coordinator_->address(),
                 "--served-toolkit=" + wanted,
                 "--work-dir",
                 root_ + "/work",
                 "--name",
                 "fetcher",
                 "--slots",
                 "1",
                 "--memory-cap",
                 "1GiB"};
    if (wanted.empty()) spec.argv.erase(spec.argv.begin() + 3);
    spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
    spec.timeout = absl::Minutes(3);
    return Timed(spec);
  }

  ProcessResult Timed(const ProcessSpec& spec) {
    const absl::Time start = absl::Now();
    ProcessResult result = testing::RunToEnd(spec);
    took_ = absl::Now() - start;
    return result;
  }

  // Nothing of a fetch stays in the client's toolkit folder or the
  // worker's toolkit cache: no scratch folder, no toolkit.
  void ExpectNothingLeft() {
    for (const std::string& folder : {root_ + "/toolkits", root_ + "/work/toolkits"}) {
      std::error_code error;
      for (const auto& entry : fs::directory_iterator(folder, error)) {
        const std::string name = entry.path().filename().string();
        EXPECT_TRUE(name == "lock") << entry.path() << " was left after a refused fetch";
      }
    }
  }

  // A refused fetch: exit 1 and `why` said, in bounded time and memory,
  // with no escape code, nothing left, the served nvcc never run.
  void ExpectRefused(const ProcessResult& run, const std::string& why,
                     absl::Duration within = absl::Seconds(30)) {
    EXPECT_NE(run.exit_code, 0) << run.stdout_text << run.stderr_text;
    EXPECT_THAT(run.stderr_text, HasSubstr(why)) << run.stdout_text;
    EXPECT_LT(took_, within);
    EXPECT_LT(run.peak_rss_bytes, 256 * kMiB) << "peak RSS of the program";
    ExpectSafeText(run);
    ExpectNothingLeft();
    EXPECT_FALSE(fs::exists(marker_)) << "the served nvcc ran outside a sandbox";
  }

  static void ExpectSafeText(const ProcessResult& run) {
    for (const std::string* text : {&run.stdout_text, &run.stderr_text}) {
      EXPECT_THAT(*text, AllOf(Not(HasSubstr("\x1b")), Not(HasSubstr("\x07"))))
          << "a coordinator's escape code reached the terminal";
    }
  }

  // The toolchain the worker fingerprinted and registered with.
  std::string RegisteredBuild() {
    std::vector<v1::RegisterWorkerRequest> registered = coordinator_->registrations();
    return registered.empty() ? "" : registered.back().toolchain().nvcc_build();
  }

  std::string root_;
  std::string victim_;
  std::string marker_;
  absl::Duration took_;
  std::unique_ptr<ScriptedCoordinator> coordinator_;
};

// The first finding: a deep link inside by its text (up -> d1),
// and a top-level link whose target is inside by its text too but climbs
// through that link, `climb` folders up from the toolkit, to the victim; a
// file beside it that the old download wrote through it. The parser before
// this one took the manifest.
std::string DeepLinkAttack(ManifestWriter& toolkit, const std::string& marker, int climb) {
  std::vector<std::string> deep;
  for (int i = 1; i <= 24; ++i) deep.push_back(absl::StrCat("d", i));
  const std::vector<std::string> up(23, "..");
  const std::vector<std::string> out(climb + 1, "..");
  const std::string target =
      absl::StrCat(absl::StrJoin(deep, "/"), "/up/", absl::StrJoin(out, "/"), "/victim");
  toolkit.Nvcc(marker)
      .Link(absl::StrJoin(deep, "/") + "/up", absl::StrJoin(up, "/"))
      .Link("evil.part", target)
      .File("evil", "the coordinator's bytes\n", "x");
  return absl::StrCat("link evil.part -> ", target, " leads through ", absl::StrJoin(deep, "/"),
                      "/up, which is not a folder of the toolkit but a link");
}

TEST_F(HostileCoordinatorTest, AnHonestToolkitIsInstalledAndItsNvccCheckedInASandbox) {
  ManifestWriter toolkit = Toolkit();
  toolkit.Nvcc(marker_)
      .File("include/cuda.h", "#define CUDA_VERSION 13020\n")
      .Link("lib64", "targets/x86_64-linux/lib")
      .File("targets/x86_64-linux/lib/libcudart.so.13", "ELF", "x")
      .Link("targets/x86_64-linux/lib/libcudart.so", "libcudart.so.13");
  const v1::ServedToolkit served = toolkit.Serve();
  ProcessResult run = Install();
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  const std::string home = root_ + "/toolkits/cuda-13.2.86";
  EXPECT_THAT(run.stdout_text, HasSubstr(home));
  EXPECT_FALSE(fs::exists(marker_)) << "the nvcc check ran outside a sandbox";
  EXPECT_THAT(run.stderr_text, HasSubstr("taken unpinned"));
  EXPECT_THAT(run.stderr_text, HasSubstr("13.2@sha256:" + served.manifest().hash()));
  struct stat info {};
  ASSERT_EQ(stat((home + "/bin/nvcc").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0755u);
  ASSERT_EQ(stat((home + "/include/cuda.h").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0644u);
  EXPECT_TRUE(IsRegularFile(home + "/lib64/libcudart.so")) << "links made, and resolved inside";
  ExpectSafeText(run);
}

TEST_F(HostileCoordinatorTest, APinnedToolkitIsInstalledWithoutANotice) {
  ManifestWriter toolkit = Toolkit();
  const v1::ServedToolkit served = toolkit.Nvcc(marker_).Serve();
  ProcessResult run = Install({}, "13.2@sha256:" + served.manifest().hash());
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  EXPECT_THAT(run.stderr_text, Not(HasSubstr("unpinned")));
  EXPECT_FALSE(fs::exists(marker_));
}

TEST_F(HostileCoordinatorTest, AWronglyPinnedToolkitIsRefusedUnreadByTheClient) {
  ManifestWriter toolkit = Toolkit();
  const v1::ServedToolkit served = toolkit.Nvcc(marker_).Serve();
  const std::string pin(64, 'a');
  ProcessResult run = Install({}, "13.2@sha256:" + pin);
  ExpectRefused(run, "not the pinned 13.2@sha256:" + pin);
  EXPECT_THAT(run.stderr_text, HasSubstr("sha256:" + served.manifest().hash()));
  EXPECT_THAT(run.stderr_text, Not(HasSubstr("PyPI")));
  EXPECT_EQ(coordinator_->reads(FromProto(served.manifest())), 0);
}

TEST_F(HostileCoordinatorTest, AWronglyPinnedToolkitIsRefusedUnreadByTheWorker) {
  ManifestWriter toolkit = Toolkit();
  const v1::ServedToolkit served = toolkit.Nvcc(marker_).Serve();
  ProcessResult run = Worker("13.2@sha256:" + std::string(64, 'b'));
  ExpectRefused(run, "not the pinned 13.2@sha256:");
  EXPECT_EQ(coordinator_->reads(FromProto(served.manifest())), 0);
}

TEST_F(HostileCoordinatorTest, PinsInTheConfigFileAreHonouredByTheWorkerAndTheClient) {
  ManifestWriter toolkit = Toolkit();
  const v1::ServedToolkit served = toolkit.Nvcc(marker_).Serve();
  const std::string other = "13.2@sha256:" + std::string(64, 'e');
  const std::string config = root_ + "/distcc-cuda.toml";
  ASSERT_TRUE(
      WriteFileAtomically(config, absl::StrCat("[worker]\nserved-toolkit = \"", other,
                                               "\"\n[client]\ntoolkit-pin = \"", other, "\"\n"))
          .ok());
  ExpectRefused(Worker("", {"--config", config}), "not the pinned " + other);
  ExpectRefused(Install({"--config", config}), "not the pinned " + other);
  // The command line's word wins over the file's.
  ProcessResult pinned = Install({"--config", config}, "13.2@sha256:" + served.manifest().hash());
  EXPECT_EQ(pinned.exit_code, 0) << pinned.stderr_text;
  EXPECT_EQ(coordinator_->reads(FromProto(served.manifest())), 1);
}

TEST_F(HostileCoordinatorTest, TheWorkerFingerprintsAFetchedToolkitInItsSandbox) {
  ManifestWriter toolkit = Toolkit();
  const v1::ServedToolkit served = toolkit.Nvcc(marker_).Serve();
  ProcessResult run = Worker("13.2");
  EXPECT_NE(run.exit_code, 0) << "the scripted coordinator refuses every worker";
  EXPECT_THAT(run.stderr_text, HasSubstr("takes no workers"));
  EXPECT_THAT(run.stdout_text + run.stderr_text,
              HasSubstr("--served-toolkit 13.2@sha256:" + served.manifest().hash()))
      << "an unpinned fetch says how to pin it";
  const std::string build = RegisteredBuild();
  ASSERT_THAT(build, HasSubstr("compiler.uid")) << run.stderr_text;
  if (geteuid() == 0) {
    EXPECT_THAT(build, Not(HasSubstr("compiler.uid0_"))) << "it ran as root";
  }
  EXPECT_FALSE(fs::exists(marker_)) << "the fingerprint ran outside the sandbox";
  ExpectSafeText(run);
}

TEST_F(HostileCoordinatorTest, AnUnsandboxedWorkerRefusesAnUnpinnedToolkitBeforeFetching) {
  ManifestWriter toolkit = Toolkit();
  const v1::ServedToolkit served = toolkit.Nvcc(marker_).Serve();
  ProcessResult run = Worker("13.2", {"--insecure-no-sandbox"});
  ExpectRefused(run, "pin it");
  EXPECT_EQ(run.exit_code, 2) << "a flag is wrong";
  EXPECT_EQ(coordinator_->reads(FromProto(served.manifest())), 0);
}

TEST_F(HostileCoordinatorTest, AnUnsandboxedWorkerRunsAPinnedToolkitAsItsOperatorSaid) {
  ManifestWriter toolkit = Toolkit();
  const v1::ServedToolkit served = toolkit.Nvcc(marker_).Serve();
  ProcessResult run = Worker("13.2@sha256:" + served.manifest().hash(), {"--insecure-no-sandbox"});
  EXPECT_THAT(run.stderr_text, HasSubstr("takes no workers"));
  EXPECT_THAT(RegisteredBuild(), HasSubstr("compiler.uid")) << run.stderr_text;
  // The operator pinned it: its nvcc ran as the worker does, which is what
  // shows that the sandboxed cases' marker could have been written.
  EXPECT_TRUE(fs::exists(marker_));
  EXPECT_THAT(run.stdout_text + run.stderr_text, Not(HasSubstr("unpinned")));
}

TEST_F(HostileCoordinatorTest, TheDeepLinkAttackIsRefusedByTheClient) {
  // TOOLKITS/.installing-X/cuda: three folders up is this case's root.
  ManifestWriter toolkit = Toolkit();
  const std::string refusal = DeepLinkAttack(toolkit, marker_, 3);
  toolkit.Serve();
  ExpectRefused(Install(), refusal);
}

TEST_F(HostileCoordinatorTest, TheDeepLinkAttackIsRefusedByTheWorker) {
  // WORK/toolkits/.fetching-X/cuda: four folders up.
  ManifestWriter toolkit = Toolkit();
  const std::string refusal = DeepLinkAttack(toolkit, marker_, 4);
  toolkit.Serve();
  ExpectRefused(Worker("13.2"), refusal);
}

TEST_F(HostileCoordinatorTest, AFileWrittenThroughALinkOutIsRefused) {
  // The old download wrote FILE.part with a truncating open that followed
  // a link there, then set the mode through it.
  ManifestWriter toolkit = Toolkit();
  toolkit.Nvcc(marker_).Link("evil.part", "../../../victim").File("evil", "bytes", "x");
  toolkit.Serve();
  ExpectRefused(Install(), "link evil.part -> ../../../victim leads out of the toolkit");
  ManifestWriter same_name = Toolkit();
  same_name.Nvcc(marker_).Link("evil", "../../../victim").File("evil", "bytes", "x");
  same_name.Serve();
  ExpectRefused(Worker("13.2"), "names evil twice");
}

TEST_F(HostileCoordinatorTest, PathsThatClimbOrAreAbsoluteAreRefused) {
  for (const std::string& path : {std::string("../victim"), std::string("bin/../../victim"),
                                  victim_, std::string("./bin/x")}) {
    ManifestWriter toolkit = Toolkit();
    toolkit.Nvcc(marker_).File(path, "the coordinator's bytes");
    toolkit.Serve();
    ExpectRefused(Install(), "is not valid");
  }
}

TEST_F(HostileCoordinatorTest, EmptyDoubledAndNulNamesAreRefused) {
  const Digest digest = coordinator_->Put("x");
  const std::string head = absl::StrCat("file ", digest.hash, " 1 - ");
  for (const std::string& line :
       {head, head + "a//b", head + "bin/", head + std::string("a\0b", 3), head + "a b"}) {
    ManifestWriter toolkit = Toolkit();
    toolkit.Nvcc(marker_).Line(line);
    toolkit.Serve();
    ExpectRefused(Worker("13.2"), "is not valid");
  }
}

TEST_F(HostileCoordinatorTest, AVeryLongPathIsRefusedInLinearTime) {
  // 80,000 names: the old check walked every parent of every path.
  std::vector<std::string> names(80000, "a");
  ManifestWriter toolkit = Toolkit();
  toolkit.Nvcc(marker_).File(absl::StrJoin(names, "/"), "x");
  toolkit.Serve();
  ExpectRefused(Install(), "is not valid", absl::Seconds(10));
  ExpectRefused(Worker("13.2"), "is not valid", absl::Seconds(10));
}

TEST_F(HostileCoordinatorTest, APathDeeperThanAnyToolkitsIsRefused) {
  std::vector<std::string> names(40, "d");
  ManifestWriter toolkit = Toolkit();
  toolkit.Nvcc(marker_).File(absl::StrJoin(names, "/") + "/f", "x");
  toolkit.Serve();
  ExpectRefused(Install(), "is not valid");
}

TEST_F(HostileCoordinatorTest, LinksOutAbsoluteOrToTheToolkitItselfAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bin/x", "../../victim"}, {"x", "/etc/passwd"}, {"x", "."}, {"bin/x", ".."}};
  for (const auto& [path, target] : cases) {
    ManifestWriter toolkit = Toolkit();
    toolkit.Nvcc(marker_).Link(path, target);
    toolkit.Serve();
    ExpectRefused(Install(), path);
  }
}

TEST_F(HostileCoordinatorTest, AFileBelowALinkIsRefused) {
  ManifestWriter toolkit = Toolkit();
  toolkit.Nvcc(marker_).Link("lib64", "bin").File("lib64/evil", "bytes");
  toolkit.Serve();
  ExpectRefused(Worker("13.2"), "below the link lib64");
}

TEST_F(HostileCoordinatorTest, ALinkThroughAnotherLinkIsRefused) {
  ManifestWriter toolkit = Toolkit();
  toolkit.Nvcc(marker_).Link("up", "bin").Link("escape", "up/../../victim");
  toolkit.Serve();
  ExpectRefused(Install(), "leads through up, which is not a folder of the toolkit but a link");
}

TEST_F(HostileCoordinatorTest, ACycleOfLinksAndALinkToNothingAreRefused) {
  ManifestWriter cycle = Toolkit();
  cycle.Nvcc(marker_).Link("a", "b").Link("b", "a");
  cycle.Serve();
  ExpectRefused(Install(), "cycle of links");
  ManifestWriter nothing = Toolkit();
  nothing.Nvcc(marker_).Link("lib64", "targets/lib").Link("lib", "bin/cuda");
  nothing.Serve();
  ExpectRefused(Worker("13.2"), "link lib -> bin/cuda leads to nothing the toolkit holds");
}

TEST_F(HostileCoordinatorTest, APathGivenTwiceOrAFileWhereAFolderIsAreRefused) {
  ManifestWriter twice = Toolkit();
  twice.Nvcc(marker_).File("include/a.h", "1").File("include/a.h", "2");
  twice.Serve();
  ExpectRefused(Install(), "names include/a.h twice");
  ManifestWriter below = Toolkit();
  below.Nvcc(marker_).File("include", "1").File("include/a.h", "2");
  below.Serve();
  ExpectRefused(Install(), "below the file include");
}

TEST_F(HostileCoordinatorTest, SetuidAndOtherModesAreRefused) {
  const Digest digest = coordinator_->Put("x");
  for (const std::string mode : {"4755", "s", "X", "xx"}) {
    ManifestWriter toolkit = Toolkit();
    toolkit.Nvcc(marker_).Line(absl::StrCat("file ", digest.hash, " 1 ", mode, " bin/su"));
    toolkit.Serve();
    ExpectRefused(Install(), "is not valid");
  }
}

TEST_F(HostileCoordinatorTest, EscapeCodesInAPathOrAListingNeverReachTheTerminal) {
  ManifestWriter toolkit = Toolkit();
  toolkit.Nvcc(marker_).File("bin/\x1b]0;pwned\x07\x1b[2J", "x");
  v1::ServedToolkit served = toolkit.Serve();
  ExpectRefused(Install(), "is not valid");
  ExpectRefused(Worker("13.2"), "is not valid");
  // A listing of escape codes: nothing chosen, its words made safe (12.8,
  // which PyPI has no compiler for: nothing to fall back on).
  served.set_version("12.8.93\x1b[31m");
  served.set_added_from("\x1b]0;retitled\x07");
  coordinator_->Serve({served});
  ExpectRefused(Install({}, "12.8"), "serves no CUDA 12.8");
}

TEST_F(HostileCoordinatorTest, ABlobLongerThanItsDigestEndsAtItsDeclaredSize) {
  ManifestWriter toolkit = Toolkit();
  const Digest declared = DigestOf("seven b");
  ScriptedCoordinator::BlobScript longer;
  longer.generated_bytes = 256 * kMiB;
  coordinator_->Script(declared, longer);
  toolkit.Nvcc(marker_).Line(absl::StrCat("file ", declared.hash, " 7 - include/long.h"));
  toolkit.Serve();
  ExpectRefused(Install(), "include/long.h");
  // Ended at the first chunk past the declared size (what gRPC's windows
  // let through meanwhile is a few MiB).
  EXPECT_LT(coordinator_->bytes_sent(), 32 * kMiB) << "the read was not ended";
}

TEST_F(HostileCoordinatorTest, ABlobShorterThanItsDigestOrOtherBytesAreRefused) {
  ManifestWriter toolkit = Toolkit();
  const Digest declared{std::string(64, 'c'), 10 * kMiB};
  ScriptedCoordinator::BlobScript other;
  other.generated_bytes = 10 * kMiB;
  coordinator_->Script(declared, other);
  toolkit.Nvcc(marker_).Line(
      absl::StrCat("file ", declared.hash, " ", 10 * kMiB, " - lib64/libcudart.so"));
  toolkit.Serve();
  ExpectRefused(Worker("13.2"), "does not match the manifest's digest");
}

TEST_F(HostileCoordinatorTest, AToolkitAboveTheSizeLimitIsRefusedBeforeItsFirstByte) {
  ManifestWriter toolkit = Toolkit();
  const Digest huge{std::string(64, 'd'), int64_t{10} << 30};
  ScriptedCoordinator::BlobScript endless;
  endless.generated_bytes = 64 * kMiB;
  endless.endless = true;
  coordinator_->Script(huge, endless);
  toolkit.Nvcc(marker_).Line(
      absl::StrCat("file ", huge.hash, " ", huge.size_bytes, " x nvvm/bin/cicc"));
  toolkit.Serve();
  ExpectRefused(Install(), "--toolkit-max-size");
  ExpectRefused(Worker("13.2"), "--toolkit-max-size");
  EXPECT_EQ(coordinator_->reads(huge), 0) << "not a byte of it was asked for";
}

TEST_F(HostileCoordinatorTest, AToolkitLargerThanTheWorkersCacheIsRefusedBeforeItsFirstByte) {
  ManifestWriter toolkit = Toolkit();
  const Digest large{std::string(64, 'e'), 300 * kMiB};
  toolkit.Nvcc(marker_).Line(
      absl::StrCat("file ", large.hash, " ", large.size_bytes, " x nvvm/bin/cicc"));
  toolkit.Serve();
  ExpectRefused(Worker("13.2", {"--toolkit-cache-size", "200MiB"}), "--toolkit-cache-size");
  EXPECT_EQ(coordinator_->reads(large), 0);
}

TEST_F(HostileCoordinatorTest, ABlobThatStallsEndsAtTheStallLimit) {
  ManifestWriter toolkit = Toolkit();
  const Digest stalled{std::string(64, 'f'), kMiB};
  ScriptedCoordinator::BlobScript silent;
  silent.generated_bytes = kMiB;
  silent.pause = absl::Minutes(5);
  coordinator_->Script(stalled, silent);
  toolkit.Nvcc(marker_).Line(absl::StrCat("file ", stalled.hash, " ", kMiB, " - include/slow.h"));
  toolkit.Serve();
  ExpectRefused(Install({"--toolkit-stall-timeout", "2s"}), "--toolkit-stall-timeout",
                absl::Seconds(15));
  ExpectRefused(Worker("13.2", {"--toolkit-stall-timeout", "2s"}), "--toolkit-stall-timeout",
                absl::Seconds(15));
}

TEST_F(HostileCoordinatorTest, ABlobThatTricklesEndsAtTheFetchDeadline) {
  ManifestWriter toolkit = Toolkit();
  const Digest trickle{std::string(64, '1'), kMiB};
  ScriptedCoordinator::BlobScript byte_by_byte;
  byte_by_byte.generated_bytes = kMiB;
  byte_by_byte.chunk_bytes = 1;
  byte_by_byte.pause = absl::Milliseconds(200);
  coordinator_->Script(trickle, byte_by_byte);
  toolkit.Nvcc(marker_).Line(absl::StrCat("file ", trickle.hash, " ", kMiB, " - include/slow.h"));
  toolkit.Serve();
  ExpectRefused(Install({"--toolkit-fetch-timeout", "3s", "--toolkit-stall-timeout", "2s"}),
                "--toolkit-fetch-timeout", absl::Seconds(15));
  ExpectRefused(Worker("13.2", {"--toolkit-fetch-timeout", "3s"}), "--toolkit-fetch-timeout",
                absl::Seconds(15));
}

TEST_F(HostileCoordinatorTest, EmptyFilesUnderManyFoldersAreRefusedBeforeAFolderIsMade) {
  // 0 bytes declared, yet 21,000 folders (and their blocks and inodes)
  // before the first transfer: refused by the folders' count.
  ManifestWriter toolkit = Toolkit();
  toolkit.Nvcc(marker_);
  const Digest empty = coordinator_->Put("");
  std::vector<std::string> deep(29, "x");
  for (int i = 0; i < 700; ++i) {
    toolkit.Line(
        absl::StrCat("file ", empty.hash, " 0 - u", 1000 + i, "/", absl::StrJoin(deep, "/"), "/f"));
  }
  toolkit.Serve();
  ExpectRefused(Install(), "more than 20000 folders");
  ExpectRefused(Worker("13.2"), "more than 20000 folders");
}

TEST_F(HostileCoordinatorTest, AManifestOfEmptyLinesCostsNoMoreThanItsBytes) {
  // 16 MiB of line breaks: refused by its count, before it is split.
  const std::string manifest =
      "distcc-cuda toolkit manifest 1\n" + std::string((16 << 20) - 40, '\n');
  v1::ServedToolkit served;
  served.set_version("13.2.86");
  *served.mutable_manifest() = ToProto(coordinator_->Put(manifest));
  coordinator_->Serve({served});
  ExpectRefused(Install(), "more than 100000 entries", absl::Seconds(15));
  ExpectRefused(Worker("13.2"), "more than 100000 entries", absl::Seconds(15));
}

TEST_F(HostileCoordinatorTest, AManifestThatIsNotItsDigestOrTooLargeIsRefused) {
  ManifestWriter toolkit = Toolkit();
  v1::ServedToolkit served = toolkit.Nvcc(marker_).Serve();
  ScriptedCoordinator::BlobScript other;
  other.bytes = "distcc-cuda toolkit manifest 1\nlink ../.. x\n";
  other.bytes.resize(served.manifest().size_bytes(), '\n');
  coordinator_->Script(FromProto(served.manifest()), other);
  ExpectRefused(Install(), "does not match its digest");
  served.mutable_manifest()->set_size_bytes(int64_t{1} << 40);
  coordinator_->Serve({served});
  ExpectRefused(Worker("13.2"), "serves no CUDA 13.2");
}

}  // namespace
}  // namespace distcc_cuda
