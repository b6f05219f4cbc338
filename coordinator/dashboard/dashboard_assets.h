// SPDX-License-Identifier: Apache-2.0
// The dashboard's page, script and style (coordinator/dashboard/), compiled
// in by coordinator/dashboard/embed.cmake.
#pragma once

#include <vector>

namespace distcc_cuda::coordinator {

struct DashboardAsset {
  const char* path;          // "/", "/dashboard.js", "/dashboard.css"
  const char* content_type;  // "text/html; charset=utf-8", ...
  const char* body;
};

const std::vector<DashboardAsset>& DashboardAssets();

}  // namespace distcc_cuda::coordinator
