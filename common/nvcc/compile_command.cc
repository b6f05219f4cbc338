// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/compile_command.h"

namespace distcc_cuda {

std::vector<std::string> NvccArgument::Render() const {
  switch (form) {
    case Form::kPositional:
      return {value};
    case Form::kJoined:
      return {option + value};
    case Form::kEquals:
      return {option + "=" + value};
    case Form::kSeparate:
      return value.empty() && kind == NvccValueKind::kNone
                 ? std::vector<std::string>{option}
                 : std::vector<std::string>{option, value};
  }
  return {};
}

std::vector<std::string> NvccCommand::FlagArguments() const {
  std::vector<std::string> out;
  for (const NvccArgument& flag : flags) {
    for (std::string& piece : flag.Render()) out.push_back(std::move(piece));
  }
  return out;
}

}  // namespace distcc_cuda
