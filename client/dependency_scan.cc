// SPDX-License-Identifier: Apache-2.0
#include "client/dependency_scan.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/status.h"
#include "common/subprocess.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;

std::vector<std::string> ExcludedPrefixes(const std::string& nvcc) {
  std::vector<std::string> prefixes = {"/usr/include/", "/usr/lib/", "/usr/local/include/",
                                       "/usr/lib64/"};
  fs::path root = fs::path(nvcc).parent_path().parent_path();
  prefixes.push_back(AbsolutePath(root.string()) + "/");
  std::error_code error;
  fs::path real = fs::canonical(root, error);
  if (!error) prefixes.push_back(real.string() + "/");
  return prefixes;
}

std::vector<std::string> ParseMakeDependencies(const std::string& text) {
  std::vector<std::string> files;
  std::string word;
  bool after_colon = false;
  auto flush = [&] {
    if (!word.empty() && after_colon) files.push_back(word);
    word.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
      ++i;
      flush();
    } else if (c == '\\' && i + 1 < text.size() && text[i + 1] == ' ') {
      word += ' ';
      ++i;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (!word.empty() && word.back() == ':' && !after_colon) {
        word.clear();
        after_colon = true;
      } else {
        flush();
      }
    } else if (c == ':' && !after_colon &&
               (i + 1 == text.size() || text[i + 1] == ' ' || text[i + 1] == '\n')) {
      word.clear();
      after_colon = true;
    } else {
      word += c;
    }
  }
  flush();
  return files;
}

namespace {

// Runs nvcc's dependency pass; `rule` gets the make rule (stdout, or the
// -MF file the arguments name).
absl::StatusOr<std::vector<std::string>> RunScan(
    const std::string& nvcc, const std::string& directory, const std::vector<std::string>& flags,
    const std::string& source, const std::vector<std::string>& dependency_arguments,
    const std::string& dependency_file, const std::vector<std::string>& excluded) {
  ProcessSpec spec;
  spec.argv = {nvcc};
  spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
  std::string extension = fs::path(source).extension().string();
  if (extension != ".cu" && extension != ".cpp" && extension != ".cc" && extension != ".c") {
    spec.argv.push_back("-x");
    spec.argv.push_back("cu");
  }
  spec.argv.insert(spec.argv.end(), dependency_arguments.begin(), dependency_arguments.end());
  spec.argv.push_back(source);
  spec.working_directory = directory;
  spec.timeout = absl::Minutes(5);
  ASSIGN_OR_RETURN(ProcessResult result, RunProcess(spec));
  if (result.exit_code != 0) {
    return absl::InvalidArgumentError(absl::StrCat("nvcc could not scan the includes of ", source,
                                                   " (", DescribeTermination(result), "):\n",
                                                   result.stderr_text));
  }
  std::string rule = result.stdout_text;
  if (!dependency_file.empty()) {
    ASSIGN_OR_RETURN(rule, ReadFile(AbsolutePath(dependency_file, directory)));
  }
  // Only the first rule: -MP adds an empty rule per header after it.
  for (size_t i = 0; i < rule.size(); ++i) {
    if (rule[i] == '\n' && (i == 0 || rule[i - 1] != '\\')) {
      rule.resize(i + 1);
      break;
    }
  }
  std::vector<std::string> files;
  for (const std::string& file : ParseMakeDependencies(rule)) {
    std::string absolute = AbsolutePath(file, directory);
    bool system = false;
    for (const std::string& prefix : excluded) {
      if (absl::StartsWith(absolute, prefix)) system = true;
    }
    if (!system) files.push_back(absolute);
  }
  return files;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ScanInputClosure(
    const std::string& nvcc, const std::string& directory, const std::vector<std::string>& flags,
    const std::string& source, const std::vector<std::string>& excluded) {
  return RunScan(nvcc, directory, flags, source, {"-M"}, "", excluded);
}

absl::StatusOr<std::vector<std::string>> ScanWritingDependencyFile(
    const std::string& nvcc, const std::string& directory, const std::vector<std::string>& flags,
    const std::string& source, const std::vector<std::string>& dependency_arguments,
    const std::string& dependency_file, const std::vector<std::string>& excluded) {
  return RunScan(nvcc, directory, flags, source, dependency_arguments, dependency_file, excluded);
}

}  // namespace distcc_cuda::client
