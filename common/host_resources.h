// SPDX-License-Identifier: Apache-2.0
// What this machine offers: memory and cores, for default caps and slots.
#pragma once

#include <cstdint>
#include <string>

namespace distcc_cuda {

// MemAvailable from /proc/meminfo (or `meminfo_path`), in bytes; 0 if unknown.
int64_t AvailableMemoryBytes(const std::string& meminfo_path = "/proc/meminfo");

// The default memory cap of a worker: available memory less a headroom of
// 10% (at least 512 MiB) for the rest of the machine.
int64_t DefaultMemoryCapBytes();

// Cores this process may use.
int UsableCores();

// "hostname" for worker names.
std::string HostName();

}  // namespace distcc_cuda
