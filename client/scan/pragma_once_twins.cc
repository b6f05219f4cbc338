// SPDX-License-Identifier: Apache-2.0
#include "client/scan/pragma_once_twins.h"

#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/base/files.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;

namespace {

// Options whose value is an include folder, longest first so that
// "-isystem" is not read as a joined "-i".
constexpr absl::string_view kIncludeFolderOptions[] = {
    "--system-include", "--include-path", "-idirafter", "-isystem", "-iquote", "-I"};

// One #include line: the name between its quotes or angle brackets.
struct Inclusion {
  std::string name;
  bool quoted = false;
};

// The #include, #include_next and #import lines of `text` that name a file
// literally (a macro-built name is left to the scan, which followed it).
std::vector<Inclusion> InclusionsIn(absl::string_view text) {
  std::vector<Inclusion> found;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == absl::string_view::npos) end = text.size();
    absl::string_view line = absl::StripLeadingAsciiWhitespace(text.substr(at, end - at));
    at = end + 1;
    if (!absl::ConsumePrefix(&line, "#")) continue;
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "include_next") && !absl::ConsumePrefix(&line, "include") &&
        !absl::ConsumePrefix(&line, "import")) {
      continue;
    }
    line = absl::StripLeadingAsciiWhitespace(line);
    if (line.empty() || (line[0] != '"' && line[0] != '<')) continue;
    const char close = line[0] == '"' ? '"' : '>';
    size_t stop = line.find(close, 1);
    if (stop == absl::string_view::npos || stop == 1) continue;
    found.push_back({std::string(line.substr(1, stop - 1)), line[0] == '"'});
  }
  return found;
}

// The folders where the closure shows a name found: ".../include" for
// "c10/util/Exception.h" listed as ".../include/c10/util/Exception.h".
std::set<std::string> FoldersNamesWereFoundIn(const std::set<std::string>& names,
                                              const std::vector<std::string>& closure) {
  std::multimap<std::string, std::string> by_file_name;
  for (const std::string& path : closure) {
    by_file_name.emplace(fs::path(path).filename().string(), path);
  }
  std::set<std::string> folders;
  for (const std::string& name : names) {
    if (name.empty() || name[0] == '/' || absl::StrContains(name, "..")) continue;
    const std::string suffix = "/" + name;
    auto [first, last] = by_file_name.equal_range(fs::path(name).filename().string());
    for (auto it = first; it != last; ++it) {
      if (absl::EndsWith(it->second, suffix)) {
        folders.insert(it->second.substr(0, it->second.size() - suffix.size()));
      }
    }
  }
  return folders;
}

// The closure's files by size, with their bytes read once when asked.
class ClosureBytes {
 public:
  explicit ClosureBytes(const std::vector<std::string>& closure) {
    for (const std::string& path : closure) {
      struct stat st;
      if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) by_size_.emplace(st.st_size, path);
    }
  }

  // Whether a closure file has the size and bytes of `path`.
  bool HasTwinOf(const std::string& path, int64_t size) {
    auto [first, last] = by_size_.equal_range(size);
    if (first == last) return false;
    absl::StatusOr<std::string> bytes = ReadFile(path);
    if (!bytes.ok()) return false;
    for (auto it = first; it != last; ++it) {
      const std::string* known = Bytes(it->second);
      if (known != nullptr && *known == *bytes) return true;
    }
    return false;
  }

 private:
  const std::string* Bytes(const std::string& path) {
    auto it = bytes_.find(path);
    if (it == bytes_.end()) {
      absl::StatusOr<std::string> read = ReadFile(path);
      it = bytes_.emplace(path, read.ok() ? std::optional<std::string>(*read) : std::nullopt).first;
    }
    return it->second.has_value() ? &*it->second : nullptr;
  }

  std::multimap<int64_t, std::string> by_size_;
  std::map<std::string, std::optional<std::string>> bytes_;
};

}  // namespace

std::vector<std::string> IncludeFoldersOf(const std::vector<std::string>& flags,
                                          const std::string& directory) {
  std::vector<std::string> folders;
  auto add = [&](absl::string_view value) {
    if (!value.empty()) folders.push_back(AbsolutePath(std::string(value), directory));
  };
  for (size_t i = 0; i < flags.size(); ++i) {
    absl::string_view flag = flags[i];
    // -Xcompiler -Ifoo,-isystem=bar reaches the host compiler's pass.
    if ((flag == "-Xcompiler" || flag == "--compiler-options") && i + 1 < flags.size()) {
      for (const std::string& inner : IncludeFoldersOf({flags[i + 1]}, directory)) {
        folders.push_back(inner);
      }
      ++i;
      continue;
    }
    for (absl::string_view option : kIncludeFolderOptions) {
      if (!absl::ConsumePrefix(&flag, option)) continue;
      if (flag.empty()) {
        if (i + 1 < flags.size()) add(flags[++i]);
      } else {
        absl::ConsumePrefix(&flag, "=");
        add(flag);
      }
      break;
    }
  }
  return folders;
}

std::vector<std::string> PragmaOnceTwins(const std::vector<std::string>& closure,
                                         const std::vector<std::string>& include_folders) {
  const std::set<std::string> listed(closure.begin(), closure.end());
  std::set<std::string> names;                          // every name, searched everywhere
  std::set<std::pair<std::string, std::string>> local;  // quoted: (including folder, name)
  for (const std::string& path : closure) {
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) continue;
    for (const Inclusion& inclusion : InclusionsIn(*text)) {
      names.insert(inclusion.name);
      if (inclusion.quoted) local.emplace(fs::path(path).parent_path().string(), inclusion.name);
    }
  }
  std::set<std::string> folders = FoldersNamesWereFoundIn(names, closure);
  folders.insert(include_folders.begin(), include_folders.end());

  ClosureBytes closure_bytes(closure);
  std::set<std::string> tried;
  std::vector<std::string> twins;
  auto try_candidate = [&](const fs::path& candidate) {
    const std::string path = candidate.lexically_normal().string();
    if (listed.count(path) != 0 || !tried.insert(path).second) return;
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
    if (closure_bytes.HasTwinOf(path, st.st_size)) twins.push_back(path);
  };
  for (const auto& [folder, name] : local) try_candidate(fs::path(folder) / name);
  for (const std::string& name : names) {
    if (name[0] == '/') {
      try_candidate(name);
      continue;
    }
    for (const std::string& folder : folders) try_candidate(fs::path(folder) / name);
  }
  return twins;
}

}  // namespace distcc_cuda::client
