// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/ids.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace distcc_cuda::coordinator {

std::string NewId(char kind, int64_t epoch_seconds) {
  unsigned char random[16];
  size_t got = 0;
  while (got < sizeof(random)) {
    ssize_t n = getrandom(random + got, sizeof(random) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    // Without the kernel's generator an id could be guessed: stop, loudly.
    if (n <= 0) std::abort();
    got += static_cast<size_t>(n);
  }
  return absl::StrCat(std::string(1, kind), absl::StrFormat("%x", epoch_seconds), "-",
                      absl::BytesToHexString(absl::string_view(
                          reinterpret_cast<const char*>(random), sizeof(random))));
}

std::optional<int64_t> IdEpoch(absl::string_view id) {
  size_t dash = id.find('-');
  if (id.size() < 2 || dash == absl::string_view::npos || dash < 2 || id.size() - dash - 1 != 32) {
    return std::nullopt;
  }
  uint64_t epoch;
  if (!absl::SimpleHexAtoi(id.substr(1, dash - 1), &epoch)) return std::nullopt;
  return static_cast<int64_t>(epoch);
}

}  // namespace distcc_cuda::coordinator
