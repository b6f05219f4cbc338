// SPDX-License-Identifier: Apache-2.0
#include "common/reapi/action_unit.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/byte_size.h"
#include "common/base/status.h"

namespace distcc_cuda {
namespace {

// The unit's name: its output's file name, in the letters a unit name has.
std::string UnitNameOf(const std::string& output) {
  std::string name = output.substr(output.rfind('/') + 1);
  for (char& c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && !absl::StrContains("_.+@=-", c)) {
      c = '_';
    }
  }
  if (name.empty() || name[0] == '.') name = "action" + name;
  return name.substr(0, 200);
}

absl::StatusOr<v1::UnitCompiler> CompilerOf(const std::string& argv0) {
  const std::string program = argv0.substr(argv0.rfind('/') + 1);
  if (program == "nvcc") return v1::UNIT_COMPILER_NVCC;
  if (program == "g++" || program == "c++") return v1::UNIT_COMPILER_HOST_CXX;
  return absl::InvalidArgumentError(absl::StrCat(
      "the action runs '", absl::CHexEscape(argv0.substr(0, 200)),
      "': distcc-cuda runs only nvcc and the host C++ compiler (g++, c++) of its workers' "
      "toolchain; run other actions on another executor (Bazel: --strategy=MNEMONIC=local)"));
}

}  // namespace

std::optional<std::string> PlatformProperty(const reapi::Platform& platform,
                                            absl::string_view name) {
  for (const reapi::Platform::Property& property : platform.properties()) {
    if (property.name() == name) return property.value();
  }
  return std::nullopt;
}

absl::StatusOr<std::optional<int64_t>> MemoryHint(const reapi::Platform& platform) {
  for (const char* name : kMemoryProperties) {
    std::optional<std::string> value = PlatformProperty(platform, name);
    if (!value.has_value()) continue;
    absl::StatusOr<int64_t> bytes = ParseByteSize(*value);
    if (!bytes.ok() || *bytes <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("the platform property '", name, "' is '",
                                                     absl::CHexEscape(value->substr(0, 80)),
                                                     "', not a memory size such as 6GiB or 512M"));
    }
    return *bytes;
  }
  return std::nullopt;
}

bool ToolchainMatches(const v1::ToolchainFingerprint& toolchain, absl::string_view asked) {
  bool by_digest = asked.size() >= 12 && absl::StartsWith(toolchain.digest(), asked);
  return by_digest || asked == toolchain.nvcc_release();
}

absl::StatusOr<v1::CompileUnit> UnitOfCommand(const reapi::Command& command,
                                              const Digest& input_root) {
  if (command.arguments_size() == 0) {
    return absl::InvalidArgumentError("the action's command has no arguments");
  }
  ASSIGN_OR_RETURN(v1::UnitCompiler compiler, CompilerOf(command.arguments(0)));
  if (command.output_directories_size() > 0) {
    return absl::InvalidArgumentError(
        "the action declares output directories; a compile's one output is its -o file");
  }
  const auto& outputs =
      command.output_paths_size() > 0 ? command.output_paths() : command.output_files();
  if (outputs.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the action declares ", outputs.size(),
                     " outputs; a compile that distcc-cuda runs has exactly one, its -o file"));
  }
  v1::CompileUnit unit;
  unit.set_name(UnitNameOf(outputs[0]));
  unit.mutable_arguments()->CopyFrom({command.arguments().begin() + 1, command.arguments().end()});
  unit.set_working_directory(command.working_directory());
  unit.add_output_paths(outputs[0]);
  *unit.mutable_input_root() = ToProto(input_root);
  unit.set_compiler(compiler);
  return unit;
}

absl::StatusCode StatusCodeOfOutcome(v1::TaskOutcome outcome) {
  switch (outcome) {
    case v1::TASK_COMPLETED:
    case v1::TASK_KILLED_FOR_MEMORY:
      return absl::StatusCode::kOk;
    case v1::TASK_REJECTED:
      return absl::StatusCode::kInvalidArgument;
    case v1::TASK_TIMED_OUT:
      return absl::StatusCode::kDeadlineExceeded;
    case v1::TASK_CANCELLED:
      return absl::StatusCode::kCancelled;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::StatusOr<reapi::ActionResult> ActionResultOf(const v1::TaskResult& result,
                                                   const v1::CompileUnit& unit,
                                                   int64_t reserved_bytes,
                                                   const TextStore& store_text) {
  reapi::ActionResult out;
  for (const v1::OutputFile& output : result.outputs()) {
    reapi::OutputFile* file = out.add_output_files();
    file->set_path(output.path());
    *file->mutable_digest() = ToReapi(FromProto(output.digest()));
  }
  std::string stderr_text = result.stderr_text();
  if (result.outcome() == v1::TASK_KILLED_FOR_MEMORY) {
    out.set_exit_code(kKilledExitCode);
    const std::string& why = result.error_message();
    absl::StrAppend(&stderr_text, "distcc-cuda: ", unit.name(), " was ",
                    absl::StartsWith(why, "killed for memory") ? why : "killed for memory: " + why,
                    "\n");
  } else {
    out.set_exit_code(result.exit_code());
  }
  if (!result.stdout_text().empty()) {
    ASSIGN_OR_RETURN(Digest stored, store_text(result.stdout_text()));
    *out.mutable_stdout_digest() = ToReapi(stored);
  }
  if (!stderr_text.empty()) {
    ASSIGN_OR_RETURN(Digest stored, store_text(stderr_text));
    *out.mutable_stderr_digest() = ToReapi(stored);
  }
  out.mutable_execution_metadata()->set_worker(result.worker_name());
  if (result.wall_time_ms() > 0) {
    // When it ran, as its wall time ending now: what a client learns
    // durations from, a cached result's included.
    const absl::Time now = absl::Now();
    auto stamp = [](absl::Time at, google::protobuf::Timestamp* out) {
      const int64_t micros = absl::ToUnixMicros(at);
      out->set_seconds(micros / 1000000);
      out->set_nanos(static_cast<int32_t>(micros % 1000000) * 1000);
    };
    stamp(now - absl::Milliseconds(result.wall_time_ms()),
          out.mutable_execution_metadata()->mutable_execution_start_timestamp());
    stamp(now, out.mutable_execution_metadata()->mutable_execution_completed_timestamp());
  }
  if (result.peak_memory_bytes() > 0) {
    v1::UnitMemoryUsage memory;
    memory.set_peak_bytes(result.peak_memory_bytes());
    memory.set_reserved_bytes(reserved_bytes);
    out.mutable_execution_metadata()->add_auxiliary_metadata()->PackFrom(memory);
  }
  return out;
}

}  // namespace distcc_cuda
