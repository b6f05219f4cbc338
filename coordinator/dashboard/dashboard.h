// SPDX-License-Identifier: Apache-2.0
// The coordinator's live dashboard (--http-listen): a page that redraws
// itself from /api/status every second (every worker's memory bar and
// running units, the queue, the last builds) and draws a build's timeline
// from /api/build?id=ID. Read-only; its files are in the binary.
#pragma once

#include <map>
#include <string>

#include "common/transport/http_server.h"
#include "coordinator/scheduler/scheduler.h"

namespace distcc_cuda::coordinator {

// The dashboard's paths: "/", its script and style, "/api/status"
// (ClusterStatus as JSON) and "/api/build" (a BuildRecord with its spans, 404
// for a build it does not know, 400 for an id that is not one).
std::map<std::string, HttpHandler> DashboardRoutes(const BuildScheduler* scheduler);

}  // namespace distcc_cuda::coordinator
