// SPDX-License-Identifier: Apache-2.0
// The scan cache with the real nvcc: what must rescan, and that nothing runs
// nvcc when nothing changed. nvcc is called through a wrapper that logs each
// call, so "no scan ran" is read from the log, not assumed.
#include "client/scan/scan_cache.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/plan/workspace_layout.h"
#include "client/scan/dependency_scan.h"
#include "common/base/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::client {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::Not;

class ScanCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string real = testing::RealNvccPath();
    if (real.empty()) GTEST_SKIP() << "no nvcc at /usr/local/cuda/bin/nvcc";
    dir_ = AbsolutePath(testing::NewTempDir("scan_cache-"));
    log_ = dir_ + "/nvcc.log";
    nvcc_ = testing::WriteNvccWrapper(dir_ + "/bin/nvcc", real,
                                      absl::StrCat("echo \"$@\" >> ", log_, "\n"));
    proj_ = dir_ + "/proj";
    Write("src/k.cu", "#include \"a.h\"\n__global__ void k() { a(); }\n");
    // <sub/b.h>: found through the include path only, not beside a.h.
    Write("inc1/a.h", "#pragma once\n#include <sub/b.h>\n__device__ inline void a() { b(); }\n");
    Write("inc1/sub/b.h", "#pragma once\n__device__ inline void b() {}\n");
    fs::create_directories(proj_ + "/inc2");  // searched first, empty for now
    flags_ = {"-Iinc2", "-Iinc1", "-std=c++17"};
    Settle();
  }

  void Write(const std::string& name, const std::string& content) {
    ASSERT_TRUE(WriteFileAtomically(proj_ + "/" + name, content).ok()) << name;
  }

  // Files changed within 100 ms of a scan are too new to remember; a test
  // waits that long after writing before the scan it wants remembered.
  static void Settle() { std::this_thread::sleep_for(std::chrono::milliseconds(250)); }

  // The closure of src/k.cu through `cache`, and how many nvcc -M ran.
  std::vector<std::string> Scan(ScanCache& cache, int* scans) {
    const int before = Scans();
    absl::StatusOr<std::vector<std::string>> files =
        ScanInputClosure(nvcc_, proj_, flags_, "src/k.cu", ExcludedPrefixes(nvcc_), &cache);
    EXPECT_TRUE(files.ok()) << files.status();
    *scans = Scans() - before;
    return files.ok() ? *files : std::vector<std::string>{};
  }

  int Scans() const {
    absl::StatusOr<std::string> log = ReadFile(log_);
    if (!log.ok()) return 0;
    int scans = 0;
    for (absl::string_view line : absl::StrSplit(*log, '\n')) {
      if (absl::StrContains(line, " -M ") || absl::EndsWith(line, " -M")) ++scans;
    }
    return scans;
  }

  ScanCache Cache(const std::string& toolchain = "toolchain-a",
                  EnvironmentVariables nvcc_variables = {}) {
    return ScanCache(dir_ + "/scan", toolchain, std::move(nvcc_variables));
  }

  void ExpectTheTreeMovedToIsAHit(const std::string& moved);

  std::string dir_, log_, nvcc_, proj_;
  std::vector<std::string> flags_;
};

TEST_F(ScanCacheTest, NothingChangedRunsNoNvcc) {
  ScanCache cache = Cache();
  int scans = 0;
  std::vector<std::string> first = Scan(cache, &scans);
  EXPECT_EQ(scans, 1);
  EXPECT_THAT(first, Contains(proj_ + "/inc1/sub/b.h"));
  std::vector<std::string> second = Scan(cache, &scans);
  EXPECT_EQ(scans, 0) << "nvcc -M ran although nothing changed";
  EXPECT_EQ(second, first);
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.misses(), 1);
}

TEST_F(ScanCacheTest, AnEditedHeaderIsScannedAgain) {
  ScanCache cache = Cache();
  int scans = 0;
  Scan(cache, &scans);
  Write("inc1/sub/c.h", "#pragma once\n");
  Write("inc1/sub/b.h", "#pragma once\n#include \"c.h\"\n__device__ inline void b() {}\n");
  std::vector<std::string> files = Scan(cache, &scans);
  EXPECT_EQ(scans, 1);
  EXPECT_THAT(files, Contains(proj_ + "/inc1/sub/c.h"));
}

TEST_F(ScanCacheTest, AHeaderAddedAheadOnTheIncludePathIsScannedAgain) {
  ScanCache cache = Cache();
  int scans = 0;
  Scan(cache, &scans);
  // inc2 comes before inc1: a new inc2/a.h hides inc1/a.h.
  Write("inc2/a.h", "#pragma once\n__device__ inline void a() {}\n");
  std::vector<std::string> files = Scan(cache, &scans);
  EXPECT_EQ(scans, 1);
  EXPECT_THAT(files, Contains(proj_ + "/inc2/a.h"));
  EXPECT_THAT(files, Not(Contains(proj_ + "/inc1/a.h")));
}

TEST_F(ScanCacheTest, AHeaderAddedAheadInASubfolderIsScannedAgain) {
  ScanCache cache = Cache();
  int scans = 0;
  Scan(cache, &scans);
  // The folder first; then the header in it ("sub/b.h").
  fs::create_directories(proj_ + "/inc2/sub");
  Settle();
  EXPECT_EQ(Scan(cache, &scans).size(), 3u);
  EXPECT_EQ(scans, 1) << "a new folder where an include name could be found";
  Scan(cache, &scans);
  EXPECT_EQ(scans, 0);
  Write("inc2/sub/b.h", "#pragma once\n__device__ inline void b() {}\n");
  std::vector<std::string> files = Scan(cache, &scans);
  EXPECT_EQ(scans, 1);
  EXPECT_THAT(files, Contains(proj_ + "/inc2/sub/b.h"));
}

// The units of a build watch the same folders; each folder is listed once
// while it stays as it was (a source folder of 20,000 files was listed once
// per unit), and listed again once it changes.
TEST_F(ScanCacheTest, AFolderIsListedOncePerStateForAllUnits) {
  // Settled long ago: only then is a listing kept for other units.
  const struct timespec hour_ago[2] = {{time(nullptr) - 3600, 0}, {time(nullptr) - 3600, 0}};
  for (const char* folder : {"", "/src", "/inc1", "/inc1/sub", "/inc2"}) {
    ASSERT_EQ(utimensat(AT_FDCWD, (proj_ + folder).c_str(), hour_ago, 0), 0) << folder;
  }
  ScanCache cache = Cache();
  int scans = 0;
  Scan(cache, &scans);
  const int listed = cache.folders_listed();
  EXPECT_GT(listed, 0);
  // Another unit watching the same folders (another flag: another question).
  flags_.push_back("-DUNIT=2");
  Scan(cache, &scans);
  EXPECT_EQ(scans, 1);
  EXPECT_EQ(cache.folders_listed(), listed) << "a folder in the same state was listed again";
  // A header added ahead on the include path: inc2 changed, so it is listed
  // again and the new header found.
  Write("inc2/a.h", "#pragma once\n__device__ inline void a() {}\n");
  Settle();
  std::vector<std::string> files = Scan(cache, &scans);
  EXPECT_EQ(scans, 1);
  EXPECT_THAT(files, Contains(proj_ + "/inc2/a.h"));
  EXPECT_GT(cache.folders_listed(), listed);
}

TEST_F(ScanCacheTest, AChangedFlagOrToolchainIsADifferentQuestion) {
  ScanCache cache = Cache();
  int scans = 0;
  Scan(cache, &scans);
  flags_.push_back("-DWIDE=1");
  Scan(cache, &scans);
  EXPECT_EQ(scans, 1) << "a new flag";
  ScanCache other = Cache("toolchain-b");
  Scan(other, &scans);
  EXPECT_EQ(scans, 1) << "another toolchain";
  Scan(cache, &scans);
  EXPECT_EQ(scans, 0) << "the first flags again, remembered";
}

TEST_F(ScanCacheTest, AFileRewrittenWithTheSameContentIsStillAHit) {
  ScanCache cache = Cache();
  int scans = 0;
  Scan(cache, &scans);
  // What a branch switch and back does: new times and inode, same bytes.
  absl::StatusOr<std::string> header = ReadFile(proj_ + "/inc1/a.h");
  ASSERT_TRUE(header.ok());
  fs::remove(proj_ + "/inc1/a.h");
  Write("inc1/a.h", *header);
  Scan(cache, &scans);
  EXPECT_EQ(scans, 0);
  EXPECT_EQ(cache.hits(), 1);
}

TEST_F(ScanCacheTest, FilesChangedJustBeforeTheScanAreNotRemembered) {
  ScanCache cache = Cache();
  Write("inc1/a.h", "#pragma once\n#include \"sub/b.h\"\n__device__ inline void a() {}\n");
  int scans = 0;
  Scan(cache, &scans);
  Scan(cache, &scans);
  EXPECT_EQ(scans, 1) << "an answer from files written just now was trusted";
}

TEST_F(ScanCacheTest, TheDependencyFileIsWrittenAgainAsNvccWroteIt) {
  ScanCache cache = Cache();
  const std::vector<std::string> arguments = {"-M", "-MT", "obj/k.o", "-MF", "obj/k.d"};
  fs::create_directories(proj_ + "/obj");
  const int before = Scans();
  ASSERT_TRUE(ScanWritingDependencyFile(nvcc_, proj_, flags_, "src/k.cu", arguments, "obj/k.d",
                                        ExcludedPrefixes(nvcc_), &cache)
                  .ok());
  absl::StatusOr<std::string> written = ReadFile(proj_ + "/obj/k.d");
  ASSERT_TRUE(written.ok());
  fs::remove(proj_ + "/obj/k.d");
  absl::StatusOr<std::vector<std::string>> again = ScanWritingDependencyFile(
      nvcc_, proj_, flags_, "src/k.cu", arguments, "obj/k.d", ExcludedPrefixes(nvcc_), &cache);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Scans() - before, 1);
  EXPECT_EQ(ReadFile(proj_ + "/obj/k.d").value_or("missing"), *written);
  EXPECT_THAT(*again, Contains(proj_ + "/inc1/a.h"));
}

// The same tree in another folder (pip's next temporary folder, a second
// checkout) asks the same question of its workspace: no nvcc runs, the
// files are those of the new folder, and the dependency file names them.
void ScanCacheTest::ExpectTheTreeMovedToIsAHit(const std::string& moved) {
  ScanCache cache = Cache();
  const std::vector<std::string> arguments = {"-M", "-MT", "obj/k.o", "-MF", "obj/k.d"};
  const std::vector<std::string> absolute_flags = {"-I" + proj_ + "/inc2", "-I" + proj_ + "/inc1",
                                                   "-std=c++17"};
  fs::create_directories(proj_ + "/obj");
  const int before = Scans();
  ASSERT_TRUE(ScanWritingDependencyFile(nvcc_, proj_, absolute_flags, proj_ + "/src/k.cu",
                                        arguments, "obj/k.d", ExcludedPrefixes(nvcc_), &cache,
                                        proj_)
                  .ok());
  absl::StatusOr<std::string> first = ReadFile(proj_ + "/obj/k.d");
  ASSERT_TRUE(first.ok());
  EXPECT_THAT(*first, ::testing::HasSubstr(proj_ + "/inc1/a.h"));
  fs::create_directories(fs::path(moved).parent_path());
  fs::copy(proj_, moved, fs::copy_options::recursive);
  fs::remove(moved + "/obj/k.d");
  fs::remove_all(proj_);
  const std::vector<std::string> moved_flags = {"-I" + moved + "/inc2", "-I" + moved + "/inc1",
                                                "-std=c++17"};
  absl::StatusOr<std::vector<std::string>> again =
      ScanWritingDependencyFile(nvcc_, moved, moved_flags, moved + "/src/k.cu", arguments,
                                "obj/k.d", ExcludedPrefixes(nvcc_), &cache, moved);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Scans() - before, 1) << "the moved tree was scanned again";
  EXPECT_THAT(*again, Contains(moved + "/inc1/sub/b.h"));
  EXPECT_THAT(*again, Not(Contains(proj_ + "/inc1/sub/b.h")));
  absl::StatusOr<std::string> written = ReadFile(moved + "/obj/k.d");
  ASSERT_TRUE(written.ok());
  // make's spelling of the new folder where nvcc wrote the old one's.
  EXPECT_EQ(*written,
            absl::StrReplaceAll(
                *first, {{proj_, absl::StrReplaceAll(moved, {{" ", "\\ "}, {"#", "\\#"}})}}));
  ASSERT_TRUE(cache.KnownDigest(moved + "/inc1/a.h").has_value());
  // Without the workspace the same folder is another question.
  ASSERT_TRUE(ScanInputClosure(nvcc_, moved, moved_flags, moved + "/src/k.cu",
                               ExcludedPrefixes(nvcc_), &cache)
                  .ok());
  EXPECT_EQ(Scans() - before, 2);
}

TEST_F(ScanCacheTest, TheSameTreeInAnotherFolderIsAHitNamingItsOwnFiles) {
  ExpectTheTreeMovedToIsAHit(dir_ + "/elsewhere/deeper/proj");
}

// A folder named with a space, '#', ':', '=' or '%' (make escapes the
// first two in the dependency file) is found as well. nvcc itself cannot
// compile in a folder named with a '$' (its driver expands it), and takes
// a ',' in -I for two folders (MarkWorkspaceTest has both).
TEST_F(ScanCacheTest, AFolderNamedWithASpaceOrWhatMakeEscapesIsAHitToo) {
  ExpectTheTreeMovedToIsAHit(dir_ + "/my checkouts/proj #2 v=1:50%");
}

// A teammate's torch is in another venv: the headers a scan found through
// -I into a Python environment's site-packages are keyed by their place in
// it, so the same tree in another folder with its torch elsewhere is a hit
// naming the teammate's own files; one changed byte in such a header is a
// miss.
TEST_F(ScanCacheTest, HeadersOfATeammatesVenvElsewhereAreAHitAndAChangedOneIsNot) {
  const std::string alice = dir_ + "/home-alice/.venv/lib/python3.11/site-packages";
  const std::string bob = dir_ + "/opt/envs/x/lib/python3.11/site-packages";
  fs::create_directories(dir_ + "/home-alice/.venv/include/python3.11");
  fs::create_directories(dir_ + "/opt/envs/x/include/python3.11");
  ASSERT_TRUE(WriteFileAtomically(alice + "/torch/include/t.h",
                                  "#pragma once\n__device__ inline int t() { return 1; }\n")
                  .ok());
  Write("src/k.cu", "#include \"a.h\"\n#include <t.h>\n__global__ void k() { a(); t(); }\n");
  Settle();
  ScanCache cache = Cache();
  const std::vector<std::string> arguments = {"-M", "-MT", "obj/k.o", "-MF", "obj/k.d"};
  auto flags = [](const std::string& proj, const std::string& site) {
    // As setuptools gives them: the venv's own include folder (empty) too.
    const std::string venv = fs::path(site).parent_path().parent_path().parent_path().string();
    return std::vector<std::string>{"-I" + proj + "/inc1", "-isystem", site + "/torch/include",
                                    "-I" + venv + "/include", "-std=c++17"};
  };
  fs::create_directories(proj_ + "/obj");
  const int before = Scans();
  ASSERT_TRUE(ScanWritingDependencyFile(nvcc_, proj_, flags(proj_, alice), proj_ + "/src/k.cu",
                                        arguments, "obj/k.d", ExcludedPrefixes(nvcc_), &cache,
                                        proj_)
                  .ok());
  absl::StatusOr<std::string> first = ReadFile(proj_ + "/obj/k.d");
  ASSERT_TRUE(first.ok());
  ASSERT_THAT(*first, ::testing::HasSubstr(alice + "/torch/include/t.h"));
  const std::string moved = dir_ + "/bob/src/proj";
  fs::create_directories(fs::path(moved).parent_path());
  fs::copy(proj_, moved, fs::copy_options::recursive);
  fs::remove(moved + "/obj/k.d");
  fs::create_directories(fs::path(bob).parent_path());
  fs::copy(alice, bob, fs::copy_options::recursive);
  Settle();
  absl::StatusOr<std::vector<std::string>> again =
      ScanWritingDependencyFile(nvcc_, moved, flags(moved, bob), moved + "/src/k.cu", arguments,
                                "obj/k.d", ExcludedPrefixes(nvcc_), &cache, moved);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Scans() - before, 1) << "the teammate's tree and venv were scanned again";
  EXPECT_THAT(*again, Contains(bob + "/torch/include/t.h"));
  EXPECT_THAT(*again, Not(Contains(alice + "/torch/include/t.h")));
  EXPECT_EQ(ReadFile(moved + "/obj/k.d").value_or("missing"),
            absl::StrReplaceAll(*first, {{proj_, moved}, {alice, bob}}));
  ASSERT_TRUE(cache.KnownDigest(bob + "/torch/include/t.h").has_value());
  // One byte of the teammate's header changed, same size: scanned again.
  ASSERT_TRUE(WriteFileAtomically(bob + "/torch/include/t.h",
                                  "#pragma once\n__device__ inline int t() { return 2; }\n")
                  .ok());
  Settle();
  ASSERT_TRUE(ScanWritingDependencyFile(nvcc_, moved, flags(moved, bob), moved + "/src/k.cu",
                                        arguments, "obj/k.d", ExcludedPrefixes(nvcc_), &cache,
                                        moved)
                  .ok());
  EXPECT_EQ(Scans() - before, 2) << "a changed header in the teammate's venv was not noticed";
}

TEST(MarkWorkspaceTest, MarksTheFolderOnlyAsAWholePath) {
  const std::string w = "/tmp/pip-req-build-ab";
  EXPECT_EQ(MarkWorkspace("/tmp/pip-req-build-ab/csrc/k.cu", w), "\x01workspace\x01/csrc/k.cu");
  EXPECT_EQ(MarkWorkspace("-I/tmp/pip-req-build-ab/csrc", w), "-I\x01workspace\x01/csrc");
  EXPECT_EQ(MarkWorkspace("-DROOT=/tmp/pip-req-build-ab", w), "-DROOT=\x01workspace\x01");
  EXPECT_EQ(MarkWorkspace("k.o: /tmp/pip-req-build-ab/k.cu \\\n /tmp/pip-req-build-ab/a.h\n", w),
            "k.o: \x01workspace\x01/k.cu \\\n \x01workspace\x01/a.h\n");
  // Other folders that share the name's start, or hold it inside.
  EXPECT_EQ(MarkWorkspace("/tmp/pip-req-build-abc/k.cu", w), "/tmp/pip-req-build-abc/k.cu");
  EXPECT_EQ(MarkWorkspace("/x/tmp/pip-req-build-ab/k.cu", w), "/x/tmp/pip-req-build-ab/k.cu");
  EXPECT_EQ(WorkspaceMarked(MarkWorkspace("-I/tmp/pip-req-build-ab/csrc", w), "/home/b/proj"),
            "-I/home/b/proj/csrc");
  // A folder make spells otherwise: as it is in paths and flags, escaped
  // in a make rule, and given back in each spelling.
  const std::string odd = "/tmp/my proj #2, v=1:50%$";
  EXPECT_EQ(MarkWorkspace(odd + "/k.cu", odd), "\x01workspace\x01/k.cu");
  EXPECT_EQ(MarkWorkspace("-I" + odd + "/inc", odd), "-I\x01workspace\x01/inc");
  const std::string rule = "k.o: /tmp/my\\ proj\\ \\#2,\\ v=1:50%$$/k.cu \\\n /usr/include/a.h\n";
  EXPECT_EQ(MarkWorkspace(rule, odd, WorkspaceSpelling::kMakeRule),
            "k.o: \x01workspace\x01/k.cu \\\n /usr/include/a.h\n");
  EXPECT_EQ(MarkWorkspace(rule, odd), rule) << "a path's spelling is not a rule's";
  EXPECT_EQ(WorkspaceMarked(MarkWorkspace(rule, odd, WorkspaceSpelling::kMakeRule), "/home/a b",
                            WorkspaceSpelling::kMakeRule),
            "k.o: /home/a\\ b/k.cu \\\n /usr/include/a.h\n");
  // A name with a tab, a newline, a backslash or a quote keys as it is.
  EXPECT_EQ(MarkWorkspace("/tmp/a'b/k.cu", "/tmp/a'b"), "/tmp/a'b/k.cu");
  EXPECT_EQ(MarkWorkspace("/tmp/a\\b/k.cu", "/tmp/a\\b"), "/tmp/a\\b/k.cu");
  EXPECT_EQ(MarkWorkspace("/tmp/k.cu", ""), "/tmp/k.cu");
}

TEST_F(ScanCacheTest, TrimKeepsTheMostRecentlyUsedEntries) {
  ScanCache cache = Cache();
  int scans = 0;
  Scan(cache, &scans);
  flags_.push_back("-DOTHER=1");
  Scan(cache, &scans);
  flags_.pop_back();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Scan(cache, &scans);  // the first question, used again: the most recent
  ASSERT_EQ(scans, 0);
  int64_t total = 0;
  for (const auto& file : fs::recursive_directory_iterator(dir_ + "/scan")) {
    if (file.is_regular_file()) total += static_cast<int64_t>(file.file_size());
  }
  EXPECT_EQ(cache.Trim(total), 0) << "within the limit";
  EXPECT_EQ(cache.Trim(total - 1), 1);
  Scan(cache, &scans);
  EXPECT_EQ(scans, 0) << "the most recently used entry was removed";
  flags_.push_back("-DOTHER=1");
  Scan(cache, &scans);
  EXPECT_EQ(scans, 1) << "the least recently used entry was kept";
}

TEST_F(ScanCacheTest, ADamagedEntryIsAMissAndIsWrittenAgain) {
  ScanCache cache = Cache();
  int scans = 0;
  Scan(cache, &scans);
  int damaged = 0;
  for (const auto& file : fs::recursive_directory_iterator(dir_ + "/scan")) {
    if (!file.is_regular_file()) continue;
    ASSERT_TRUE(WriteFileAtomically(file.path().string(), "not a scan cache entry").ok());
    ++damaged;
  }
  ASSERT_EQ(damaged, 1);
  Scan(cache, &scans);
  EXPECT_EQ(scans, 1) << "a damaged entry was trusted";
  Scan(cache, &scans);
  EXPECT_EQ(scans, 0) << "the entry was not written again";
}

// What the cache vouched for in this process (the files of an answer it
// gave or remembered) needs no hashing again; what it has not seen, or saw
// change, it does not vouch for.
TEST_F(ScanCacheTest, ItVouchesForTheDigestsOfTheFilesOfItsAnswers) {
  const std::string b = proj_ + "/inc1/sub/b.h";
  int scans = 0;
  {
    ScanCache cache = Cache();
    EXPECT_FALSE(cache.KnownDigest(b).has_value()) << "nothing scanned yet";
    Scan(cache, &scans);
    ASSERT_EQ(scans, 1);
    EXPECT_EQ(cache.KnownDigest(b), DigestOfFile(b).value()) << "hashed when remembered";
  }
  ScanCache cache = Cache();  // a new process: the entry on disk only
  EXPECT_FALSE(cache.KnownDigest(b).has_value());
  Scan(cache, &scans);
  ASSERT_EQ(scans, 0);
  for (const std::string& file : {proj_ + "/src/k.cu", proj_ + "/inc1/a.h", b}) {
    EXPECT_EQ(cache.KnownDigest(file), DigestOfFile(file).value()) << file;
  }
  EXPECT_FALSE(cache.KnownDigest(proj_ + "/inc2/a.h").has_value()) << "never read";
  // Edited (same size, other bytes): the next answer hashes it again.
  absl::StatusOr<std::string> header = ReadFile(b);
  ASSERT_TRUE(header.ok());
  std::string edited = *header;
  edited[edited.size() - 2] = ' ';
  Write("inc1/sub/b.h", edited);
  Settle();
  ScanCache after = Cache();
  Scan(after, &scans);
  EXPECT_EQ(scans, 1);
  EXPECT_EQ(after.KnownDigest(b), DigestOfFile(b).value());
  EXPECT_NE(after.KnownDigest(b), cache.KnownDigest(b));
}

// The inputs a unit had, remembered under its files' paths, digests and
// stats: found again by a new process whose scan vouched for the same files,
// and by nothing that differs in a file's bytes, mode, root or source.
TEST_F(ScanCacheTest, AUnitsTreeIsFoundAgainOnlyForTheSameFiles) {
  v1::CompileUnit unit;
  unit.mutable_input_root()->set_hash(std::string(64, 'a'));
  unit.mutable_input_root()->set_size_bytes(120);
  unit.add_inputs()->set_path("src/k.cu");
  int scans = 0;
  std::vector<std::string> files;
  {
    ScanCache cache = Cache();
    files = Scan(cache, &scans);
    EXPECT_FALSE(cache.FindTree(proj_, "src/k.cu", files)) << "nothing remembered yet";
    cache.RememberTree(proj_, "src/k.cu", files, unit);
  }
  auto found_in_new_process = [&](const std::string& root, const std::string& source) {
    ScanCache cache = Cache();
    std::vector<std::string> now = Scan(cache, &scans);
    return cache.FindTree(root, source, now);
  };
  std::optional<v1::CompileUnit> found = found_in_new_process(proj_, "src/k.cu");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->input_root().hash(), unit.input_root().hash());
  EXPECT_EQ(found->input_root().size_bytes(), 120);
  ASSERT_EQ(found->inputs_size(), 1);
  EXPECT_EQ(found->inputs(0).path(), "src/k.cu");
  EXPECT_FALSE(found_in_new_process(dir_, "proj/src/k.cu")) << "another root";
  EXPECT_FALSE(found_in_new_process(proj_, "src/other.cu")) << "another source";
  {
    ScanCache unvouched = Cache();  // no scan in this process
    EXPECT_FALSE(unvouched.FindTree(proj_, "src/k.cu", files));
  }
  // A header made executable: the same bytes, another tree.
  ASSERT_EQ(chmod((proj_ + "/inc1/sub/b.h").c_str(), 0755), 0);
  Settle();
  EXPECT_FALSE(found_in_new_process(proj_, "src/k.cu")) << "the mode changed";
  // Remembered again for the new state, then an edit: another digest.
  {
    ScanCache cache = Cache();
    cache.RememberTree(proj_, "src/k.cu", Scan(cache, &scans), unit);
  }
  ASSERT_TRUE(found_in_new_process(proj_, "src/k.cu").has_value());
  Write("inc1/sub/b.h", "#pragma once\n__device__ inline void b() { }\n");
  Settle();
  EXPECT_FALSE(found_in_new_process(proj_, "src/k.cu")) << "a header's bytes changed";
}

TEST_F(ScanCacheTest, ADamagedTreeMemoIsNotFound) {
  v1::CompileUnit unit;
  unit.mutable_input_root()->set_hash(std::string(64, 'b'));
  unit.mutable_input_root()->set_size_bytes(7);
  int scans = 0;
  ScanCache cache = Cache();
  std::vector<std::string> files = Scan(cache, &scans);
  cache.RememberTree(proj_, "src/k.cu", files, unit);
  ASSERT_TRUE(cache.FindTree(proj_, "src/k.cu", files).has_value());
  int damaged = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir_ + "/scan/trees")) {
    if (!entry.is_regular_file()) continue;
    ASSERT_TRUE(WriteFileAtomically(entry.path().string(), "not a unit").ok());
    ++damaged;
  }
  ASSERT_EQ(damaged, 1);
  EXPECT_FALSE(cache.FindTree(proj_, "src/k.cu", files));
  // A memo whose root is no digest is no memo.
  unit.mutable_input_root()->set_hash("../../etc/passwd");
  cache.RememberTree(proj_, "src/k.cu", files, unit);
  EXPECT_FALSE(cache.FindTree(proj_, "src/k.cu", files));
}

TEST(ScanCacheFolderTest, FollowsTheStateDirUnlessTheEnvironmentSays) {
  EXPECT_EQ(ScanCache::FolderFor("/state", std::nullopt), "/state/scan");
  EXPECT_EQ(ScanCache::FolderFor("/state", ""), "/state/scan");
  EXPECT_EQ(ScanCache::FolderFor("/state", "off"), "");
  EXPECT_EQ(ScanCache::FolderFor("/state", "/elsewhere"), "/elsewhere");
  EXPECT_EQ(ScanCache::FolderFor("", std::nullopt), "");
}

// NVCC_APPEND_FLAGS=-Iother could find another header: an answer given in
// one environment is not one for another.
TEST_F(ScanCacheTest, AnotherEnvironmentAsksAnotherQuestion) {
  int scans = 0;
  ScanCache plain = Cache();
  Scan(plain, &scans);
  EXPECT_EQ(scans, 1);
  ScanCache appended = Cache("toolchain-a", {{"NVCC_APPEND_FLAGS", "-Iother"}});
  Scan(appended, &scans);
  EXPECT_EQ(scans, 1) << "the answer of an environment without the variable was used";
  Scan(appended, &scans);
  EXPECT_EQ(scans, 0) << "the same environment's answer is remembered";
  Scan(plain, &scans);
  EXPECT_EQ(scans, 0);
}

TEST(FoldersToWatchTest, EachIncludeFolderWithTheFoldersOfTheNamesFound) {
  ScanQuestion question;
  question.directory = "/p";
  question.flags = {"-Iinc2", "-Iinc1"};
  std::vector<std::string> folders = FoldersToWatch(question, {"/p/src/k.cu", "/p/inc1/cute/x.h"});
  EXPECT_THAT(folders, Contains("/p/src"));
  EXPECT_THAT(folders, Contains("/p/inc1/cute"));
  EXPECT_THAT(folders, Contains("/p/inc2"));
  EXPECT_THAT(folders, Contains("/p/inc2/cute"));
  EXPECT_THAT(folders, Contains("/p/inc2/inc1/cute")) << "names of every depth are watched";
}

}  // namespace
}  // namespace distcc_cuda::client
