// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/fatbin.h"

#include <elf.h>
#include <lz4.h>
#include <stdlib.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/nvcc/compile_identity.h"
#include "common/nvcc/nvcc_args.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/cuda_sources.h"

namespace distcc_cuda {
namespace {

constexpr char kNvcc[] = "/usr/local/cuda/bin/nvcc";

// A kernel without internal-linkage symbols: nvcc names those after a hash of
// the source's absolute path, so only such a source compiles to the same
// device code in two folders.
constexpr char kKernelSource[] = R"(
__global__ void add(float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += b[i];
}
void launch(float* a, const float* b, int n) {
  add<<<(n + 255) / 256, 256>>>(a, b, n);
}
)";

constexpr char kSm100CubinAndPtx[] =
    "-gencode arch=compute_100,code=sm_100 "
    "-gencode arch=compute_100,code=compute_100";

bool HaveNvcc() { return access(kNvcc, X_OK) == 0; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteAll(const std::string& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
}

std::string MakeTempDir() {
  std::string pattern = ::testing::TempDir() + "/fatbin_test.XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) return "";
  return pattern;
}

// Runs `command` in `dir` with its output in a log; returns the log on
// failure so the test says what nvcc said.
::testing::AssertionResult RunIn(const std::string& dir, const std::string& command) {
  const std::string log = dir + "/command.log";
  const std::string line = absl::StrCat("cd '", dir, "' && ", command, " >'", log, "' 2>&1");
  if (std::system(line.c_str()) != 0) {
    return ::testing::AssertionFailure() << "`" << command << "` failed:\n" << ReadAll(log);
  }
  return ::testing::AssertionSuccess();
}

std::vector<std::string> Describe(const std::vector<DeviceImage>& images) {
  std::vector<std::string> lines;
  for (const DeviceImage& image : images) {
    lines.push_back(DescribeDeviceImage(image));
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

// The images as described, in file order.
std::string InOrder(const std::vector<DeviceImage>& images) {
  std::vector<std::string> lines;
  for (const DeviceImage& image : images) lines.push_back(DescribeDeviceImage(image));
  return absl::StrJoin(lines, ", ");
}

const DeviceImage* Find(const std::vector<DeviceImage>& images, const std::string& description) {
  for (const DeviceImage& image : images) {
    if (DescribeDeviceImage(image) == description) return &image;
  }
  return nullptr;
}

// --- Synthetic files: enough ELF and fatbinary to test the reader's checks
// without nvcc.

struct FakeEntry {
  uint16_t kind = 2;
  uint32_t arch = 100;
  uint64_t flags = 0x11;
  std::string stored;  // The payload as stored (compressed or not).
  uint32_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint32_t header_size = 0x40;
};

void Put16(std::string* s, size_t at, uint16_t v) { std::memcpy(&(*s)[at], &v, 2); }
void Put32(std::string* s, size_t at, uint32_t v) { std::memcpy(&(*s)[at], &v, 4); }
void Put64(std::string* s, size_t at, uint64_t v) { std::memcpy(&(*s)[at], &v, 8); }

std::string MakeContainer(const std::vector<FakeEntry>& entries) {
  std::string body;
  for (const FakeEntry& e : entries) {
    std::string stored = e.stored;
    stored.resize((stored.size() + 7) / 8 * 8, '\0');
    std::string header(e.header_size, '\0');
    Put16(&header, 0x00, e.kind);
    Put16(&header, 0x02, 0x0101);
    Put32(&header, 0x04, e.header_size);
    Put64(&header, 0x08, stored.size());
    Put32(&header, 0x10, e.compressed_size);
    Put32(&header, 0x1c, e.arch);
    Put64(&header, 0x28, e.flags);
    Put64(&header, 0x38, e.uncompressed_size);
    body += header + stored;
  }
  std::string container(16, '\0');
  Put32(&container, 0, 0xBA55ED50);
  Put16(&container, 4, 1);
  Put16(&container, 6, 16);
  Put64(&container, 8, body.size());
  return container + body;
}

// An ELF64 relocatable file holding `sections` (name, content) as PROGBITS.
std::string MakeElf(const std::vector<std::pair<std::string, std::string>>& sections) {
  std::string file(sizeof(Elf64_Ehdr), '\0');
  std::string names(1, '\0');
  std::vector<Elf64_Shdr> headers(1);  // Section 0 is empty.
  auto add = [&](const std::string& name, const std::string& content, uint32_t type) {
    file.resize((file.size() + 7) / 8 * 8, '\0');
    Elf64_Shdr h{};
    h.sh_name = static_cast<uint32_t>(names.size());
    h.sh_type = type;
    h.sh_offset = file.size();
    h.sh_size = content.size();
    h.sh_addralign = 8;
    names += name + '\0';
    file += content;
    headers.push_back(h);
  };
  for (const auto& [name, content] : sections) {
    add(name, content, SHT_PROGBITS);
  }
  const std::string shstrtab_name = ".shstrtab";
  headers.push_back({});  // Filled below, once `names` is complete.
  const size_t shstrndx = headers.size() - 1;
  file.resize((file.size() + 7) / 8 * 8, '\0');
  headers[shstrndx].sh_name = static_cast<uint32_t>(names.size());
  names += shstrtab_name + '\0';
  headers[shstrndx].sh_type = SHT_STRTAB;
  headers[shstrndx].sh_offset = file.size();
  headers[shstrndx].sh_size = names.size();
  file += names;
  file.resize((file.size() + 7) / 8 * 8, '\0');

  Elf64_Ehdr ehdr{};
  std::memcpy(ehdr.e_ident, ELFMAG, SELFMAG);
  ehdr.e_ident[EI_CLASS] = ELFCLASS64;
  ehdr.e_ident[EI_DATA] = ELFDATA2LSB;
  ehdr.e_ident[EI_VERSION] = EV_CURRENT;
  ehdr.e_type = ET_REL;
  ehdr.e_machine = EM_X86_64;
  ehdr.e_version = EV_CURRENT;
  ehdr.e_ehsize = sizeof(Elf64_Ehdr);
  ehdr.e_shoff = file.size();
  ehdr.e_shentsize = sizeof(Elf64_Shdr);
  ehdr.e_shnum = static_cast<uint16_t>(headers.size());
  ehdr.e_shstrndx = static_cast<uint16_t>(shstrndx);
  std::memcpy(file.data(), &ehdr, sizeof(ehdr));
  for (const Elf64_Shdr& h : headers) {
    file.append(reinterpret_cast<const char*>(&h), sizeof(h));
  }
  return file;
}

const std::string& FakeCubin() {
  static const std::string* cubin =
      new std::string(std::string(ELFMAG, SELFMAG) + std::string(60, 'c'));
  return *cubin;
}

std::string ZstdCompress(const std::string& data) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), data.data(), data.size(), 3));
  return out;
}

std::string Lz4Compress(const std::string& data) {
  std::string out(LZ4_compressBound(static_cast<int>(data.size())), '\0');
  out.resize(LZ4_compress_default(data.data(), out.data(), static_cast<int>(data.size()),
                                  static_cast<int>(out.size())));
  return out;
}

FakeEntry CompressedEntry(uint16_t kind, const std::string& data, uint64_t flag) {
  FakeEntry e;
  e.kind = kind;
  e.flags = 0x11 | flag;
  e.stored = flag == 0x8000 ? ZstdCompress(data) : Lz4Compress(data);
  e.compressed_size = static_cast<uint32_t>(e.stored.size());
  e.uncompressed_size = data.size();
  return e;
}

// --- Cases on synthetic files.

struct BytesCase {
  std::string name;
  std::string bytes;
  absl::StatusCode code;
  // When OK: the sorted DescribeDeviceImage lines expected.
  std::vector<std::string> images = {};
};

// Names the case when a test fails, instead of dumping its bytes.
void PrintTo(const BytesCase& c, std::ostream* os) { *os << c.name; }

std::vector<BytesCase> BytesCases() {
  const std::string ptx = "//\n.version 9.0\n.target sm_100\n";
  FakeEntry cubin{2, 100, 0x11, FakeCubin()};
  FakeEntry plain_ptx{1, 100, 0x11, ptx + '\0'};
  FakeEntry arch_specific{2, 100, 0x100011, FakeCubin()};
  FakeEntry family_ptx{1, 120, 0x200011, ptx + '\0'};
  FakeEntry lto_ir{8, 100, 0x11, "lto"};
  FakeEntry extended_header = cubin;
  extended_header.header_size = 0x70;
  const std::string good = MakeContainer({plain_ptx, cubin});

  std::vector<BytesCase> cases = {
      {"NotElf", "just some text, not an object file", absl::StatusCode::kInvalidArgument},
      {"Empty", "", absl::StatusCode::kInvalidArgument},
      {"NoFatbinSection", MakeElf({{".text", "\x90\x90"}}), absl::StatusCode::kNotFound},
      {"PtxAndCubin",
       MakeElf({{".nv_fatbin", good}}),
       absl::StatusCode::kOk,
       {"compute_100 ptx", "sm_100 cubin"}},
      {"RelocatableSection",
       MakeElf({{"__nv_relfatbin", good}}),
       absl::StatusCode::kOk,
       {"compute_100 ptx", "sm_100 cubin"}},
      {"ArchSuffixes",
       MakeElf({{".nv_fatbin", MakeContainer({arch_specific, family_ptx})}}),
       absl::StatusCode::kOk,
       {"compute_120f ptx", "sm_100a cubin"}},
      {"LtoIrSkipped",
       MakeElf({{".nv_fatbin", MakeContainer({lto_ir, cubin})}}),
       absl::StatusCode::kOk,
       {"sm_100 cubin"}},
      {"ExtendedEntryHeader",
       MakeElf({{".nv_fatbin", MakeContainer({extended_header})}}),
       absl::StatusCode::kOk,
       {"sm_100 cubin"}},
      {"ContainersWithPadding",
       MakeElf({{".nv_fatbin", MakeContainer({cubin}) + std::string(8, '\0') +
                                   MakeContainer({plain_ptx}) + std::string(16, '\0')}}),
       absl::StatusCode::kOk,
       {"compute_100 ptx", "sm_100 cubin"}},
      {"ZstdAndLz4",
       MakeElf({{".nv_fatbin", MakeContainer({CompressedEntry(2, FakeCubin(), 0x8000),
                                              CompressedEntry(1, ptx + '\0', 0x2000)})}}),
       absl::StatusCode::kOk,
       {"compute_100 ptx", "sm_100 cubin"}},
      {"EmptySection", MakeElf({{".nv_fatbin", ""}}), absl::StatusCode::kOk, {}},
  };

  auto bad = [&](std::string name, std::string container) {
    cases.push_back({std::move(name), MakeElf({{".nv_fatbin", std::move(container)}}),
                     absl::StatusCode::kInvalidArgument});
  };
  bad("ContainerTruncated", good.substr(0, good.size() - 1));
  bad("ContainerHeaderTruncated", good + "\x50\xed\x55\xba");
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  bad("BadMagic", bad_magic);
  std::string bad_version = good;
  Put16(&bad_version, 4, 2);
  bad("UnknownVersion", bad_version);
  std::string huge_size = good;
  Put64(&huge_size, 8, ~uint64_t{0});
  bad("HugeContainerSize", huge_size);
  std::string short_entry_header = good;
  Put32(&short_entry_header, 16 + 4, 8);
  bad("EntryHeaderTooShort", short_entry_header);
  std::string zero_entry_header = good;
  Put32(&zero_entry_header, 16 + 4, 0);
  bad("EntryHeaderZero", zero_entry_header);
  std::string huge_entry = good;
  Put64(&huge_entry, 16 + 8, ~uint64_t{0} - 0x20);
  bad("EntryPayloadPastContainer", huge_entry);
  FakeEntry garbage = CompressedEntry(2, FakeCubin(), 0x8000);
  garbage.stored = std::string(garbage.stored.size(), 'x');
  bad("ZstdGarbage", MakeContainer({garbage}));
  garbage.flags = 0x2011;
  garbage.stored = std::string(garbage.stored.size(), '\xff');
  bad("Lz4Garbage", MakeContainer({garbage}));
  FakeEntry wrong_size = CompressedEntry(2, FakeCubin(), 0x8000);
  wrong_size.uncompressed_size += 1;
  bad("ZstdWrongSize", MakeContainer({wrong_size}));
  FakeEntry huge_uncompressed = CompressedEntry(2, FakeCubin(), 0x8000);
  huge_uncompressed.uncompressed_size = uint64_t{1} << 40;
  bad("HugeUncompressedSize", MakeContainer({huge_uncompressed}));
  FakeEntry compressed_too_big = CompressedEntry(2, FakeCubin(), 0x2000);
  compressed_too_big.compressed_size = 1 << 20;
  bad("CompressedSizePastPayload", MakeContainer({compressed_too_big}));

  std::string elf32 = MakeElf({{".nv_fatbin", good}});
  elf32[EI_CLASS] = ELFCLASS32;
  cases.push_back({"Elf32", elf32, absl::StatusCode::kInvalidArgument});
  std::string section_outside = MakeElf({{".nv_fatbin", good}});
  Put64(&section_outside,
        section_outside.size() - 2 * sizeof(Elf64_Shdr) + offsetof(Elf64_Shdr, sh_size),
        uint64_t{1} << 40);
  cases.push_back({"SectionOutsideFile", section_outside, absl::StatusCode::kInvalidArgument});
  std::string headers_outside = MakeElf({{".nv_fatbin", good}});
  Put16(&headers_outside, offsetof(Elf64_Ehdr, e_shnum), 0xfff0);
  cases.push_back(
      {"SectionHeadersOutsideFile", headers_outside, absl::StatusCode::kInvalidArgument});
  return cases;
}

class ReadDeviceImagesFromBytesTest : public ::testing::TestWithParam<BytesCase> {};

TEST_P(ReadDeviceImagesFromBytesTest, Reads) {
  const BytesCase& c = GetParam();
  const absl::StatusOr<std::vector<DeviceImage>> images =
      ReadDeviceImagesFromBytes(c.bytes, "case.o");
  ASSERT_EQ(images.status().code(), c.code) << images.status();
  if (!images.ok()) {
    EXPECT_NE(images.status().message().find("case.o"), std::string::npos) << images.status();
    return;
  }
  EXPECT_EQ(Describe(*images), c.images);
  for (const DeviceImage& image : *images) {
    if (image.kind == DeviceImageKind::kCubin) {
      EXPECT_EQ(image.payload, FakeCubin());
    } else {
      EXPECT_EQ(image.payload, "//\n.version 9.0\n.target sm_100\n");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ReadDeviceImagesFromBytesTest, ::testing::ValuesIn(BytesCases()),
                         [](const ::testing::TestParamInfo<BytesCase>& info) {
                           return info.param.name;
                         });

TEST(ReadDeviceImagesFromBytesTest, EveryTruncationIsInvalidNotACrash) {
  const std::string container =
      MakeContainer({FakeEntry{1, 100, 0x11, "ptx\0"}, CompressedEntry(2, FakeCubin(), 0x8000),
                     CompressedEntry(2, FakeCubin(), 0x2000)});
  for (size_t size = 1; size < container.size(); ++size) {
    const auto images =
        ReadDeviceImagesFromBytes(MakeElf({{".nv_fatbin", container.substr(0, size)}}), "cut.o");
    EXPECT_EQ(images.status().code(), absl::StatusCode::kInvalidArgument)
        << "cut at " << size << ": " << images.status();
  }
}

// Two objects that differ only in their fatbinary, as a compile's
// architecture parts do.
TEST(MergeArchitecturePartsTest, FirstPartsHostCodeWithEveryPartsImagesInOrder) {
  FakeEntry sm90{.arch = 90, .stored = FakeCubin()};
  FakeEntry sm100{.arch = 100, .stored = FakeCubin() + "100"};
  FakeEntry ptx100{.kind = 1, .arch = 100, .stored = std::string(".target sm_100\0", 16)};
  const std::string text = "\x55\x48\x89\xe5";
  const std::string a = MakeElf({{".text", text}, {".nv_fatbin", MakeContainer({sm90})}});
  const std::string b = MakeElf({{".text", text}, {".nv_fatbin", MakeContainer({sm100, ptx100})}});
  absl::StatusOr<std::string> merged = MergeArchitectureParts({a, b}, {"a.o", "b.o"});
  ASSERT_TRUE(merged.ok()) << merged.status();
  const auto images = ReadDeviceImagesFromBytes(*merged, "merged");
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(InOrder(*images), "sm_90 cubin, sm_100 cubin, compute_100 ptx");
  EXPECT_EQ(merged->substr(0, a.size()).find(text), a.find(text)) << "host code kept in place";
  // One container, as nvcc writes for a whole compile.
  const auto whole = ReadDeviceImagesFromBytes(
      MakeElf({{".text", text}, {".nv_fatbin", MakeContainer({sm90, sm100, ptx100})}}), "whole");
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE(*images == *whole);
}

TEST(MergeArchitecturePartsTest, RefusesWhatItCannotMergeNamingThePart) {
  const std::string good =
      MakeElf({{".nv_fatbin", MakeContainer({FakeEntry{.stored = FakeCubin()}})}});
  struct Case {
    std::vector<std::string> parts;
    absl::StatusCode code;
    std::string says;
  } cases[] = {
      {{good}, absl::StatusCode::kInvalidArgument, "two or more"},
      {{good, "not an object"}, absl::StatusCode::kInvalidArgument, "part2.o"},
      {{good, MakeElf({{".text", "\x90"}})}, absl::StatusCode::kNotFound, "part2.o"},
      {{good, MakeElf({{"__nv_relfatbin", MakeContainer({FakeEntry{.stored = FakeCubin()}})}})},
       absl::StatusCode::kInvalidArgument,
       "whole-program"},
      {{good, MakeElf({{".nv_fatbin", MakeContainer({FakeEntry{.stored = FakeCubin()}}) +
                                          MakeContainer({FakeEntry{.stored = FakeCubin()}})}})},
       absl::StatusCode::kInvalidArgument,
       "more than one fatbinary container"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> names;
    for (size_t i = 0; i < c.parts.size(); ++i) names.push_back(absl::StrCat("part", i + 1, ".o"));
    absl::StatusOr<std::string> merged = MergeArchitectureParts(c.parts, names);
    ASSERT_FALSE(merged.ok()) << c.says;
    EXPECT_EQ(merged.status().code(), c.code) << merged.status();
    EXPECT_THAT(std::string(merged.status().message()), ::testing::HasSubstr(c.says));
  }
}

TEST(DescribeDeviceImageTest, NamesArchAndKind) {
  EXPECT_EQ(DescribeDeviceImage({DeviceImageKind::kCubin, 100, false, ""}), "sm_100 cubin");
  EXPECT_EQ(DescribeDeviceImage({DeviceImageKind::kPtx, 100, true, ""}), "compute_100 ptx");
  EXPECT_EQ(DescribeDeviceImage({DeviceImageKind::kCubin, 90, false, "", "a"}), "sm_90a cubin");
}

TEST(DeviceImageTest, EqualityIgnoresStorage) {
  const DeviceImage a{DeviceImageKind::kCubin, 100, false, "x"};
  EXPECT_EQ(a, (DeviceImage{DeviceImageKind::kCubin, 100, true, "x"}));
  EXPECT_NE(a, (DeviceImage{DeviceImageKind::kCubin, 100, false, "y"}));
  EXPECT_NE(a, (DeviceImage{DeviceImageKind::kPtx, 100, false, "x"}));
  EXPECT_NE(a, (DeviceImage{DeviceImageKind::kCubin, 100, false, "x", "a"}));
}

TEST(ReadDeviceImagesTest, MissingFileIsNotFound) {
  EXPECT_EQ(ReadDeviceImages("/nonexistent/k.o").status().code(), absl::StatusCode::kNotFound);
}

TEST(ReadDeviceImagesTest, ReadsFile) {
  const std::string dir = MakeTempDir();
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/fake.o";
  WriteAll(path, MakeElf({{".nv_fatbin", MakeContainer({FakeEntry{2, 100, 0x11, FakeCubin()}})}}));
  const auto images = ReadDeviceImages(path);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(Describe(*images), std::vector<std::string>{"sm_100 cubin"});
  WriteAll(path, "");
  EXPECT_EQ(ReadDeviceImages(path).status().code(), absl::StatusCode::kInvalidArgument);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

TEST(ReadDeviceImagesTest, PlainHostObjectIsNotFound) {
  if (access("/usr/bin/g++", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/g++";
  const std::string dir = MakeTempDir();
  ASSERT_FALSE(dir.empty());
  WriteAll(dir + "/plain.cc", "int plain() { return 1; }\n");
  ASSERT_TRUE(RunIn(dir, "/usr/bin/g++ -c plain.cc -o plain.o"));
  const auto images = ReadDeviceImages(dir + "/plain.o");
  EXPECT_EQ(images.status().code(), absl::StatusCode::kNotFound) << images.status();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

// --- Cases on objects that the real nvcc builds. nvcc takes about a second
// per unit, so the suite compiles each variant once.

struct NvccCase {
  std::string name;
  std::string flags;  // Besides -c.
  std::vector<std::string> images;
  // The images stored compressed; nullopt where that is the toolkit's choice.
  std::optional<std::vector<std::string>> compressed;
  bool same_as_default;  // Payloads equal to the default build's.
};

void PrintTo(const NvccCase& c, std::ostream* os) { *os << c.name; }

std::vector<NvccCase> NvccCases() {
  const std::string both = kSm100CubinAndPtx;
  return {
      {"Default", both, {"compute_100 ptx", "sm_100 cubin"}, std::nullopt, true},
      // zstd on nvcc 13.0.
      {"CompressAll",
       "-Xfatbin -compress-all " + both,
       {"compute_100 ptx", "sm_100 cubin"},
       {{"compute_100 ptx", "sm_100 cubin"}},
       true},
      // LZ4 on nvcc 13.0.
      {"CompressAllForSpeed",
       "-compress-mode=speed -Xfatbin -compress-all " + both,
       {"compute_100 ptx", "sm_100 cubin"},
       {{"compute_100 ptx", "sm_100 cubin"}},
       true},
      {"Uncompressed",
       "-compress-mode=none " + both,
       {"compute_100 ptx", "sm_100 cubin"},
       {{}},
       true},
      {"Relocatable",
       "-rdc=true " + both,
       {"compute_100 ptx", "sm_100 cubin"},
       std::nullopt,
       false},
      {"ArchSpecific",
       "-gencode arch=compute_100a,code=sm_100a",
       {"sm_100a cubin"},
       std::nullopt,
       false},
  };
}

class NvccObjectTest : public ::testing::TestWithParam<NvccCase> {
 protected:
  static void SetUpTestSuite() {
    if (!HaveNvcc()) return;
    dir_ = new std::string(MakeTempDir());
    WriteAll(*dir_ + "/kernel.cu", kKernelSource);
  }
  static void TearDownTestSuite() {
    if (dir_ == nullptr) return;
    std::error_code ignored;
    std::filesystem::remove_all(*dir_, ignored);
    delete dir_;
    dir_ = nullptr;
    delete reference_;
    reference_ = nullptr;
  }
  void SetUp() override {
    if (!HaveNvcc()) {
      GTEST_SKIP() << kNvcc << " is absent; these cases need the real nvcc";
    }
    ASSERT_FALSE(dir_->empty());
  }

  // Compiles kernel.cu with `flags` into `<name>.o` and returns its images.
  static absl::StatusOr<std::vector<DeviceImage>> Compile(const std::string& name,
                                                          const std::string& flags) {
    const std::string object = *dir_ + "/" + name + ".o";
    const ::testing::AssertionResult ran =
        RunIn(*dir_, absl::StrCat(kNvcc, " -c ", flags, " kernel.cu -o ", object));
    if (!ran) return absl::InternalError(ran.message());
    return ReadDeviceImages(object);
  }

  static std::string* dir_;
  // The images of the default build, compiled once for the cases to compare.
  static std::vector<DeviceImage>* reference_;
};

std::string* NvccObjectTest::dir_ = nullptr;
std::vector<DeviceImage>* NvccObjectTest::reference_ = nullptr;

TEST_P(NvccObjectTest, ReadsImages) {
  const NvccCase& c = GetParam();
  const auto images = Compile(c.name, c.flags);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(Describe(*images), c.images);
  if (c.compressed.has_value()) {
    std::vector<std::string> compressed;
    for (const DeviceImage& image : *images) {
      if (image.compressed) compressed.push_back(DescribeDeviceImage(image));
    }
    std::sort(compressed.begin(), compressed.end());
    EXPECT_EQ(compressed, *c.compressed);
  }
  for (const DeviceImage& image : *images) {
    if (image.kind == DeviceImageKind::kCubin) {
      EXPECT_EQ(image.payload.substr(0, SELFMAG), ELFMAG);
    } else {
      EXPECT_NE(image.payload.find(".target sm_100"), std::string::npos);
      EXPECT_EQ(image.payload.find('\0'), std::string::npos);
    }
  }
  if (c.same_as_default) {
    if (reference_ == nullptr) {
      auto reference = Compile("reference", kSm100CubinAndPtx);
      ASSERT_TRUE(reference.ok()) << reference.status();
      reference_ = new std::vector<DeviceImage>(*std::move(reference));
    }
    for (const DeviceImage& image : *reference_) {
      const DeviceImage* same = Find(*images, DescribeDeviceImage(image));
      ASSERT_NE(same, nullptr) << DescribeDeviceImage(image);
      EXPECT_TRUE(*same == image) << DescribeDeviceImage(image)
                                  << " differs from the default build";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, NvccObjectTest, ::testing::ValuesIn(NvccCases()),
                         [](const ::testing::TestParamInfo<NvccCase>& info) {
                           return info.param.name;
                         });

// Compiles each part of a split compile in `dir` (after the shell command
// `before(i)`, if any), appending its object's bytes and file name.
void CompileParts(const std::string& dir, const std::vector<ArchitecturePart>& parts,
                  const std::function<std::string(size_t)>& before,
                  std::vector<std::string>& objects, std::vector<std::string>& names) {
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string command = before(i) + kNvcc;
    for (const std::string& argument : parts[i].arguments) {
      absl::StrAppend(&command, " '", argument, "'");
    }
    ASSERT_TRUE(RunIn(dir, command));
    objects.push_back(ReadAll(dir + "/" + parts[i].output));
    names.push_back(parts[i].output);
  }
}

class NvccBuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveNvcc()) {
      GTEST_SKIP() << kNvcc << " is absent; these cases need the real nvcc";
    }
  }
  void TearDown() override {
    std::error_code ignored;
    for (const std::string& dir : dirs_) std::filesystem::remove_all(dir, ignored);
  }
  // A new temp folder holding kKernelSource as `file_name`.
  std::string Folder(const std::string& file_name) {
    dirs_.push_back(MakeTempDir());
    WriteAll(dirs_.back() + "/" + file_name, kKernelSource);
    return dirs_.back();
  }
  std::vector<std::string> dirs_;
};

TEST_F(NvccBuildTest, SharedLibraryHoldsTheObjectsCubin) {
  const std::string dir = Folder("kernel.cu");
  ASSERT_TRUE(RunIn(
      dir, absl::StrCat(kNvcc, " -c -Xcompiler -fPIC ", kSm100CubinAndPtx, " kernel.cu -o k.o")));
  ASSERT_TRUE(RunIn(dir, absl::StrCat(kNvcc, " -shared ", kSm100CubinAndPtx, " k.o -o libk.so")));
  const auto object = ReadDeviceImages(dir + "/k.o");
  ASSERT_TRUE(object.ok()) << object.status();
  const auto library = ReadDeviceImages(dir + "/libk.so");
  ASSERT_TRUE(library.ok()) << library.status();
  // The library also holds the image of nvcc's device link, so look for
  // ours among them.
  for (const DeviceImage& image : *object) {
    EXPECT_NE(std::find(library->begin(), library->end(), image), library->end())
        << DescribeDeviceImage(image) << " of k.o is not in libk.so";
  }
  EXPECT_NE(Find(*library, "sm_100 cubin"), nullptr);
}

// What else `nvcc -shared` puts in a library: the cubin of its device link
// for its default architecture (sm_75), holding no kernel; ours holds `add`.
TEST_F(NvccBuildTest, CountsTheKernelsOfACubin) {
  const std::string dir = Folder("kernel.cu");
  ASSERT_TRUE(RunIn(
      dir, absl::StrCat(kNvcc, " -c -Xcompiler -fPIC ", kSm100CubinAndPtx, " kernel.cu -o k.o")));
  ASSERT_TRUE(RunIn(dir, absl::StrCat(kNvcc, " -shared k.o -o libk.so")));
  const auto library = ReadDeviceImages(dir + "/libk.so");
  ASSERT_TRUE(library.ok()) << library.status();
  const DeviceImage* ours = Find(*library, "sm_100 cubin");
  const DeviceImage* linked = Find(*library, "sm_75 cubin");
  ASSERT_TRUE(ours != nullptr && linked != nullptr);
  EXPECT_EQ(*CountKernels(*ours), 1);
  EXPECT_EQ(*CountKernels(*linked), 0);
  EXPECT_EQ(CountKernels(*Find(*library, "compute_100 ptx")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(NvccBuildTest, SameSourceInOtherFolderAndNameHasSameDeviceCode) {
  const std::string first = Folder("alpha.cu");
  const std::string second = Folder("beta_renamed.cu");
  ASSERT_TRUE(RunIn(first, absl::StrCat(kNvcc, " -c ", kSm100CubinAndPtx, " alpha.cu -o a.o")));
  ASSERT_TRUE(
      RunIn(second, absl::StrCat(kNvcc, " -c ", kSm100CubinAndPtx, " beta_renamed.cu -o other.o")));
  // The host objects differ (nvcc embeds temporary names and a module id)...
  ASSERT_NE(ReadAll(first + "/a.o"), ReadAll(second + "/other.o"));
  // ...but the device code does not.
  const auto a = ReadDeviceImages(first + "/a.o");
  const auto b = ReadDeviceImages(second + "/other.o");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(Describe(*a), Describe(*b));
  ASSERT_NE(Find(*a, "sm_100 cubin"), nullptr);
  EXPECT_TRUE(*Find(*a, "sm_100 cubin") == *Find(*b, "sm_100 cubin"));
  EXPECT_TRUE(*Find(*a, "compute_100 ptx") == *Find(*b, "compute_100 ptx"));
}

// A whole compile for two targets, and the same compile as one part per
// target merged: the same device images in the same order, the same host
// code, and a library links from the merged object.
TEST_F(NvccBuildTest, MergedArchitecturePartsEqualTheWholeCompile) {
  const std::string dir = Folder("kernel.cu");
  const std::vector<std::string> whole = {"-O3",      "-Xcompiler=-fPIC",
                                          "-gencode", "arch=compute_90,code=sm_90",
                                          "-gencode", "arch=compute_100,code=[sm_100,compute_100]",
                                          "-c",       "kernel.cu",
                                          "-o",       "k.o"};
  ASSERT_TRUE(RunIn(dir, absl::StrCat(kNvcc, " ", absl::StrJoin(whole, " "))));
  absl::StatusOr<std::vector<ArchitecturePart>> parts = SplitByArchitecture(whole);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 2u);
  std::vector<std::string> objects, names;
  CompileParts(
      dir, *parts, [](size_t) { return std::string(); }, objects, names);
  absl::StatusOr<std::string> merged = MergeArchitectureParts(objects, names);
  ASSERT_TRUE(merged.ok()) << merged.status();
  WriteAll(dir + "/merged.o", *merged);
  const auto expected = ReadDeviceImages(dir + "/k.o");
  const auto got = ReadDeviceImages(dir + "/merged.o");
  ASSERT_TRUE(expected.ok() && got.ok()) << got.status();
  EXPECT_EQ(InOrder(*got), "sm_90 cubin, sm_100 cubin, compute_100 ptx");
  EXPECT_TRUE(*got == *expected) << "device code differs from the whole compile";
  const std::string whole_object = ReadAll(dir + "/k.o");
  absl::StatusOr<std::string> whole_fatbin = DeviceCodeSections(whole_object, "k.o");
  absl::StatusOr<std::string> merged_fatbin = DeviceCodeSections(*merged, "merged.o");
  ASSERT_TRUE(whole_fatbin.ok() && merged_fatbin.ok());
  EXPECT_TRUE(*merged_fatbin == *whole_fatbin) << "the .nv_fatbin section differs byte for byte";
  // No dead bytes: the first part's own container is gone, so the merged
  // object is the whole compile's size but for nvcc's temporary file names.
  EXPECT_LE(merged->size(), whole_object.size() + 256)
      << "merged " << merged->size() << " bytes, whole " << whole_object.size();
  // Host code: nvcc's temporary file names differ, the instructions do not.
  for (const char* section : {".text", ".rodata"}) {
    ASSERT_TRUE(
        RunIn(dir, absl::StrCat("objcopy -O binary --only-section=", section, " k.o whole", section,
                                " && objcopy -O binary "
                                "--only-section=",
                                section, " merged.o merged", section)));
    EXPECT_EQ(ReadAll(absl::StrCat(dir, "/whole", section)),
              ReadAll(absl::StrCat(dir, "/merged", section)))
        << section;
  }
  ASSERT_TRUE(RunIn(dir, absl::StrCat(kNvcc, " -shared merged.o -o libmerged.so")));
  const auto library = ReadDeviceImages(dir + "/libmerged.so");
  ASSERT_TRUE(library.ok()) << library.status();
  EXPECT_NE(Find(*library, "sm_90 cubin"), nullptr);
}

// The parts of a split unit whose compiles named internal device entities
// differently (here: the source's modification time differs between them,
// as it did when workers fetched inputs at different times) merge into an
// object that CheckOneCompileIdentity refuses, naming each image.
TEST_F(NvccBuildTest, PartsOfTwoCompileIdentitiesAreFoundOut) {
  const std::string dir = MakeTempDir();
  dirs_.push_back(dir);
  WriteAll(dir + "/nine.cu", testing::kPidNamedUnit);
  const std::vector<std::string> whole = {"-gencode", "arch=compute_100,code=sm_100",
                                          "-gencode", "arch=compute_100,code=compute_100",
                                          "-c",       "nine.cu",
                                          "-o",       "nine.o"};
  absl::StatusOr<std::vector<ArchitecturePart>> parts = SplitByArchitecture(whole);
  ASSERT_TRUE(parts.ok() && parts->size() == 2u) << parts.status();
  std::vector<std::string> objects, names;
  CompileParts(
      dir, *parts,
      [](size_t i) { return absl::StrCat("touch -d @", 946684800 + i, " nine.cu && "); }, objects,
      names);
  absl::StatusOr<std::string> merged = MergeArchitectureParts(objects, names);
  ASSERT_TRUE(merged.ok()) << merged.status();
  absl::Status status = CheckOneCompileIdentity(*merged, "unit nine.cu");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()),
              ::testing::AllOf(::testing::HasSubstr(
                                   "unit nine.cu names internal device entities under 2 compile "
                                   "identities"),
                               ::testing::HasSubstr("(compute_100 ptx)"),
                               ::testing::HasSubstr("(host code, sm_100 cubin)")));
  // Each part alone, and a whole compile, has one.
  for (size_t i = 0; i < objects.size(); ++i) {
    EXPECT_TRUE(CheckOneCompileIdentity(objects[i], names[i]).ok()) << names[i];
  }
  ASSERT_TRUE(RunIn(dir, absl::StrCat(kNvcc, " ", absl::StrJoin(whole, " "))));
  const std::string whole_object = ReadAll(dir + "/nine.o");
  EXPECT_TRUE(CheckOneCompileIdentity(whole_object, "nine.o").ok());
  auto places = CompileIdentitiesByPlace(whole_object, "nine.o");
  ASSERT_TRUE(places.ok()) << places.status();
  EXPECT_EQ(places->size(), 3u) << "the cubin, the PTX and the host code name them";
}

TEST_F(NvccBuildTest, CorruptingAnyFatbinByteNeverCrashes) {
  const std::string dir = Folder("kernel.cu");
  ASSERT_TRUE(RunIn(dir, absl::StrCat(kNvcc, " -c -Xfatbin -compress-all ", kSm100CubinAndPtx,
                                      " kernel.cu -o k.o")));
  std::string object = ReadAll(dir + "/k.o");
  ASSERT_TRUE(ReadDeviceImagesFromBytes(object, "k.o").ok());
  // Every byte of the first 0x200 of the section, set to 0xff and to 0.
  // The payloads are compressed, so decompression sees the damage too.
  const size_t section = object.find("\x50\xed\x55\xba");
  ASSERT_NE(section, std::string::npos);
  const size_t end = std::min(object.size(), section + 0x200);
  for (size_t i = section; i < end; ++i) {
    for (const char value : {'\xff', '\0'}) {
      const char saved = object[i];
      object[i] = value;
      const auto images = ReadDeviceImagesFromBytes(object, "k.o");
      EXPECT_TRUE(images.ok() || images.status().code() == absl::StatusCode::kInvalidArgument)
          << "byte " << i << ": " << images.status();
      object[i] = saved;
    }
  }
}

}  // namespace
}  // namespace distcc_cuda
