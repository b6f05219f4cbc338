// SPDX-License-Identifier: Apache-2.0
// NVIDIA does not document the fatbinary layout below. It was measured on
// objects, shared libraries and executables built by nvcc 13.0 and on the
// toolkit's own libcudadevrt.a and libcublasLt.so; the reader relies only on
// the fields marked there, checks each against the bytes it came from, and
// bounds every read, so a damaged file yields INVALID_ARGUMENT, not a crash.
//
// Container header (16 bytes, little-endian), repeated: a linked file holds
// one container per input object (and the CUDA runtime's own), back to back,
// possibly separated by zero padding.
//   +0x00 u32 magic 0xBA55ED50   +0x04 u16 version (1)
//   +0x06 u16 header size (16)   +0x08 u64 size of the entries that follow
// Entry, repeated until the container's size is used up:
//   +0x00 u16 kind (1 PTX, 2 cubin, 8 LTO IR)     +0x02 u16 (0x0101)
//   +0x04 u32 header size (64, 80, 96, 112, 120)  +0x08 u64 stored payload
//             size, 8-byte aligned; the payload starts at +header size
//   +0x10 u32 compressed size (0 if not compressed)
//   +0x14 u32 offset of an {u32 offset, u32 size} options descriptor, or 0
//   +0x18 u16 minor, u16 major version (PTX ISA 9.0; cubin ABI 1.8)
//   +0x1c u32 architecture (100 for sm_100 and compute_100)
//   +0x20 u32 offset, +0x24 u32 size of the source file name (-G only)
//   +0x28 u64 flags: 0x1 64-bit, 0x2 debug, 0x10 Linux, 0x2000 LZ4 block,
//             0x8000 zstd frame, 0x100000 "a" arch, 0x200000 "f" arch
//   +0x30 u64 (0; a hash for LTO IR)
//   +0x38 u64 uncompressed size (0 if not compressed)
#include "common/nvcc/fatbin.h"

#include <elf.h>
#include <fcntl.h>
#include <lz4.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status.h"

namespace distcc_cuda {
namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50;
constexpr uint16_t kFatbinVersion = 1;
constexpr size_t kContainerHeaderSize = 16;
constexpr size_t kEntryBaseSize = 0x40;

constexpr uint16_t kEntryKindPtx = 1;
constexpr uint16_t kEntryKindCubin = 2;

constexpr uint64_t kFlagLz4 = 0x2000;
constexpr uint64_t kFlagZstd = 0x8000;
constexpr uint64_t kFlagArchSpecific = 0x100000;
constexpr uint64_t kFlagFamilySpecific = 0x200000;

// No real image comes near this; it keeps a corrupt size field from making
// the reader allocate without bound.
constexpr uint64_t kMaxImageBytes = uint64_t{1} << 30;

// The sections nvcc puts fatbinaries in: `.nv_fatbin` for whole-program and
// device-linked code, `__nv_relfatbin` for -rdc objects (before the device
// link); an executable linked from -rdc objects has both.
bool IsFatbinSection(std::string_view name) {
  return name == ".nv_fatbin" || name == "__nv_relfatbin";
}

// Little-endian loads, so the reader does not depend on the host's byte
// order or on alignment. Callers check the bounds.
uint16_t Load16(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint16_t>(b[0] | (b[1] << 8));
}
uint32_t Load32(const char* p) { return Load16(p) | (static_cast<uint32_t>(Load16(p + 2)) << 16); }
uint64_t Load64(const char* p) { return Load32(p) | (static_cast<uint64_t>(Load32(p + 4)) << 32); }

// A byte range of the file: the bytes and their offset in the file, so every
// error can name the offset a reader of hexdump would look at.
struct Span {
  std::string_view bytes;
  uint64_t file_offset;
};

absl::Status Malformed(const std::string& name, uint64_t offset, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %s (file offset 0x%x)", name, what, offset));
}

struct Section {
  std::string name;
  Span span;
  uint64_t header_offset;  // of its entry in the section header table
};

// Returns the file's `.nv_fatbin` and `__nv_relfatbin` sections.
absl::StatusOr<std::vector<Section>> FindFatbinSections(std::string_view elf,
                                                        const std::string& name) {
  if (elf.size() < EI_NIDENT || std::memcmp(elf.data(), ELFMAG, SELFMAG) != 0) {
    return Malformed(name, 0, "not an ELF file (no \\x7fELF magic)");
  }
  if (elf[EI_CLASS] != ELFCLASS64 || elf[EI_DATA] != ELFDATA2LSB) {
    return Malformed(name, EI_CLASS,
                     "not a 64-bit little-endian ELF file, the only kind "
                     "nvcc produces on Linux");
  }
  if (elf.size() < sizeof(Elf64_Ehdr)) {
    return Malformed(name, 0, "ELF header truncated");
  }
  const char* base = elf.data();
  const uint64_t shoff = Load64(base + offsetof(Elf64_Ehdr, e_shoff));
  const uint16_t shentsize = Load16(base + offsetof(Elf64_Ehdr, e_shentsize));
  uint64_t shnum = Load16(base + offsetof(Elf64_Ehdr, e_shnum));
  uint32_t shstrndx = Load16(base + offsetof(Elf64_Ehdr, e_shstrndx));
  if (shoff == 0) {
    return absl::NotFoundError(
        absl::StrCat(name, ": has no section headers, so no fatbinary section"));
  }
  if (shentsize < sizeof(Elf64_Shdr)) {
    return Malformed(name, offsetof(Elf64_Ehdr, e_shentsize),
                     absl::StrCat("section header size ", shentsize, " smaller than Elf64_Shdr"));
  }
  if (shoff > elf.size() || elf.size() - shoff < shentsize) {
    return Malformed(name, shoff, "section header table outside the file");
  }
  // Files with 0xff00 or more sections keep the real count and string table
  // index in section 0 (ELF extended numbering).
  const char* section0 = base + shoff;
  if (shnum == 0) shnum = Load64(section0 + offsetof(Elf64_Shdr, sh_size));
  if (shstrndx == SHN_XINDEX) {
    shstrndx = Load32(section0 + offsetof(Elf64_Shdr, sh_link));
  }
  if (shnum > (elf.size() - shoff) / shentsize) {
    return Malformed(
        name, shoff,
        absl::StrCat("section header table of ", shnum, " entries runs past the end of the file"));
  }
  auto header = [&](uint64_t index) { return base + shoff + index * shentsize; };
  auto range = [&](uint64_t index) -> absl::StatusOr<Span> {
    const char* h = header(index);
    const uint64_t offset = Load64(h + offsetof(Elf64_Shdr, sh_offset));
    uint64_t size = Load64(h + offsetof(Elf64_Shdr, sh_size));
    if (Load32(h + offsetof(Elf64_Shdr, sh_type)) == SHT_NOBITS) size = 0;
    if (offset > elf.size() || elf.size() - offset < size) {
      return Malformed(name, h - base,
                       absl::StrCat("section ", index, " lies outside the file (offset ", offset,
                                    ", size ", size, ")"));
    }
    return Span{elf.substr(offset, size), offset};
  };
  if (shstrndx == SHN_UNDEF || shstrndx >= shnum) {
    return Malformed(name, offsetof(Elf64_Ehdr, e_shstrndx), "no section name table");
  }
  ASSIGN_OR_RETURN(const Span names, range(shstrndx));

  std::vector<Section> sections;
  for (uint64_t i = 1; i < shnum; ++i) {
    const uint32_t name_offset = Load32(header(i) + offsetof(Elf64_Shdr, sh_name));
    if (name_offset >= names.bytes.size()) continue;
    std::string_view section_name = names.bytes.substr(name_offset);
    section_name = section_name.substr(0, section_name.find('\0'));
    if (!IsFatbinSection(section_name)) continue;
    ASSIGN_OR_RETURN(const Span span, range(i));
    sections.push_back({std::string(section_name), span, static_cast<uint64_t>(header(i) - base)});
  }
  if (sections.empty()) {
    return absl::NotFoundError(
        absl::StrCat(name,
                     ": no .nv_fatbin or __nv_relfatbin section; it holds no "
                     "CUDA device code (was it compiled by nvcc?)"));
  }
  return sections;
}

// Decompresses `stored` (the compressed bytes of an entry) into exactly
// `size` bytes.
absl::StatusOr<std::string> Decompress(std::string_view stored, uint64_t flags, uint64_t size,
                                       const std::string& name, uint64_t offset) {
  if (size == 0 || size > kMaxImageBytes) {
    return Malformed(name, offset,
                     absl::StrCat("compressed image claims ", size, " bytes uncompressed"));
  }
  std::string out(size, '\0');
  if (flags & kFlagZstd) {
    const size_t n = ZSTD_decompress(out.data(), out.size(), stored.data(), stored.size());
    if (ZSTD_isError(n)) {
      return Malformed(name, offset,
                       absl::StrCat("zstd-compressed image does not "
                                    "decompress: ",
                                    ZSTD_getErrorName(n)));
    }
    if (n != size) {
      return Malformed(
          name, offset,
          absl::StrCat("zstd-compressed image decompresses to ", n, " bytes, header says ", size));
    }
    return out;
  }
  if (stored.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return Malformed(name, offset, "LZ4-compressed image too large");
  }
  const int n = LZ4_decompress_safe(stored.data(), out.data(), static_cast<int>(stored.size()),
                                    static_cast<int>(size));
  if (n < 0 || static_cast<uint64_t>(n) != size) {
    return Malformed(name, offset,
                     absl::StrCat("LZ4-compressed image does not decompress "
                                  "to the ",
                                  size, " bytes its header says"));
  }
  return out;
}

// Reads the PTX or cubin entry `entry`: its header (`header_size` bytes)
// followed by its stored payload.
absl::StatusOr<DeviceImage> ReadEntry(Span entry, uint16_t kind, uint32_t header_size,
                                      const std::string& name) {
  const char* h = entry.bytes.data();
  const uint64_t offset = entry.file_offset;
  const uint32_t compressed_size = Load32(h + 0x10);
  const uint64_t flags = Load64(h + 0x28);
  const uint64_t uncompressed_size = Load64(h + 0x38);
  std::string_view stored = entry.bytes.substr(header_size);

  DeviceImage image;
  image.kind = kind == kEntryKindPtx ? DeviceImageKind::kPtx : DeviceImageKind::kCubin;
  image.arch = static_cast<int>(Load32(h + 0x1c));
  if (flags & kFlagArchSpecific) {
    image.arch_suffix = "a";
  } else if (flags & kFlagFamilySpecific) {
    image.arch_suffix = "f";
  }
  const uint64_t compression = flags & (kFlagLz4 | kFlagZstd);
  image.compressed = compression != 0;
  if (compression == (kFlagLz4 | kFlagZstd)) {
    return Malformed(name, offset, "entry flags say both LZ4 and zstd");
  }
  if (image.compressed) {
    if (compressed_size == 0 || compressed_size > stored.size()) {
      return Malformed(name, offset,
                       absl::StrCat("compressed size ", compressed_size,
                                    " does not fit the stored ", stored.size(), " bytes"));
    }
    ASSIGN_OR_RETURN(image.payload, Decompress(stored.substr(0, compressed_size), flags,
                                               uncompressed_size, name, offset + header_size));
  } else {
    image.payload = std::string(stored);
  }
  // PTX is stored with its NUL terminator (and, uncompressed, zero padding to
  // 8 bytes); dropping both makes compressed and plain PTX compare equal.
  if (image.kind == DeviceImageKind::kPtx) {
    const size_t end = image.payload.find_last_not_of('\0');
    image.payload.resize(end == std::string::npos ? 0 : end + 1);
  }
  return image;
}

// Appends the images of the container at the start of `container`, which
// holds at least its 16-byte header; returns the container's whole size.
absl::StatusOr<uint64_t> ReadContainer(Span container, const std::string& name,
                                       std::vector<DeviceImage>* images) {
  const char* c = container.bytes.data();
  const uint64_t offset = container.file_offset;
  const uint32_t magic = Load32(c);
  if (magic != kFatbinMagic) {
    return Malformed(name, offset,
                     absl::StrFormat("no fatbinary magic (found 0x%08x, "
                                     "expected 0x%08x)",
                                     magic, kFatbinMagic));
  }
  const uint16_t version = Load16(c + 4);
  if (version != kFatbinVersion) {
    return Malformed(
        name, offset,
        absl::StrCat("fatbinary version ", version, " unknown (this reader knows version 1)"));
  }
  const uint16_t header_size = Load16(c + 6);
  const uint64_t entries_size = Load64(c + 8);
  const uint64_t left = container.bytes.size();
  if (header_size < kContainerHeaderSize || header_size > left ||
      entries_size > left - header_size) {
    return Malformed(name, offset,
                     absl::StrCat("fatbinary container truncated: it claims ", header_size, " + ",
                                  entries_size, " bytes, the section has ", left, " left"));
  }
  uint64_t pos = header_size;
  const uint64_t end = header_size + entries_size;
  while (pos < end) {
    const char* e = c + pos;
    const uint64_t entry_offset = offset + pos;
    if (end - pos < kEntryBaseSize) {
      return Malformed(name, entry_offset,
                       absl::StrCat("fatbinary entry header truncated: ", end - pos,
                                    " bytes left of its container"));
    }
    const uint16_t kind = Load16(e);
    const uint32_t entry_header_size = Load32(e + 4);
    const uint64_t stored_size = Load64(e + 8);
    if (entry_header_size < kEntryBaseSize || entry_header_size > end - pos ||
        stored_size > end - pos - entry_header_size) {
      return Malformed(
          name, entry_offset,
          absl::StrCat("fatbinary entry truncated: it claims ", entry_header_size, " + ",
                       stored_size, " bytes, its container has ", end - pos, " left"));
    }
    const uint64_t entry_size = entry_header_size + stored_size;
    if (kind == kEntryKindPtx || kind == kEntryKindCubin) {
      ASSIGN_OR_RETURN(DeviceImage image,
                       ReadEntry({container.bytes.substr(pos, entry_size), entry_offset}, kind,
                                 entry_header_size, name));
      images->push_back(std::move(image));
    }
    pos += entry_size;
  }
  return end;
}

// Keeps a read-only mapping of a whole file; mapping rather than reading
// means a 1 GiB extension library costs only the pages of its fatbinaries.
class MappedFile {
 public:
  static absl::StatusOr<MappedFile> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int error = errno;
      ::close(fd);
      return absl::ErrnoToStatus(error, absl::StrCat("cannot stat ", path));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
    }
    MappedFile file;
    file.size_ = static_cast<size_t>(st.st_size);
    if (file.size_ > 0) {
      void* data = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (data == MAP_FAILED) {
        const int error = errno;
        ::close(fd);
        return absl::ErrnoToStatus(error, absl::StrCat("cannot map ", path));
      }
      file.data_ = data;
    }
    ::close(fd);
    return file;
  }

  MappedFile(MappedFile&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  MappedFile& operator=(MappedFile&&) = delete;
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }

  std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }

 private:
  MappedFile() = default;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

absl::StatusOr<std::string> MergeArchitectureParts(const std::vector<std::string>& parts,
                                                   const std::vector<std::string>& names) {
  if (parts.size() < 2 || names.size() != parts.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("merging architecture parts needs two or more, with a name each; got ",
                     parts.size(), " parts and ", names.size(), " names"));
  }
  std::string entries;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& name = names[i];
    ASSIGN_OR_RETURN(const std::vector<Section> sections, FindFatbinSections(parts[i], name));
    if (sections.size() != 1 || sections[0].name != ".nv_fatbin") {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": expected one .nv_fatbin section (a whole-program object), found ",
                       sections.size(), " fatbinary sections starting with ", sections[0].name));
    }
    if (Load16(parts[i].data() + offsetof(Elf64_Ehdr, e_type)) != ET_REL) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": not a relocatable object (-c)"));
    }
    const Span& span = sections[0].span;
    std::vector<DeviceImage> images;
    if (span.bytes.size() < kContainerHeaderSize) {
      return Malformed(name, span.file_offset, "fatbinary container header truncated");
    }
    ASSIGN_OR_RETURN(const uint64_t size, ReadContainer(span, name, &images));
    // nvcc writes one container per object; anything after it (other than
    // padding) would be lost by taking only the entries of the first.
    if (span.bytes.substr(size).find_first_not_of('\0') != std::string_view::npos) {
      return Malformed(name, span.file_offset + size,
                       "more than one fatbinary container in .nv_fatbin");
    }
    const uint16_t header_size = Load16(span.bytes.data() + 6);
    entries.append(span.bytes.substr(header_size, size - header_size));
  }
  // The first part's host code with its .nv_fatbin replaced, in place, by
  // one container of every part's entries. What followed the old section
  // moves by a multiple of the largest alignment among the sections after
  // it (and the section header table's), so nothing after it loses its
  // alignment; in a relocatable object only the section headers and the ELF
  // header say where things lie, and both are rewritten.
  const std::string& host = parts[0];
  ASSIGN_OR_RETURN(const std::vector<Section> first, FindFatbinSections(host, names[0]));
  const uint64_t old_offset = first[0].span.file_offset;
  const uint64_t old_end = old_offset + first[0].span.bytes.size();
  std::string container(kContainerHeaderSize, '\0');
  const uint64_t entries_size = entries.size();
  const uint32_t magic = kFatbinMagic;
  const uint16_t version = kFatbinVersion, header_size = kContainerHeaderSize;
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "ELF files here are little-endian");
  std::memcpy(container.data(), &magic, 4);
  std::memcpy(container.data() + 4, &version, 2);
  std::memcpy(container.data() + 6, &header_size, 2);
  std::memcpy(container.data() + 8, &entries_size, 8);
  container.append(entries);

  const char* base = host.data();
  const uint64_t shoff = Load64(base + offsetof(Elf64_Ehdr, e_shoff));
  const uint16_t shentsize = Load16(base + offsetof(Elf64_Ehdr, e_shentsize));
  uint64_t shnum = Load16(base + offsetof(Elf64_Ehdr, e_shnum));
  if (shnum == 0) shnum = Load64(base + shoff + offsetof(Elf64_Shdr, sh_size));
  uint64_t alignment = 8;  // the section header table's
  for (uint64_t i = 1; i < shnum; ++i) {
    const char* h = base + shoff + i * shentsize;
    if (Load64(h + offsetof(Elf64_Shdr, sh_offset)) < old_end) continue;
    alignment = std::max<uint64_t>(alignment, Load64(h + offsetof(Elf64_Shdr, sh_addralign)));
  }
  if (alignment > (uint64_t{1} << 20) || (alignment & (alignment - 1)) != 0) {
    return Malformed(names[0], shoff, absl::StrCat("section alignment ", alignment));
  }
  const uint64_t grown =
      container.size() > old_end - old_offset ? container.size() - (old_end - old_offset) : 0;
  const uint64_t shift = (grown + alignment - 1) / alignment * alignment;
  std::string merged = host.substr(0, old_offset);
  merged.append(container);
  merged.resize(old_end + shift, '\0');
  merged.append(host.substr(old_end));
  char* out = merged.data();
  auto store64 = [](char* at, uint64_t value) { std::memcpy(at, &value, 8); };
  if (shoff >= old_end) store64(out + offsetof(Elf64_Ehdr, e_shoff), shoff + shift);
  const uint64_t new_shoff = Load64(out + offsetof(Elf64_Ehdr, e_shoff));
  const uint64_t fatbin_index = (first[0].header_offset - shoff) / shentsize;
  for (uint64_t i = 1; i < shnum; ++i) {
    char* h = out + new_shoff + i * shentsize;
    if (i == fatbin_index) {
      store64(h + offsetof(Elf64_Shdr, sh_size), container.size());
      continue;
    }
    const uint64_t offset = Load64(h + offsetof(Elf64_Shdr, sh_offset));
    if (offset >= old_end) store64(h + offsetof(Elf64_Shdr, sh_offset), offset + shift);
  }
  return merged;
}

absl::StatusOr<std::string> DeviceCodeSections(std::string_view elf_bytes,
                                               std::string_view name_view) {
  const std::string name(name_view);
  ASSIGN_OR_RETURN(const std::vector<Section> sections, FindFatbinSections(elf_bytes, name));
  std::string bytes;
  for (const Section& section : sections) bytes.append(section.span.bytes);
  return bytes;
}

absl::StatusOr<std::string> HostCodeOf(std::string_view elf_bytes, std::string_view name_view) {
  const std::string name(name_view);
  ASSIGN_OR_RETURN(const std::vector<Section> sections, FindFatbinSections(elf_bytes, name));
  std::string host(elf_bytes);
  for (const Section& section : sections) {
    std::fill_n(host.begin() + section.span.file_offset, section.span.bytes.size(), '\0');
  }
  return host;
}

bool operator==(const DeviceImage& a, const DeviceImage& b) {
  return a.kind == b.kind && a.arch == b.arch && a.arch_suffix == b.arch_suffix &&
         a.payload == b.payload;
}

bool operator!=(const DeviceImage& a, const DeviceImage& b) { return !(a == b); }

absl::StatusOr<std::vector<DeviceImage>> ReadDeviceImagesFromBytes(std::string_view elf_bytes,
                                                                   std::string_view name_view) {
  // Debian's abseil has its own string_view, which StrCat does not take
  // from std::string_view; messages use this copy.
  const std::string name(name_view);
  ASSIGN_OR_RETURN(const std::vector<Section> sections, FindFatbinSections(elf_bytes, name));
  std::vector<DeviceImage> images;
  for (const Section& section : sections) {
    const std::string_view bytes = section.span.bytes;
    uint64_t pos = 0;
    while (pos < bytes.size()) {
      // The linker may pad each object's container to the section's
      // alignment; a container never starts with a zero byte.
      if (bytes[pos] == '\0') {
        ++pos;
        continue;
      }
      const uint64_t offset = section.span.file_offset + pos;
      if (bytes.size() - pos < kContainerHeaderSize) {
        return Malformed(name, offset,
                         absl::StrCat("fatbinary container header truncated "
                                      "at the end of section ",
                                      section.name));
      }
      ASSIGN_OR_RETURN(const uint64_t size,
                       ReadContainer({bytes.substr(pos), offset}, name, &images));
      pos += size;
    }
  }
  return images;
}

absl::StatusOr<std::vector<DeviceImage>> ReadDeviceImages(const std::string& path) {
  ASSIGN_OR_RETURN(const MappedFile file, MappedFile::Open(path));
  return ReadDeviceImagesFromBytes(file.bytes(), path);
}

absl::StatusOr<int> CountKernels(const DeviceImage& cubin) {
  const std::string& elf = cubin.payload;
  if (cubin.kind != DeviceImageKind::kCubin || elf.size() < sizeof(Elf64_Ehdr) ||
      std::memcmp(elf.data(), ELFMAG, SELFMAG) != 0 || elf[EI_CLASS] != ELFCLASS64) {
    return absl::InvalidArgumentError("not a 64-bit ELF cubin");
  }
  const char* base = elf.data();
  const uint64_t shoff = Load64(base + offsetof(Elf64_Ehdr, e_shoff));
  const uint16_t shentsize = Load16(base + offsetof(Elf64_Ehdr, e_shentsize));
  const uint64_t shnum = Load16(base + offsetof(Elf64_Ehdr, e_shnum));
  const uint32_t shstrndx = Load16(base + offsetof(Elf64_Ehdr, e_shstrndx));
  if (shentsize < sizeof(Elf64_Shdr) || shoff > elf.size() || shstrndx >= shnum ||
      shnum > (elf.size() - shoff) / shentsize) {
    return absl::InvalidArgumentError("cubin section header table outside the file");
  }
  auto header = [&](uint64_t index) { return base + shoff + index * shentsize; };
  const uint64_t names_offset = Load64(header(shstrndx) + offsetof(Elf64_Shdr, sh_offset));
  const uint64_t names_size = Load64(header(shstrndx) + offsetof(Elf64_Shdr, sh_size));
  if (names_offset > elf.size() || elf.size() - names_offset < names_size) {
    return absl::InvalidArgumentError("cubin section names outside the file");
  }
  const std::string_view names(base + names_offset, names_size);
  int kernels = 0;
  for (uint64_t i = 1; i < shnum; ++i) {
    const uint32_t name = Load32(header(i) + offsetof(Elf64_Shdr, sh_name));
    if (name >= names.size()) continue;
    kernels += names.substr(name, 6) == ".text." ? 1 : 0;
  }
  return kernels;
}

std::string DescribeDeviceImage(const DeviceImage& image) {
  const bool cubin = image.kind == DeviceImageKind::kCubin;
  return absl::StrCat(cubin ? "sm_" : "compute_", image.arch, image.arch_suffix,
                      cubin ? " cubin" : " ptx");
}

}  // namespace distcc_cuda
