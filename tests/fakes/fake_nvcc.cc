// SPDX-License-Identifier: Apache-2.0
// A deliberately simple stand-in for nvcc, for tests that need many or slow
// or failing compiles without the real compiler's cost. It understands just
// enough of nvcc's command line:
//   --version                 prints a release (FAKE_NVCC_RELEASE, default 13.0)
//   FLAGS -M SOURCE           prints make dependencies from #include "..." lines
//   FLAGS -c SOURCE -o OBJ    "compiles": writes an object derived from the
//                             flags and the source text with its includes
//   -shared -o LIB OBJS...    "links": concatenates the objects
// Directives in the source steer a compile:
//   FAKE_FAIL(message)   prints "SOURCE(LINE): error: message", exits 2
//   FAKE_TOUCH_MIB=N     allocates and touches N MiB first, and holds it
//   FAKE_TOUCH_MIB_EACH=N  adds N MiB per occurrence: a unit of several
//                        instantiations, each with this, touches their sum
//   FAKE_SLEEP_MS=N      then sleeps N ms (so the peak lasts, as cicc's does)
//   FAKE_CRASH           dies of SIGABRT
//   FAKE_STDOUT(text)    prints text on stdout
#include <unistd.h>

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

long NumberAfter(const std::string& text, const std::string& name) {
  size_t at = text.find(name + "=");
  return at == std::string::npos ? 0 : std::atol(text.c_str() + at + name.size() + 1);
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
  if (long ms = NumberAfter(text, "FAKE_SLEEP_MS")) {
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
  std::ofstream out(output, std::ios::binary);
  out << "FAKEOBJ " << source << "\n";
  for (const std::string& flag : flags) out << flag << "\n";
  out << text;
  return out ? 0 : 1;
}
