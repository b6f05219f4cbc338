// SPDX-License-Identifier: Apache-2.0
#include "common/host_resources.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace distcc_cuda {

int64_t AvailableMemoryBytes(const std::string& meminfo_path) {
  std::ifstream in(meminfo_path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

int64_t DefaultMemoryCapBytes() {
  int64_t available = AvailableMemoryBytes();
  int64_t headroom = std::max<int64_t>(available / 10, int64_t{512} << 20);
  return std::max<int64_t>(available - headroom, int64_t{256} << 20);
}

int UsableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
}

std::string HostName() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace distcc_cuda
