// SPDX-License-Identifier: Apache-2.0
// The ids the coordinator hands out for workers, tasks and builds: a kind
// letter, the coordinator's start epoch and 128 random bits, so that no id
// can be guessed from another and an id of an earlier coordinator is known
// as one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace distcc_cuda::coordinator {

// "<kind><epoch in hex>-<32 hex digits>", e.g. "t6745f1c2-9f0b...". The
// random part comes from the operating system's generator (getrandom).
std::string NewId(char kind, int64_t epoch_seconds);

// The epoch `id` carries, or nullopt for a string that is not such an id.
std::optional<int64_t> IdEpoch(absl::string_view id);

}  // namespace distcc_cuda::coordinator
