// SPDX-License-Identifier: Apache-2.0
// What this machine offers: cores for default slots, its name for workers.
// (Memory: see memory_cap.h.)
#pragma once

#include <cstdint>
#include <string>

namespace distcc_cuda {

// Cores this process may use.
int UsableCores();

// "hostname" for worker names.
std::string HostName();

}  // namespace distcc_cuda
