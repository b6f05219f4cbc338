// SPDX-License-Identifier: Apache-2.0
#include "common/base/host_resources.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

namespace distcc_cuda {

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
