// SPDX-License-Identifier: Apache-2.0
// The texts a client sends that the coordinator shows to people: the build's
// name, its toolchain's description, its instantiation sets' names, unit name
// templates, manifest locations, axes and values. They reach the log, the
// cluster status, the dashboard, metrics and other clients' screens, so a
// request that carries a control character, an escape sequence, a byte that
// is not UTF-8 or a bidirectional override in one of them is refused where it
// enters, before anything is planned or logged. (Unit names are refused by
// ValidateUnitName; paths and arguments, which may hold any byte a file system
// does, are cleaned where they are written: the log's formatter, the client's
// MakePrintable.)
#pragma once

#include "absl/status/status.h"
#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::coordinator {

// Bounds on those texts, in bytes.
inline constexpr size_t kMaxBuildNameBytes = 256;
inline constexpr size_t kMaxSetNameBytes = 200;
inline constexpr size_t kMaxDescriptionBytes = 4096;

// OK, or INVALID_ARGUMENT naming the field, what is wrong with it (shown
// cleaned) and what to send instead.
absl::Status CheckClientText(const v1::SubmitBuildRequest& request);

}  // namespace distcc_cuda::coordinator
