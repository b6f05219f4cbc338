// SPDX-License-Identifier: Apache-2.0
#include "client/toolkit/framework_check.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/process/subprocess.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

// Finds torch's folder; prints "" when there is none. find_spec on a top
// package runs nothing of it.
constexpr char kFindTorch[] =
    "import importlib.util as u\n"
    "s = u.find_spec('torch')\n"
    "print(list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else '')\n";

bool NameStartsWith(const std::string& program, absl::string_view prefix) {
  return absl::StartsWith(fs::path(program).filename().string(), prefix);
}

// pip, pip3, pip3.11 (not pipx or pipenv).
bool IsPip(const std::string& program) {
  static const std::regex kPip("pip([0-9]+(\\.[0-9]+)?)?");
  return std::regex_match(fs::path(program).filename().string(), kPip);
}

bool Has(const std::vector<std::string>& command, absl::string_view word) {
  return std::find(command.begin(), command.end(), word) != command.end();
}

// `program` as the command would run it: itself with a slash, else from PATH.
std::string Resolved(const std::string& program, const PythonLookup& environment,
                     const std::string& working_directory) {
  absl::StatusOr<std::string> found =
      ResolveProgram(program, {{"PATH", environment.path}}, working_directory);
  return found.ok() ? AbsolutePath(*found, working_directory) : "";
}

// The interpreter a script's #! line names: "#!/path/python", "#!/usr/bin/env
// python3", or pip's long-path form ("#!/bin/sh" then "'''exec' "/path/python" ...").
std::string InterpreterOf(const std::string& script, const PythonLookup& environment,
                          const std::string& working_directory) {
  absl::StatusOr<std::string> text = ReadFile(script);
  if (!text.ok() || !absl::StartsWith(*text, "#!")) return "";
  std::vector<std::string> lines = absl::StrSplit(text->substr(0, 4096), '\n');
  std::vector<std::string> words =
      absl::StrSplit(absl::StripAsciiWhitespace(lines[0].substr(2)), ' ', absl::SkipEmpty());
  if (words.empty()) return "";
  if (words[0] == "/bin/sh" && lines.size() > 1) {
    static const std::regex kExec("^'''exec' \"([^\"]+)\"");
    std::smatch match;
    if (std::regex_search(lines[1], match, kExec)) return match[1];
    return "";
  }
  if (fs::path(words[0]).filename() == "env" && words.size() > 1) {
    return Resolved(words[1], environment, working_directory);
  }
  return words[0];
}

// uv's Python: --python X, else the active environment, else ./.venv.
std::string PythonOfUv(const std::vector<std::string>& command, const PythonLookup& environment,
                       const std::string& working_directory) {
  for (size_t i = 1; i < command.size(); ++i) {
    if ((command[i] == "--python" || command[i] == "-p") && i + 1 < command.size()) {
      const std::string& named = command[i + 1];
      return named.find('/') != std::string::npos ? AbsolutePath(named, working_directory)
                                                  : Resolved(named, environment, working_directory);
    }
    if (absl::StartsWith(command[i], "--python=")) {
      return AbsolutePath(command[i].substr(9), working_directory);
    }
  }
  if (!environment.virtual_env.empty()) return environment.virtual_env + "/bin/python";
  const std::string local = working_directory + "/.venv/bin/python";
  if (IsExecutableFile(local)) return local;
  return Resolved("python3", environment, working_directory);
}

}  // namespace

std::optional<FrameworkBuild> ParseTorchVersionFile(absl::string_view text,
                                                    const std::string& folder) {
  const std::string content(text);
  static const std::regex kVersion("^__version__\\s*(?::[^=\\n]*)?=\\s*['\"]([^'\"]+)['\"]",
                                   std::regex::multiline);
  static const std::regex kCuda("^cuda\\s*(?::[^=\\n]*)?=\\s*['\"]([0-9.]*)['\"]",
                                std::regex::multiline);
  std::smatch match;
  if (!std::regex_search(content, match, kVersion)) return std::nullopt;
  FrameworkBuild torch{match[1], "", folder};
  if (std::regex_search(content, match, kCuda)) torch.cuda = match[1];
  return torch;
}

std::optional<FrameworkBuild> TorchIn(const std::string& folder) {
  absl::StatusOr<std::string> text = ReadFile(folder + "/version.py");
  if (!text.ok()) return std::nullopt;
  return ParseTorchVersionFile(*text, folder);
}

absl::StatusOr<std::optional<FrameworkBuild>> TorchOf(const std::string& python,
                                                      const std::string& working_directory) {
  ProcessSpec find;
  find.argv = {python, "-c", kFindTorch};
  find.working_directory = working_directory;
  find.timeout = absl::Seconds(60);
  ASSIGN_OR_RETURN(ProcessResult result, RunProcess(find));
  if (result.exit_code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(python, " could not look for torch (", DescribeTermination(result),
                     "): ", absl::StripAsciiWhitespace(result.stderr_text.substr(0, 400))));
  }
  const std::string folder(absl::StripAsciiWhitespace(result.stdout_text));
  if (folder.empty()) return std::nullopt;
  return TorchIn(folder);
}

std::string PythonOfCommand(const std::vector<std::string>& command,
                            const PythonLookup& environment, const std::string& working_directory) {
  if (command.empty()) return "";
  const std::string& program = command[0];
  if (NameStartsWith(program, "python")) return Resolved(program, environment, working_directory);
  if (IsPip(program)) {
    const std::string pip = Resolved(program, environment, working_directory);
    return pip.empty() ? "" : InterpreterOf(pip, environment, working_directory);
  }
  if (fs::path(program).filename() == "uv") {
    return PythonOfUv(command, environment, working_directory);
  }
  return "";
}

bool BuildsInIsolation(const std::vector<std::string>& command) {
  if (command.empty()) return false;
  const std::string& program = command[0];
  const bool python_module =
      NameStartsWith(program, "python") && command.size() > 2 && command[1] == "-m";
  if (IsPip(program) || fs::path(program).filename() == "uv" ||
      (python_module && command[2] == "pip")) {
    const bool installs = Has(command, "install") || Has(command, "wheel");
    return installs && !Has(command, "--no-build-isolation");
  }
  if (python_module && command[2] == "build") {
    return !Has(command, "--no-isolation") && !Has(command, "-n");
  }
  return false;
}

CMakeCacheFacts ParseCMakeCache(absl::string_view text, const std::string& folder) {
  CMakeCacheFacts facts;
  facts.folder = folder;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    // NAME:TYPE=VALUE
    const size_t colon = line.find(':');
    const size_t equals = line.find('=');
    if (colon == absl::string_view::npos || equals == absl::string_view::npos || equals < colon) {
      continue;
    }
    const absl::string_view name = line.substr(0, colon);
    const std::string value(absl::StripAsciiWhitespace(line.substr(equals + 1)));
    if (name == "CMAKE_CUDA_COMPILER") facts.cuda_compiler = value;
    if (name == "Torch_DIR" && !absl::EndsWith(value, "-NOTFOUND")) facts.torch_dir = value;
  }
  return facts;
}

std::optional<CMakeCacheFacts> CMakeCacheOf(const std::vector<std::string>& command,
                                            const std::string& working_directory) {
  if (command.empty()) return std::nullopt;
  const std::string program = fs::path(command[0]).filename().string();
  std::string folder;
  if (program == "cmake") {
    for (size_t i = 1; i + 1 < command.size() && folder.empty(); ++i) {
      if (command[i] == "--build") folder = command[i + 1];
    }
  } else if (program == "ninja" || program == "make") {
    folder = working_directory;
    for (size_t i = 1; i + 1 < command.size(); ++i) {
      if (command[i] == "-C") folder = command[i + 1];
    }
  }
  if (folder.empty()) return std::nullopt;
  folder = AbsolutePath(folder, working_directory);
  absl::StatusOr<std::string> text = ReadFile(folder + "/CMakeCache.txt");
  if (!text.ok()) return std::nullopt;
  return ParseCMakeCache(*text, folder);
}

}  // namespace distcc_cuda::client
