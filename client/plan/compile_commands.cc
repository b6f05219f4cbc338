// SPDX-License-Identifier: Apache-2.0
#include "client/plan/compile_commands.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/nvcc_args.h"
#include "nlohmann/json.hpp"

namespace distcc_cuda::client {

absl::StatusOr<std::vector<std::string>> SplitCommandLine(const std::string& command) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < command.size(); ++i) {
    char c = command[i];
    if (quote == '\'') {
      if (c == '\'')
        quote = 0;
      else
        word += c;
    } else if (quote == '"') {
      if (c == '"') {
        quote = 0;
      } else if (c == '\\' && i + 1 < command.size() &&
                 std::string("\"\\$`").find(command[i + 1]) != std::string::npos) {
        word += command[++i];
      } else {
        word += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\' && i + 1 < command.size()) {
      word += command[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unterminated ", std::string(1, quote), " quote in: ", command));
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

absl::StatusOr<std::vector<CompileCommand>> LoadCompileCommands(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseCompileCommands(text, path);
}

absl::StatusOr<std::vector<CompileCommand>> ParseCompileCommands(const std::string& text,
                                                                 const std::string& path) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not valid JSON (expected a compile_commands.json array)"));
  }
  if (!json.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected a JSON array of entries"));
  }
  std::vector<CompileCommand> commands;
  for (size_t i = 0; i < json.size(); ++i) {
    const nlohmann::json& entry = json[i];
    auto where = absl::StrCat(path, ": entry ", i);
    if (!entry.is_object() || !entry.contains("directory") || !entry["directory"].is_string() ||
        !entry.contains("file") || !entry["file"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " needs string fields \"directory\" and \"file\""));
    }
    CompileCommand command;
    command.directory = AbsolutePath(entry["directory"].get<std::string>());
    command.file = AbsolutePath(entry["file"].get<std::string>(), command.directory);
    if (entry.contains("arguments") && entry["arguments"].is_array()) {
      for (const auto& argument : entry["arguments"]) {
        if (!argument.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": \"arguments\" must hold only strings"));
        }
        command.arguments.push_back(argument.get<std::string>());
      }
    } else if (entry.contains("command") && entry["command"].is_string()) {
      absl::StatusOr<std::vector<std::string>> words =
          SplitCommandLine(entry["command"].get<std::string>());
      if (!words.ok()) return Annotate(words.status(), where);
      command.arguments = std::move(*words);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " has neither \"arguments\" nor \"command\""));
    }
    if (command.arguments.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has an empty command"));
    }
    // A launcher in front of nvcc (ccache, sccache) is dropped: the worker
    // runs its own pinned nvcc.
    auto basename = [](const std::string& path) {
      return std::filesystem::path(path).filename().string();
    };
    if (command.arguments.size() > 1 && (basename(command.arguments[0]) == "ccache" ||
                                         basename(command.arguments[0]) == "sccache")) {
      command.arguments.erase(command.arguments.begin());
    }
    if (!absl::StrContains(basename(command.arguments[0]), "nvcc")) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " (", command.file, ") is compiled with '", command.arguments[0],
                       "', not nvcc; distcc-cuda distributes nvcc units only: build a "
                       "compile_commands.json of the CUDA target alone"));
    }
    absl::StatusOr<NvccCommand> parsed =
        ParseNvccCommand({command.arguments.begin() + 1, command.arguments.end()});
    if (!parsed.ok()) return Annotate(parsed.status(), where);
    if (!parsed->compile_only || parsed->sources.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is not a compile of one source (-c FILE -o OBJECT)"));
    }
    command.output =
        parsed->output.empty()
            ? AbsolutePath(
                  std::filesystem::path(command.file).filename().replace_extension(".o").string(),
                  command.directory)
            : AbsolutePath(parsed->output, command.directory);
    commands.push_back(std::move(command));
  }
  if (commands.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no entries"));
  }
  return commands;
}

}  // namespace distcc_cuda::client
