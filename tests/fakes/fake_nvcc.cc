// SPDX-License-Identifier: Apache-2.0
// A deliberately simple stand-in for nvcc, for tests that need many or slow
// or failing compiles without the real compiler's cost. It understands just
// enough of nvcc's command line:
//   --version                 prints a release (FAKE_NVCC_RELEASE, default 13.0)
//   FLAGS -M SOURCE           prints make dependencies from #include "..." lines
//   FLAGS -c SOURCE -o OBJ    "compiles": writes a relocatable ELF object
//                             whose .fake_source section holds the flags and
//                             the source text with its includes, and whose
//                             .nv_fatbin holds a fatbinary with one small
//                             image per -gencode code (sm_X: cubin, compute_X:
//                             PTX), as nvcc's objects do
//   -shared -o LIB OBJS...    "links": concatenates the objects
// Directives in the source steer a compile:
//   FAKE_FAIL(message)   prints "SOURCE(LINE): error: message", exits 2
//   FAKE_TOUCH_MIB=N     allocates and touches N MiB first, and holds it
//   FAKE_TOUCH_MIB_EACH=N  adds N MiB per occurrence: a unit of several
//                        instantiations, each with this, touches their sum
//   FAKE_SLEEP_MS=N      then sleeps N ms (so the peak lasts, as cicc's does)
//   FAKE_TARGET_MIB=N, FAKE_TARGET_MS=N  the same per -gencode target, as
//                        nvcc's --threads T runs them: min(T, targets) at
//                        once (memory) in ceil(targets / T) waves (time)
//   FAKE_CRASH           dies of SIGABRT
//   FAKE_STDOUT(text)    prints text on stdout
//   FAKE_SCAN_WAIT_FOR(path)  a scan (-M) waits until `path` exists (60 s
//                        at most, then fails): a test's proof of what ran
//                        while this unit was being scanned
//   FAKE_COMPILE_WAIT_FOR(path)  a compile (-c), once its memory is touched,
//                        waits the same way: a unit that runs until the test
//                        has seen it running, however loaded the machine
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

bool TakesValue(const std::string& arg) {
  static const std::set<std::string> kOptions = {
      "-o",    "-I",    "-isystem", "-include", "-gencode",  "-x", "-Xcompiler", "-Xptxas",
      "-arch", "-code", "-MF",      "-MT",      "--threads", "-t", "-std",       "-ccbin"};
  return kOptions.count(arg) > 0;
}

std::string ReadAll(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = static_cast<bool>(in);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// Collects `path` and the files it includes with quotes, depth first.
bool Collect(const std::string& path, const std::vector<std::string>& include_dirs,
             std::vector<std::string>& files, std::string& text) {
  for (const std::string& seen : files) {
    if (seen == path) return true;
  }
  bool ok = false;
  std::string content = ReadAll(path, &ok);
  if (!ok) return false;
  files.push_back(path);
  text += content;
  std::istringstream lines(content);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    size_t at = line.find("#include \"");
    if (at == std::string::npos) continue;
    size_t begin = at + 10;
    std::string name = line.substr(begin, line.find('"', begin) - begin);
    std::vector<std::string> candidates = {DirOf(path) + "/" + name};
    for (const std::string& dir : include_dirs) candidates.push_back(dir + "/" + name);
    bool found = false;
    for (const std::string& candidate : candidates) {
      if (access(candidate.c_str(), R_OK) == 0) {
        if (!Collect(candidate, include_dirs, files, text)) return false;
        found = true;
        break;
      }
    }
    if (!found) {
      std::cerr << path << ":" << number << ":10: fatal error: " << name
                << ": No such file or directory\ncompilation terminated.\n";
      return false;
    }
  }
  return true;
}

// Returns the text between "NAME(" and ")" after `from`, or "".
std::string Directive(const std::string& text, const std::string& name, size_t* where) {
  size_t at = text.find(name + "(");
  if (at == std::string::npos) return "";
  if (where) *where = at;
  size_t begin = at + name.size() + 1;
  return text.substr(begin, text.find(')', begin) - begin);
}

// Waits until `path` exists, if one is named: true once it does, false
// (with a message) after 60 s.
bool AwaitFile(const std::string& path) {
  for (int waited = 0; !path.empty() && access(path.c_str(), F_OK) != 0; ++waited) {
    if (waited == 6000) {
      std::cerr << "fake nvcc: " << path << " did not appear within 60 s\n";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

long NumberAfter(const std::string& text, const std::string& name) {
  size_t at = text.find(name + "=");
  return at == std::string::npos ? 0 : std::atol(text.c_str() + at + name.size() + 1);
}

void Append(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void Pad(std::string& out, size_t alignment) {
  while (out.size() % alignment != 0) out.push_back('\0');
}

// A fatbinary container with one image per code of the -gencode values in
// `gencodes` ("arch=compute_90,code=[sm_90,compute_90]"), in order.
std::string Fatbinary(const std::vector<std::string>& gencodes, const std::string& source) {
  std::string entries;
  for (const std::string& gencode : gencodes) {
    size_t at = gencode.find("code=");
    if (at == std::string::npos) continue;
    std::string codes = gencode.substr(at + 5);
    if (!codes.empty() && codes.front() == '[') codes = codes.substr(1, codes.size() - 2);
    std::stringstream list(codes);
    std::string code;
    while (std::getline(list, code, ',')) {
      bool ptx = code.rfind("compute_", 0) == 0;
      int arch = std::atoi(code.c_str() + (ptx ? 8 : 3));
      std::string payload = ptx ? "// fake PTX for " + code + " of " + source + "\n"
                                : "\x7f"
                                  "ELF fake cubin for " +
                                      code + " of " + source + "\n";
      if (ptx) payload.push_back('\0');
      Pad(payload, 8);
      Append(entries, ptx ? 1 : 2, 2);
      Append(entries, 0x0101, 2);
      Append(entries, 64, 4);              // header size
      Append(entries, payload.size(), 8);  // stored size
      Append(entries, 0, 4);               // not compressed
      Append(entries, 0, 4);               // no options
      Append(entries, ptx ? 0x00090008 : 0x00010008, 4);
      Append(entries, arch, 4);
      Append(entries, 0, 8);
      Append(entries, 0x11, 8);  // 64-bit, Linux
      Append(entries, 0, 8);
      Append(entries, 0, 8);
      entries += payload;
    }
  }
  std::string container;
  Append(container, 0xBA55ED50, 4);
  Append(container, 1, 2);
  Append(container, 16, 2);
  Append(container, entries.size(), 8);
  return container + entries;
}

// A minimal relocatable x86-64 ELF file: .fake_source, .nv_fatbin, .shstrtab.
std::string ElfObject(const std::string& fake_source, const std::string& fatbin) {
  const std::string names = std::string("\0.fake_source\0.nv_fatbin\0.shstrtab\0", 35);
  std::string out(64, '\0');
  struct Placed {
    uint32_t name;
    size_t offset, size;
  };
  std::vector<Placed> sections;
  for (auto [name, bytes] :
       {std::pair<uint32_t, const std::string*>{1, &fake_source}, {14, &fatbin}, {25, &names}}) {
    Pad(out, 8);
    sections.push_back({name, out.size(), bytes->size()});
    out += *bytes;
  }
  Pad(out, 8);
  const size_t shoff = out.size();
  out.append(64, '\0');  // section 0
  for (size_t i = 0; i < sections.size(); ++i) {
    Append(out, sections[i].name, 4);
    Append(out, i == 2 ? 3 : 1, 4);  // SHT_STRTAB or SHT_PROGBITS
    Append(out, i == 1 ? 2 : 0, 8);  // SHF_ALLOC for the fatbinary
    Append(out, 0, 8);
    Append(out, sections[i].offset, 8);
    Append(out, sections[i].size, 8);
    Append(out, 0, 4);
    Append(out, 0, 4);
    Append(out, i == 1 ? 8 : 1, 8);
    Append(out, 0, 8);
  }
  std::string header;
  header +=
      "\x7f"
      "ELF";
  header += std::string("\x02\x01\x01", 3);  // 64-bit, little-endian, version 1
  header.append(9, '\0');
  Append(header, 1, 2);   // ET_REL
  Append(header, 62, 2);  // EM_X86_64
  Append(header, 1, 4);
  Append(header, 0, 8);  // entry
  Append(header, 0, 8);  // no program headers
  Append(header, shoff, 8);
  Append(header, 0, 4);
  Append(header, 64, 2);  // ELF header size
  Append(header, 0, 2);
  Append(header, 0, 2);
  Append(header, 64, 2);  // section header size
  Append(header, sections.size() + 1, 2);
  Append(header, 3, 2);  // .shstrtab
  out.replace(0, 64, header);
  return out;
}

long SumAfter(const std::string& text, const std::string& name) {
  long sum = 0;
  for (size_t at = text.find(name + "="); at != std::string::npos;
       at = text.find(name + "=", at + 1)) {
    sum += std::atol(text.c_str() + at + name.size() + 1);
  }
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // FAKE_NVCC_LOG=FILE: each call's arguments, one line per call, so a test
  // can count what ran.
  if (const char* log = std::getenv("FAKE_NVCC_LOG")) {
    std::ofstream out(log, std::ios::app);
    for (const std::string& arg : args) out << arg << " ";
    out << "\n";
  }
  if (args.size() == 1 && args[0] == "--version") {
    const char* release = std::getenv("FAKE_NVCC_RELEASE");
    std::string r = release ? release : "13.0";
    std::cout << "nvcc: NVIDIA (R) Cuda compiler driver (fake)\n"
              << "Cuda compilation tools, release " << r << ", V" << r << ".0\n"
              << "Build fake_cuda_" << r << "\n";
    return 0;
  }
  bool depend = false, compile = false, shared = false;
  std::string output;
  std::vector<std::string> positional, include_dirs, flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-M")
      depend = true;
    else if (arg == "-c")
      compile = true;
    else if (arg == "-shared")
      shared = true;
    else if (arg == "-o" && i + 1 < args.size())
      output = args[++i];
    else if (arg == "-I" && i + 1 < args.size())
      include_dirs.push_back(args[++i]);
    else if (arg.rfind("-I", 0) == 0 && arg.size() > 2)
      include_dirs.push_back(arg.substr(2));
    else if (TakesValue(arg) && i + 1 < args.size())
      flags.push_back(arg + " " + args[++i]);
    else if (!arg.empty() && arg[0] == '-')
      flags.push_back(arg);
    else
      positional.push_back(arg);
  }
  if (shared) {
    std::ofstream out(output, std::ios::binary);
    out << "FAKELIB\n";
    for (const std::string& object : positional) {
      bool ok = false;
      std::string content = ReadAll(object, &ok);
      if (!ok) {
        std::cerr << "fake nvcc: cannot read " << object << "\n";
        return 1;
      }
      out << content;
    }
    return out ? 0 : 1;
  }
  if (positional.size() != 1) {
    std::cerr << "fake nvcc: expected one source, got " << positional.size() << "\n";
    return 1;
  }
  const std::string& source = positional[0];
  std::vector<std::string> files;
  std::string text;
  if (!Collect(source, include_dirs, files, text)) {
    if (files.empty()) std::cerr << "fake nvcc: cannot open " << source << "\n";
    return 1;
  }
  if (depend) {
    if (!AwaitFile(Directive(text, "FAKE_SCAN_WAIT_FOR", nullptr))) return 1;
    std::cout << source << ".o :";
    for (const std::string& file : files) std::cout << " \\\n    " << file;
    std::cout << "\n";
    return 0;
  }
  if (!compile || output.empty()) {
    std::cerr << "fake nvcc: expected -c SOURCE -o OBJECT\n";
    return 1;
  }
  if (long mib = NumberAfter(text, "FAKE_TOUCH_MIB") + SumAfter(text, "FAKE_TOUCH_MIB_EACH")) {
    size_t bytes = static_cast<size_t>(mib) << 20;
    volatile char* memory = static_cast<volatile char*>(std::malloc(bytes));
    for (size_t i = 0; memory != nullptr && i < bytes; i += 4096) memory[i] = 1;
  }
  if (!AwaitFile(Directive(text, "FAKE_COMPILE_WAIT_FOR", nullptr))) return 1;
  std::vector<std::string> gencodes;
  long threads = 1;
  for (const std::string& flag : flags) {
    if (flag.rfind("-gencode", 0) == 0) gencodes.push_back(flag.substr(9));
    if (flag.rfind("--threads ", 0) == 0 || flag.rfind("-t ", 0) == 0) {
      threads = std::atol(flag.c_str() + flag.find(' ') + 1);
    }
  }
  const long targets = std::max<long>(1, gencodes.size());
  const long at_once = threads <= 0 ? targets : std::min(threads, targets);
  const long waves = (targets + at_once - 1) / at_once;
  if (long mib = NumberAfter(text, "FAKE_TARGET_MIB") * at_once) {
    size_t bytes = static_cast<size_t>(mib) << 20;
    volatile char* memory = static_cast<volatile char*>(std::malloc(bytes));
    for (size_t i = 0; memory != nullptr && i < bytes; i += 4096) memory[i] = 1;
  }
  if (long ms = NumberAfter(text, "FAKE_SLEEP_MS") + NumberAfter(text, "FAKE_TARGET_MS") * waves) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  if (text.find("FAKE_CRASH") != std::string::npos) std::abort();
  std::string printed = Directive(text, "FAKE_STDOUT", nullptr);
  if (!printed.empty()) std::cout << printed << "\n";
  size_t where = 0;
  std::string failure = Directive(text, "FAKE_FAIL", &where);
  if (!failure.empty()) {
    int line = 1;
    for (size_t i = 0; i < where && i < text.size(); ++i) line += text[i] == '\n';
    std::cerr << source << "(" << line << "): error: " << failure << "\n";
    std::cerr << "1 error detected in the compilation of \"" << source << "\".\n";
    return 2;
  }
  std::string described = "FAKEOBJ " + source + "\n";
  for (const std::string& flag : flags) described += flag + "\n";
  described += text;
  std::ofstream out(output, std::ios::binary);
  out << ElfObject(described, Fatbinary(gencodes, source));
  return out ? 0 : 1;
}
