// SPDX-License-Identifier: Apache-2.0
// How well the coordinator predicted the memory of a build's compiled units,
// for the summary's "memory" line: a wrong prediction costs either a memory
// kill and a retry (too low) or memory left idle (too high).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace distcc_cuda::client {

class PredictionReport {
 public:
  // One compiled unit: its measured peak, the peak the coordinator predicted
  // (and reserved) and where that came from ("default", "similar units",
  // "same closure", "history").
  void Add(int64_t peak_bytes, int64_t predicted_bytes, const std::string& source);

  // "6 of 7 units peaked within their predicted reservation; predictions off
  // by 12% (median), 3 from the default off by 40%". Empty with no unit.
  std::string Describe() const;

 private:
  int units_ = 0;
  int within_ = 0;
  std::vector<double> errors_;          // |predicted - peak| / peak, units with a peak
  std::vector<double> default_errors_;  // the same, for those predicted from the default
};

}  // namespace distcc_cuda::client
