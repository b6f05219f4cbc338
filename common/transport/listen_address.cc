// SPDX-License-Identifier: Apache-2.0
#include "common/transport/listen_address.h"

#include <arpa/inet.h>

#include <algorithm>
#include <string>

namespace distcc_cuda {

bool IsLoopbackAddress(absl::string_view listen_address) {
  std::string host;
  if (!listen_address.empty() && listen_address.front() == '[') {
    size_t end = listen_address.find(']');
    if (end == absl::string_view::npos) return false;
    host = std::string(listen_address.substr(1, end - 1));
  } else {
    size_t colon = listen_address.rfind(':');
    host = std::string(listen_address.substr(0, colon));
  }
  if (host == "localhost") return true;
  unsigned char address[16];
  if (inet_pton(AF_INET, host.c_str(), address) == 1) return address[0] == 127;
  if (inet_pton(AF_INET6, host.c_str(), address) == 1) {
    static constexpr unsigned char kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static constexpr unsigned char kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::equal(address, address + 16, kLoopback)) return true;
    return std::equal(address, address + 12, kMappedPrefix) && address[12] == 127;
  }
  return false;
}

}  // namespace distcc_cuda
