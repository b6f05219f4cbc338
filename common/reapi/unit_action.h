// SPDX-License-Identifier: Apache-2.0
// A distcc-cuda compile unit as a REAPI Action, for a client that submits
// its units to another engine (`distcc-cuda build --remote-executor`): the
// unit's files as the engine's input root, its compiler and arguments as the
// Command, and the platform the engine schedules it by (the toolchain, and
// the memory the unit is expected to need in the property the engine reads,
// --remote-memory-property). The reverse of action_unit.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/reapi/reapi_digest.h"
#include "common/store/blob_client.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda {

// The platform property an engine reads an action's memory from, and the
// unit its value is counted in (--remote-memory-property NAME[:UNIT]).
struct MemoryProperty {
  std::string name = "memory";
  int64_t unit_bytes = 1;
};

// "NAME" or "NAME:UNIT", UNIT one of B, KiB, MiB, GiB (KB, MB, GB: powers of
// 1000). INVALID_ARGUMENT saying what is wrong; an empty NAME turns the
// property off.
absl::StatusOr<MemoryProperty> ParseMemoryProperty(const std::string& text);

// `bytes` as the property's value: a whole number of its unit, rounded up
// to the next of 1, 2, 3, 4, 6, 8, 12, ... (2^k or 1.5 x 2^k). The value is
// part of the Action, and so of the key of the engine's ActionCache: coarse
// steps keep a unit's Action the same while its prediction moves a little,
// at the price of reserving up to half as much again.
std::string MemoryPropertyValue(const MemoryProperty& property, int64_t bytes);

// The values MemoryPropertyValue gives for `lowest` to `highest` bytes,
// each once, the smallest first; at most `most` of them.
std::vector<std::string> MemoryPropertyValues(const MemoryProperty& property, int64_t lowest,
                                              int64_t highest, size_t most);

// What goes into every Action besides the unit.
struct ActionSettings {
  // argv[0]: the compiler the unit names, as the engine's workers find it.
  std::string compiler;
  // Platform properties, sorted by the engine's rules here.
  std::vector<std::pair<std::string, std::string>> platform;
  absl::Duration timeout = absl::ZeroDuration();  // zero: the engine's own
};

// An Action and everything the engine must hold to run it.
struct UnitAction {
  reapi::Digest action_digest;
  reapi::Action action;
  reapi::Command command;
  // The Action, its Command and its folders (bytes), and its files (read
  // from the local store at the paths `path_of` gave, or the bytes a
  // generated source carries).
  std::vector<BlobSource> blobs;
};

// The Action of `unit`, whose inputs are listed one file each (its tree
// expanded: ExpandUnitInputs). `path_of` says where the local store keeps a
// file's bytes. INVALID_ARGUMENT for a path that is not relative and clean,
// or a name that is a file in one input and a folder in another.
absl::StatusOr<UnitAction> ActionOfUnit(const v1::CompileUnit& unit, const ActionSettings& settings,
                                        const std::function<std::string(const Digest&)>& path_of);

// The digest `action`'s Action would have with its platform property
// `name` at `value` instead (in its Command and in the Action): the same
// compile scheduled otherwise. `action`'s own digest where it has no such
// property.
reapi::Digest ActionDigestWithProperty(const UnitAction& action, const std::string& name,
                                       const std::string& value);

}  // namespace distcc_cuda
