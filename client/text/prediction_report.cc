// SPDX-License-Identifier: Apache-2.0
#include "client/text/prediction_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace distcc_cuda::client {
namespace {

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

void PredictionReport::Add(int64_t peak_bytes, int64_t predicted_bytes, const std::string& source) {
  ++units_;
  if (peak_bytes <= predicted_bytes) ++within_;
  if (peak_bytes <= 0) return;  // nothing measured (a compile that did not start)
  double error = std::abs(static_cast<double>(predicted_bytes - peak_bytes)) / peak_bytes;
  errors_.push_back(error);
  if (source == "default") default_errors_.push_back(error);
}

std::string PredictionReport::Describe() const {
  if (units_ == 0) return "";
  std::string text =
      absl::StrFormat("%d of %d units peaked within their predicted reservation", within_, units_);
  if (!errors_.empty()) {
    absl::StrAppendFormat(&text, "; predictions off by %.0f%% (median)", 100 * Median(errors_));
  }
  if (!default_errors_.empty() && default_errors_.size() < errors_.size()) {
    absl::StrAppendFormat(&text, ", %d from the default off by %.0f%%", default_errors_.size(),
                          100 * Median(default_errors_));
  }
  return text;
}

}  // namespace distcc_cuda::client
