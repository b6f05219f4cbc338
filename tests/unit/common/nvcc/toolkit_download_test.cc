// SPDX-License-Identifier: Apache-2.0
// What a coordinator lists as served toolkits is hostile until checked
// (common/nvcc/toolkit_download.h): a toolkit whose name would make a path
// is never chosen, and its words are made safe before they are printed.
#include "common/nvcc/toolkit_download.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::ServedToolkit Served(const std::string& version, const std::string& hash) {
  v1::ServedToolkit toolkit;
  toolkit.set_version(version);
  toolkit.mutable_manifest()->set_hash(hash);
  toolkit.mutable_manifest()->set_size_bytes(100);
  toolkit.set_added_from("/opt/cuda\x1b]0;pwned\x07");
  return toolkit;
}

TEST(ServedToolkitTest, AToolkitWhoseNameWouldMakeAPathIsNeverChosen) {
  const std::string good(64, 'a');
  absl::StatusOr<v1::ServedToolkit> chosen = ChooseServedToolkit(
      {Served("13.2.99", "../../../etc"), Served("13.2.86", good), Served("13.2.9x", good)},
      *CudaRelease::Parse("13.2"));
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->version(), "13.2.86");
  EXPECT_EQ(ChooseServedToolkit({Served("13.2.99", "../../../etc")}, *CudaRelease::Parse("13.2"))
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(DescribeServedToolkit(*chosen), Not(HasSubstr("\x1b")));
  EXPECT_THAT(DescribeServedToolkit(*chosen), HasSubstr("added from /opt/cuda"));
}

}  // namespace
}  // namespace distcc_cuda
