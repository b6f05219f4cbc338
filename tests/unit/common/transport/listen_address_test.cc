// SPDX-License-Identifier: Apache-2.0
#include "common/transport/listen_address.h"

#include <gtest/gtest.h>

#include <utility>

namespace distcc_cuda {
namespace {

TEST(IsLoopbackAddressTest, OnlyAddressesThisMachineAloneCanReach) {
  const std::pair<const char*, bool> cases[] = {
      {"127.0.0.1:3633", true},       {"127.1.2.3:0", true},
      {"localhost:3633", true},       {"[::1]:3633", true},
      {"[::ffff:127.0.0.1]:1", true}, {"0.0.0.0:3633", false},
      {"[::]:3633", false},           {":3633", false},
      {"10.0.0.5:3633", false},       {"128.0.0.1:3633", false},
      {"coordinator:3633", false},    {"[::1:3633", false},
      {"localhost.evil.com:1", false}};
  for (const auto& [address, loopback] : cases) {
    EXPECT_EQ(IsLoopbackAddress(address), loopback) << address;
  }
}

}  // namespace
}  // namespace distcc_cuda
