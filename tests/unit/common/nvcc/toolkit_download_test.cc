// SPDX-License-Identifier: Apache-2.0
// What a coordinator lists as served toolkits is hostile until checked
// (common/nvcc/toolkit_download.h): a toolkit whose name would make a path
// is never chosen, and its words are made safe before they are printed.
#include "common/nvcc/toolkit_download.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace distcc_cuda {
namespace {

using ::testing::AllOf;
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

WantedToolkit Wanted(const std::string& text) { return *ParseWantedToolkit(text); }

TEST(ServedToolkitTest, AToolkitWhoseNameWouldMakeAPathIsNeverChosen) {
  const std::string good(64, 'a');
  absl::StatusOr<v1::ServedToolkit> chosen = ChooseServedToolkit(
      {Served("13.2.99", "../../../etc"), Served("13.2.86", good), Served("13.2.9x", good)},
      Wanted("13.2"));
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->version(), "13.2.86");
  EXPECT_EQ(
      ChooseServedToolkit({Served("13.2.99", "../../../etc")}, Wanted("13.2")).status().code(),
      absl::StatusCode::kNotFound);
  EXPECT_THAT(DescribeServedToolkit(*chosen), Not(HasSubstr("\x1b")));
  EXPECT_THAT(DescribeServedToolkit(*chosen), HasSubstr("added from /opt/cuda"));
}

TEST(ServedToolkitTest, AWantedToolkitIsAReleasePinnedOrNotToItsManifestsDigest) {
  const std::string hash(64, 'b');
  absl::StatusOr<WantedToolkit> pinned = ParseWantedToolkit(" 13.2@sha256:" + hash + " ");
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(pinned->release.ToString(), "13.2");
  EXPECT_EQ(pinned->pinned_hash, hash);
  EXPECT_EQ(pinned->ToString(), "13.2@sha256:" + hash);
  EXPECT_TRUE(ParseWantedToolkit("13.2.86")->pinned_hash.empty());
  absl::StatusOr<std::vector<WantedToolkit>> both = ParseWantedToolkits("12.8,13.2@sha256:" + hash);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->size(), 2u);
  for (const std::string& wrong : std::vector<std::string>{
           "13.2@" + hash, "13.2@sha1:" + hash, "13.2@sha256:" + hash.substr(1),
           "13.2@sha256:" + std::string(64, 'G'), "@sha256:" + hash, "13.x",
           "13.2@sha256:\x1b[2J"}) {
    absl::StatusOr<WantedToolkit> refused = ParseWantedToolkit(wrong);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << wrong;
    EXPECT_THAT(refused.status().message(), Not(HasSubstr("\x1b"))) << wrong;
  }
}

TEST(ServedToolkitTest, APinnedToolkitIsChosenOnlyWithItsManifest) {
  const std::string mine(64, 'a');
  const std::string other(64, 'c');
  const std::vector<v1::ServedToolkit> served = {Served("13.2.86", mine), Served("13.2.90", other)};
  EXPECT_EQ(ChooseServedToolkit(served, Wanted("13.2"))->version(), "13.2.90") << "the newest";
  EXPECT_EQ(ChooseServedToolkit(served, Wanted("13.2@sha256:" + mine))->version(), "13.2.86");
  absl::StatusOr<v1::ServedToolkit> refused =
      ChooseServedToolkit({Served("13.2.90", other)}, Wanted("13.2@sha256:" + mine));
  // Not NOT_FOUND: a client must not fall back to PyPI for a pinned toolkit.
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              AllOf(HasSubstr("sha256:" + other), HasSubstr("not the pinned 13.2@sha256:" + mine)));
  EXPECT_THAT(UnpinnedNotice(Wanted("13.2"), served[1], "--served-toolkit"),
              HasSubstr("pin it: --served-toolkit 13.2@sha256:" + other));
  EXPECT_EQ(UnpinnedNotice(Wanted("13.2@sha256:" + other), served[1], "--served-toolkit"), "");
}

TEST(ServedToolkitTest, FetchLimitsAreReadFromTheFlagsWords) {
  absl::StatusOr<ToolkitFetchLimits> limits = ParseToolkitFetchLimits("2GiB", "5s", "10m");
  ASSERT_TRUE(limits.ok()) << limits.status();
  EXPECT_EQ(limits->max_bytes, int64_t{2} << 30);
  EXPECT_EQ(limits->stall, absl::Seconds(5));
  EXPECT_EQ(limits->deadline, absl::Minutes(10));
  EXPECT_THAT(ParseToolkitFetchLimits("lots", "5s", "10m").status().message(),
              HasSubstr("--toolkit-max-size"));
  EXPECT_THAT(ParseToolkitFetchLimits("2GiB", "0s", "10m").status().message(),
              HasSubstr("--toolkit-stall-timeout"));
  EXPECT_THAT(ParseToolkitFetchLimits("2GiB", "5s", "soon").status().message(),
              HasSubstr("--toolkit-fetch-timeout"));
}

}  // namespace
}  // namespace distcc_cuda
