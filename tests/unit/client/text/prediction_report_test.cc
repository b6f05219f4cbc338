// SPDX-License-Identifier: Apache-2.0
#include "client/text/prediction_report.h"

#include <gtest/gtest.h>

namespace distcc_cuda::client {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(PredictionReportTest, SaysHowManyFitAndHowFarOffTheMedianWas) {
  PredictionReport report;
  EXPECT_EQ(report.Describe(), "") << "nothing compiled, nothing to say";
  report.Add(4 * kGiB, 2 * kGiB, "default");                  // off by 50%, above
  report.Add(4 * kGiB, 4 * kGiB + kGiB / 5, "same closure");  // off by 5%
  report.Add(2 * kGiB, 2 * kGiB + kGiB / 5, "history");       // off by 10%
  EXPECT_EQ(report.Describe(),
            "2 of 3 units peaked within their predicted reservation; predictions off by 10% "
            "(median), 1 from the default off by 50%");
}

TEST(PredictionReportTest, AllFromTheDefaultIsSaidOnce) {
  PredictionReport report;
  report.Add(1 * kGiB, 2 * kGiB, "default");
  report.Add(3 * kGiB, 2 * kGiB, "default");
  report.Add(0, 2 * kGiB, "default");  // no peak measured: counted, no error
  EXPECT_EQ(report.Describe(),
            "2 of 3 units peaked within their predicted reservation; predictions off by 67% "
            "(median)");
}

}  // namespace
}  // namespace distcc_cuda::client
