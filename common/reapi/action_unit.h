// SPDX-License-Identifier: Apache-2.0
// A REAPI Action's Command as a distcc-cuda compile unit, and a unit's
// result as the Action's ActionResult: what the coordinator's REAPI service
// and a worker that is another engine's bot both do with an Action, without
// the RPCs. The argument model itself is checked where the unit is planned
// or run, as for every other unit.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/reapi/reapi_digest.h"
#include "distcc_cuda/v1/build.pb.h"
#include "distcc_cuda/v1/worker.pb.h"

namespace distcc_cuda {

// The platform property that names the toolchain an Action needs: the
// first 12 or more hex digits of a fingerprint digest, or an nvcc release
// ("13.0"). Needed only when the workers have several toolchains.
inline constexpr char kToolchainProperty[] = "toolchain";

// The platform properties whose value is the memory an action is expected
// to take at its peak ("6GiB", "512M", "4096": common/base/byte_size.h):
// "memory", and "EstimatedMemory", the name BuildBuddy sizes tasks by.
inline constexpr const char* kMemoryProperties[] = {"memory", "EstimatedMemory"};

// What a memory kill looks like to a REAPI client: a SIGKILL's exit code.
inline constexpr int kKilledExitCode = 128 + 9;

// The memory figure `platform` gives (kMemoryProperties), nullopt if none;
// INVALID_ARGUMENT naming the property whose value is not a size.
absl::StatusOr<std::optional<int64_t>> MemoryHint(const reapi::Platform& platform);

// The value of `platform`'s property `name`, nullopt if it has none.
std::optional<std::string> PlatformProperty(const reapi::Platform& platform,
                                            absl::string_view name);

// Whether `toolchain` is the one a platform property `toolchain` names
// (kToolchainProperty: a digest prefix of 12+ hex digits or the release).
bool ToolchainMatches(const v1::ToolchainFingerprint& toolchain, absl::string_view asked);

// The unit that `command` runs on the tree `input_root` (the store's own):
// argv[0] must be nvcc or the host C++ compiler (g++, c++), and the one
// output its -o file. INVALID_ARGUMENT naming what is refused.
absl::StatusOr<v1::CompileUnit> UnitOfCommand(const reapi::Command& command,
                                              const Digest& input_root);

// The status a REAPI client gets for a unit that ended with `outcome`: OK
// for a compile that ran (completed, or killed for memory: exit 137 in its
// ActionResult); INVALID_ARGUMENT (refused), DEADLINE_EXCEEDED, CANCELLED,
// and INTERNAL (it could not run) for one that did not.
absl::StatusCode StatusCodeOfOutcome(v1::TaskOutcome outcome);

// Keeps a text (stdout, stderr) where the ActionResult's reader finds it,
// and returns its digest.
using TextStore = std::function<absl::StatusOr<Digest>(const std::string& text)>;

// The ActionResult of a unit's result: its outputs, exit code (137 for a
// unit the memory cap killed, with why on stderr), stdout and stderr kept
// with `store_text`, and its peak memory and `reserved_bytes` as a
// UnitMemoryUsage in the auxiliary metadata.
absl::StatusOr<reapi::ActionResult> ActionResultOf(const v1::TaskResult& result,
                                                   const v1::CompileUnit& unit,
                                                   int64_t reserved_bytes,
                                                   const TextStore& store_text);

}  // namespace distcc_cuda
