// SPDX-License-Identifier: Apache-2.0
// compile_commands.json: ParseCompileCommands, and SplitCommandLine on the
// input as a shell command line.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "client/plan/compile_commands.h"
#include "common/nvcc/nvcc_args.h"
#include "fuzz/fuzz_check.h"

namespace distcc_cuda::fuzz {
namespace {

// Quotes every word in single quotes, the way a shell user would.
std::string QuoteWords(const std::vector<std::string>& words) {
  std::string line;
  for (const std::string& word : words) {
    if (!line.empty()) line += ' ';
    line += "'" + absl::StrReplaceAll(word, {{"'", "'\\''"}}) + "'";
  }
  return line;
}

void CheckSplitCommandLine(const std::string& text) {
  absl::StatusOr<std::vector<std::string>> words = client::SplitCommandLine(text);
  if (!words.ok()) return;
  absl::StatusOr<std::vector<std::string>> again = client::SplitCommandLine(QuoteWords(*words));
  Check(again.ok(), "quoted words do not split again");
  Check(*again == *words, "quoted words split into other words");
}

void CheckCommands(const std::vector<client::CompileCommand>& commands) {
  Check(!commands.empty(), "an empty database was accepted");
  for (const client::CompileCommand& command : commands) {
    Check(absl::StartsWith(command.directory, "/"), "a directory is not absolute");
    Check(absl::StartsWith(command.file, "/"), "a source path is not absolute");
    Check(absl::StartsWith(command.output, "/"), "an output path is not absolute");
    Check(!command.arguments.empty(), "an entry without a compiler was accepted");
    Check(absl::StrContains(command.arguments[0], "nvcc"), "an entry not run by nvcc was accepted");
    absl::StatusOr<NvccCommand> parsed =
        ParseNvccCommand({command.arguments.begin() + 1, command.arguments.end()});
    Check(parsed.ok(), "an entry whose arguments do not parse was accepted");
    Check(parsed->compile_only && parsed->sources.size() == 1,
          "an entry that is not a compile of one source was accepted");
  }
}

void TestOneInput(const std::string& text) {
  absl::StatusOr<std::vector<client::CompileCommand>> commands =
      client::ParseCompileCommands(text, "compile_commands.json");
  if (commands.ok()) CheckCommands(*commands);
  CheckSplitCommandLine(text);
}

}  // namespace
}  // namespace distcc_cuda::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  distcc_cuda::fuzz::TestOneInput(distcc_cuda::fuzz::InputText(data, size));
  return 0;
}
