// SPDX-License-Identifier: Apache-2.0
// `distcc-cuda build --verify`: icecream's habit of running a build both
// ways. A sample of the build's units is rebuilt on this machine exactly as a
// worker builds them (a TaskTree of the inputs from the coordinator's store,
// this machine's pinned nvcc, the same bubblewrap sandbox at the client's
// own workspace root), and the device code it makes is compared byte for
// byte (the raw .nv_fatbin sections) with what the workers returned. A
// mismatch fails the build, naming the unit and the worker, before the link.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/store/cas_client.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::client {

// --verify: "all", or how many units ("3"); "" or "0": none. Returns -1 for
// all. INVALID_ARGUMENT otherwise.
absl::StatusOr<int> ParseVerifySample(const std::string& text);

// Which of `total` units a sample of `count` (-1: all) rebuilds: spread
// evenly over the build, the first and the last among them.
std::vector<size_t> PickVerifySample(size_t total, int count);

// One unit to rebuild: as the worker compiled it (a part of a split unit
// too), and the object it returned, already on this machine.
struct UnitToVerify {
  v1::CompileUnit unit;
  std::string worker;           // who compiled it, for the message
  std::string returned_object;  // path of the worker's object here
};

// Rebuilds each of `units` under `work_dir` (task folders and a store of
// their inputs, fetched through `cas`) with `nvcc`, and compares. Prints one
// line per unit. INVALID_ARGUMENT, before anything runs, for a unit the
// argument model refuses (the units come from the coordinator); DATA_LOSS naming the unit, the
// worker and the images that differ for a mismatch; FAILED_PRECONDITION when this machine cannot
// sandbox compiles (bubblewrap is needed); the compile's own messages when
// the local rebuild fails.
absl::Status VerifyUnits(const std::vector<UnitToVerify>& units, CasClient& cas,
                         const std::string& nvcc, const std::string& work_dir, std::ostream& out);

}  // namespace distcc_cuda::client
