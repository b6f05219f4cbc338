// SPDX-License-Identifier: Apache-2.0
#include "client/scan/dependency_scan.h"

#include <filesystem>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/scan/pragma_once_twins.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/host_compiler_args.h"
#include "common/nvcc/toolchain.h"
#include "common/process/subprocess.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;

std::vector<std::string> ToolkitRoots(const std::string& nvcc) {
  // The toolkit as named (/usr/local/cuda) and as it is on disk
  // (/usr/local/cuda-13.0). A wrapper script's own folder is not a toolkit:
  // only the toolkit it runs is left out.
  fs::path root = fs::path(ToolkitNvccOf(nvcc)).parent_path().parent_path();
  std::vector<std::string> roots = {root.string() + "/"};
  std::error_code error;
  fs::path real = fs::canonical(root, error);
  if (!error && real != root) roots.push_back(real.string() + "/");
  return roots;
}

std::vector<std::string> ExcludedPrefixes(const std::string& nvcc) {
  std::vector<std::string> prefixes = {"/usr/include/", "/usr/lib/", "/usr/local/include/",
                                       "/usr/lib64/"};
  for (std::string& root : ToolkitRoots(nvcc)) prefixes.push_back(std::move(root));
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

// The files of a make rule's first target: -MP adds an empty rule per
// header after it.
std::vector<std::string> FirstRuleFiles(std::string rule) {
  for (size_t i = 0; i < rule.size(); ++i) {
    if (rule[i] == '\n' && (i == 0 || rule[i - 1] != '\\')) {
      rule.resize(i + 1);
      break;
    }
  }
  return ParseMakeDependencies(rule);
}

// Whether the host compiler may be GCC: nvcc's default is, and any
// -ccbin, or NVCC_CCBIN or NVCC_*_FLAGS in `variables` (the environment's),
// naming clang is not (clang refuses -fdirectives-only). Anything else is
// tried and, if refused, scanned again without it.
bool HostCompilerMayBeGcc(const std::vector<std::string>& flags,
                          const EnvironmentVariables& variables) {
  for (const auto& [name, value] : variables) {
    bool names_compiler =
        name == "NVCC_CCBIN" || name == "NVCC_PREPEND_FLAGS" || name == "NVCC_APPEND_FLAGS";
    if (names_compiler && absl::StrContains(value, "clang")) return false;
  }
  for (size_t i = 0; i < flags.size(); ++i) {
    const std::string& flag = flags[i];
    bool names_compiler =
        absl::StartsWith(flag, "-ccbin") || absl::StartsWith(flag, "--compiler-bindir");
    if (!names_compiler) continue;
    const std::string& value =
        absl::StrContains(flag, '=') || i + 1 == flags.size() ? flag : flags[i + 1];
    if (absl::StrContains(fs::path(value).filename().string(), "clang")) return false;
  }
  return true;
}

// Runs nvcc's dependency pass; the answer's files are the first rule's
// (from stdout, or from the -MF file the arguments name).
//
// With GCC as the host compiler the pass runs with -fdirectives-only: GCC
// then handles every directive (#define, #if, #include, __has_include,
// #pragma once) as before but does not expand macros in the text, which is
// all a dependency list needs and most of what the pass cost (a CUTLASS
// sm100 kernel: 3.5 s of CPU, 0.5 s with it; the same 1,163 files, byte
// for byte). A compiler that refuses the option gets the plain pass; so
// does a failure, whose message is then nvcc's own for the user's flags.
absl::StatusOr<ScanAnswer> RunScan(const ScanQuestion& question, const std::string& dependency_file,
                                   const EnvironmentVariables& nvcc_variables) {
  ProcessSpec spec;
  spec.argv = {question.nvcc};
  spec.argv.insert(spec.argv.end(), question.flags.begin(), question.flags.end());
  // The host compiler scans its own .cpp units; nvcc scans headers as CUDA.
  const bool host = LooksLikeHostCompiler(question.nvcc);
  std::string extension = fs::path(question.source).extension().string();
  if (!host && extension != ".cu" && extension != ".cpp" && extension != ".cc" &&
      extension != ".c") {
    spec.argv.push_back("-x");
    spec.argv.push_back("cu");
  }
  spec.argv.insert(spec.argv.end(), question.dependency_arguments.begin(),
                   question.dependency_arguments.end());
  spec.argv.push_back(question.source);
  spec.working_directory = question.directory;
  spec.timeout = absl::Minutes(5);
  std::optional<ProcessResult> fast;
  if (host || HostCompilerMayBeGcc(question.flags, nvcc_variables)) {
    ProcessSpec directives_only = spec;
    if (host) {
      directives_only.argv.insert(directives_only.argv.begin() + 1, "-fdirectives-only");
    } else {
      directives_only.argv.insert(directives_only.argv.begin() + 1,
                                  {"-Xcompiler", "-fdirectives-only"});
    }
    ASSIGN_OR_RETURN(fast, RunProcess(directives_only));
  }
  ProcessResult result;
  if (fast.has_value() && fast->exit_code == 0) {
    result = std::move(*fast);
  } else {
    ASSIGN_OR_RETURN(result, RunProcess(spec));
  }
  if (result.exit_code != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        fs::path(question.nvcc).filename().string(), " could not scan the includes of ",
        question.source, " (", DescribeTermination(result), "):\n", result.stderr_text));
  }
  ScanAnswer answer;
  if (dependency_file.empty()) {
    answer.files = FirstRuleFiles(result.stdout_text);
  } else {
    ASSIGN_OR_RETURN(answer.dependency_text,
                     ReadFile(AbsolutePath(dependency_file, question.directory)));
    answer.files = FirstRuleFiles(answer.dependency_text);
  }
  return answer;
}

// The `files` (relative to `directory` or absolute) under none of the
// `excluded` prefixes, absolute.
std::vector<std::string> OutsideOf(const std::vector<std::string>& excluded,
                                   const std::string& directory,
                                   const std::vector<std::string>& files) {
  std::vector<std::string> outside;
  for (const std::string& file : files) {
    std::string absolute = AbsolutePath(file, directory);
    bool system = false;
    for (const std::string& prefix : excluded) {
      if (absl::StartsWith(absolute, prefix)) system = true;
    }
    if (!system) outside.push_back(std::move(absolute));
  }
  return outside;
}

// The answer from `cache` when it holds it (writing the dependency file as
// nvcc would have), else from nvcc, remembered in `cache`; then the files
// outside `excluded`, absolute, with the #pragma once twins GCC left out
// (pragma_once_twins.h).
absl::StatusOr<std::vector<std::string>> Scan(const ScanQuestion& question,
                                              const std::string& dependency_file,
                                              const std::vector<std::string>& excluded,
                                              ScanCache* cache) {
  std::optional<ScanAnswer> answer = cache ? cache->Find(question) : std::nullopt;
  if (answer.has_value() && !dependency_file.empty()) {
    RETURN_IF_ERROR(WriteFileAtomically(AbsolutePath(dependency_file, question.directory),
                                        answer->dependency_text));
  }
  if (!answer.has_value()) {
    const absl::Time began = absl::Now();
    ASSIGN_OR_RETURN(answer, RunScan(question, dependency_file,
                                     cache ? cache->nvcc_variables() : EnvironmentVariables()));
    // The twins join the answer the cache keeps: a cached scan needs them too.
    for (std::string& twin :
         PragmaOnceTwins(OutsideOf(excluded, question.directory, answer->files),
                         IncludeFoldersOf(question.flags, question.directory))) {
      answer->files.push_back(std::move(twin));
    }
    if (cache) cache->Remember(question, *answer, began);
  }
  return OutsideOf(excluded, question.directory, answer->files);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ScanInputClosure(
    const std::string& nvcc, const std::string& directory, const std::vector<std::string>& flags,
    const std::string& source, const std::vector<std::string>& excluded, ScanCache* cache,
    const std::string& workspace) {
  return Scan({nvcc, directory, flags, source, {"-M"}, workspace}, "", excluded, cache);
}

absl::StatusOr<std::vector<std::string>> ScanWritingDependencyFile(
    const std::string& nvcc, const std::string& directory, const std::vector<std::string>& flags,
    const std::string& source, const std::vector<std::string>& dependency_arguments,
    const std::string& dependency_file, const std::vector<std::string>& excluded, ScanCache* cache,
    const std::string& workspace) {
  return Scan({nvcc, directory, flags, source, dependency_arguments, workspace}, dependency_file,
              excluded, cache);
}

}  // namespace distcc_cuda::client
