// SPDX-License-Identifier: Apache-2.0
#include "common/transport/metrics.h"

#include <prometheus/text_serializer.h>

#include <sstream>
#include <utility>

#include "common/store/cas_store.h"

namespace distcc_cuda {

const prometheus::Histogram::BucketBoundaries& DurationBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600};
  return kBuckets;
}

HttpHandler MetricsPage(std::shared_ptr<prometheus::Registry> registry,
                        std::vector<MetricsSnapshot> snapshots) {
  return [registry = std::move(registry),
          snapshots = std::move(snapshots)](const HttpRequest&) -> HttpResponse {
    std::vector<prometheus::MetricFamily> families = registry->Collect();
    for (const MetricsSnapshot& snapshot : snapshots) {
      std::vector<prometheus::MetricFamily> more = snapshot();
      families.insert(families.end(), std::make_move_iterator(more.begin()),
                      std::make_move_iterator(more.end()));
    }
    std::ostringstream text;
    prometheus::TextSerializer().Serialize(text, families);
    return {200, "text/plain; version=0.0.4; charset=utf-8", text.str()};
  };
}

absl::StatusOr<std::unique_ptr<HttpServer>> ServeMetrics(
    const std::string& listen_address, bool reachable,
    std::shared_ptr<prometheus::Registry> registry, std::vector<MetricsSnapshot> snapshots) {
  HttpServerOptions http;
  http.listen_address = listen_address;
  http.reachable = reachable;
  http.purpose = "metrics";
  http.routes["/metrics"] = MetricsPage(std::move(registry), std::move(snapshots));
  return HttpServer::Start(std::move(http));
}

prometheus::MetricFamily MetricFamilyOf(std::string name, std::string help,
                                        prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

void AddSample(prometheus::MetricFamily& family, double value,
               std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric& metric = family.metric.emplace_back();
  metric.label = std::move(labels);
  if (family.type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
}

std::vector<prometheus::MetricFamily> StoreMetrics(const CasStore& store) {
  using prometheus::MetricType;
  const CasStore::Stats stats = store.stats();
  std::vector<prometheus::MetricFamily> families;
  auto add = [&families](const char* name, const char* help, MetricType type, double value,
                         std::vector<prometheus::ClientMetric::Label> labels = {}) {
    if (families.empty() || families.back().name != name) {
      families.push_back(MetricFamilyOf(name, help, type));
    }
    AddSample(families.back(), value, std::move(labels));
  };
  add("distcc_cuda_store_bytes",
      "Disk the content store's blobs take, whole 4 KiB blocks and one more each for its inode "
      "and name (while it counts what it held at opening, what it has counted so far)",
      MetricType::Gauge, stats.bytes);
  add("distcc_cuda_store_limit_bytes",
      "The content store's size limit, beyond which least recently used blobs are evicted "
      "(0: none)",
      MetricType::Gauge, stats.max_bytes);
  add("distcc_cuda_store_blobs", "Blobs in the content store", MetricType::Gauge, stats.blobs);
  add("distcc_cuda_store_lookups_total",
      "Blobs a peer offered or a task needed, by whether the store had them (hit: nothing "
      "transferred)",
      MetricType::Counter, stats.lookup_hits, {{"result", "hit"}});
  add("distcc_cuda_store_lookups_total", "", MetricType::Counter, stats.lookup_misses,
      {{"result", "miss"}});
  add("distcc_cuda_store_evictions_total",
      "Blobs evicted to stay under the limit since the store was opened", MetricType::Counter,
      stats.evicted_blobs);
  add("distcc_cuda_store_evicted_bytes_total", "Disk the blobs evicted took", MetricType::Counter,
      stats.evicted_bytes);
  return families;
}

}  // namespace distcc_cuda
