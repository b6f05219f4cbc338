// SPDX-License-Identifier: Apache-2.0
// Prometheus metrics (prometheus-cpp's core library, Debian's
// prometheus-cpp-dev) shared by the coordinator and the workers: the /metrics
// page in the text exposition format, the buckets every duration uses, and
// helpers for figures read from a snapshot at each scrape (gauges of what is
// connected, running or stored) rather than counted as they happen.
#pragma once

#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/transport/http_server.h"

namespace distcc_cuda {

class CasStore;

// Seconds, 10 ms to 1 h: a cached unit's round trip to a CUTLASS kernel's
// compile.
const prometheus::Histogram::BucketBoundaries& DurationBuckets();

// Figures taken at each scrape.
using MetricsSnapshot = std::function<std::vector<prometheus::MetricFamily>()>;

// The /metrics page: every metric of `registry`, then each snapshot's, in the
// text exposition format (version 0.0.4).
HttpHandler MetricsPage(std::shared_ptr<prometheus::Registry> registry,
                        std::vector<MetricsSnapshot> snapshots);

// Starts serving MetricsPage(registry, snapshots) at /metrics on
// `listen_address` (loopback unless `reachable`); HttpServer::Start's errors.
absl::StatusOr<std::unique_ptr<HttpServer>> ServeMetrics(
    const std::string& listen_address, bool reachable,
    std::shared_ptr<prometheus::Registry> registry, std::vector<MetricsSnapshot> snapshots);

// A family of one type, for a snapshot.
prometheus::MetricFamily MetricFamilyOf(std::string name, std::string help,
                                        prometheus::MetricType type);
// Adds one sample to a gauge or counter family.
void AddSample(prometheus::MetricFamily& family, double value,
               std::vector<prometheus::ClientMetric::Label> labels = {});

// A content store's figures: distcc_cuda_store_bytes, _limit_bytes, _blobs, _lookups_total{result},
// _evictions_total and _evicted_bytes_total.
std::vector<prometheus::MetricFamily> StoreMetrics(const CasStore& store);

}  // namespace distcc_cuda
