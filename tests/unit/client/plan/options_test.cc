// SPDX-License-Identifier: Apache-2.0
#include "client/plan/options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace distcc_cuda::client {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

TEST(ClientEnvironmentTest, ReadsWhatTheClientFollows) {
  const char* const environ[] = {"PATH=/usr/bin:/bin",
                                 "CUDA_HOME=/opt/cuda-12.8",
                                 "HOME=/home/me",
                                 "TERM=xterm",
                                 "DISTCC_CUDA_COORDINATOR=10.0.0.1:3633",
                                 "DISTCC_CUDA_SESSION=unix:/tmp/s/session",
                                 "DISTCC_CUDA_FALLBACK=local",
                                 "DISTCC_CUDA_VERBOSE=1",
                                 "DISTCC_CUDA_TLS_CA=/c/ca.crt",
                                 "DISTCC_CUDA_TLS_CERT=/c/me.crt",
                                 "DISTCC_CUDA_TLS_KEY=/c/me.key",
                                 "DISTCC_CUDA_SCAN_CACHE=off",
                                 "CPATH=/extra/include",
                                 "NVCC_CCBIN=/usr/bin/clang++",
                                 "UNRELATED=1",
                                 "not an assignment",
                                 nullptr};
  ClientEnvironment environment = ClientEnvironment::Of(environ);
  EXPECT_EQ(environment.path, "/usr/bin:/bin");
  EXPECT_EQ(environment.cuda_home, "/opt/cuda-12.8");
  EXPECT_EQ(environment.term, "xterm");
  EXPECT_EQ(environment.coordinator, "10.0.0.1:3633");
  EXPECT_EQ(environment.session, "unix:/tmp/s/session");
  EXPECT_TRUE(environment.fallback_local);
  EXPECT_TRUE(environment.verbose);
  EXPECT_EQ(environment.launcher_tls.ca, "/c/ca.crt");
  EXPECT_EQ(environment.launcher_tls.cert, "/c/me.crt");
  EXPECT_EQ(environment.launcher_tls.key, "/c/me.key");
  EXPECT_EQ(environment.scan_cache, "off");
  // In kNvccVariables' order, not the environment's.
  EXPECT_THAT(environment.nvcc_variables,
              ElementsAre(Pair("NVCC_CCBIN", "/usr/bin/clang++"), Pair("CPATH", "/extra/include")));
  EXPECT_EQ(DefaultStateDir(environment), "/home/me/.cache/distcc-cuda");
}

TEST(ClientEnvironmentTest, UnsetAndEmptyMeanTheDefaults) {
  const char* const environ[] = {"DISTCC_CUDA_SCAN_CACHE=", "DISTCC_CUDA_FALLBACK=remote",
                                 "DISTCC_CUDA_VERBOSE=yes", "XDG_CACHE_HOME=/xdg",
                                 "HOME=/home/me",           nullptr};
  ClientEnvironment environment = ClientEnvironment::Of(environ);
  EXPECT_FALSE(environment.scan_cache.has_value());
  EXPECT_FALSE(environment.fallback_local);
  EXPECT_FALSE(environment.verbose);
  EXPECT_TRUE(environment.nvcc_variables.empty());
  EXPECT_EQ(DefaultStateDir(environment), "/xdg/distcc-cuda");
  EXPECT_TRUE(ClientEnvironment::Of(nullptr).path.empty());
}

// getenv() sees the first of a name given twice; so does the client.
TEST(ClientEnvironmentTest, ANameGivenTwiceCountsOnce) {
  const char* const environ[] = {"CUDA_HOME=/first", "CUDA_HOME=/second", "CPATH=/a", "CPATH=/b",
                                 nullptr};
  ClientEnvironment environment = ClientEnvironment::Of(environ);
  EXPECT_EQ(environment.cuda_home, "/first");
  EXPECT_THAT(environment.nvcc_variables, ElementsAre(Pair("CPATH", "/a")));
}

}  // namespace
}  // namespace distcc_cuda::client
