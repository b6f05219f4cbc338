// SPDX-License-Identifier: Apache-2.0
// coordinator/memory/data/unit_priors.csv, compiled in: the build writes its
// definition (coordinator/CMakeLists.txt) into unit_priors_data.cc.
#pragma once

namespace distcc_cuda::coordinator {

extern const char kUnitPriorsCsv[];

}  // namespace distcc_cuda::coordinator
