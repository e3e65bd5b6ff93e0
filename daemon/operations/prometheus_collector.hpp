// irisd's counters as Prometheus metric families, which MetricsServer
// serves as text at /metrics (prometheus-cpp's text format). Each scrape takes the same snapshot
// GetStats answers with (fill_stats), so iris-ctl, the gRPC answer and /metrics never disagree
// about what a counter is. Names follow Prometheus's conventions: `iris_` prefix, `_total`
// counters, base units (seconds, bytes), labels for operation, outcome, size class, device, path
// and error code.
#pragma once

#include <prometheus/client_metric.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>

#include <string>
#include <string_view>

#include "daemon/engines/engine.hpp"
#include "daemon/operations/health.hpp"
#include "daemon/stats.hpp"

namespace iris::daemon {

class PrometheusCollector final : public prometheus::Collectable {
 public:
  PrometheusCollector(const Stats& stats, const EngineDescription& engine, const Health& health);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const Stats& stats_;
  const EngineDescription& engine_;
  const Health& health_;
};

// The Prometheus name of an unlabelled counter of stats.hpp: `iris_<name>`, microseconds as
// seconds (stream_ready_wait_us_total -> iris_stream_ready_wait_seconds_total).
std::string prometheus_name(std::string_view counter);

}  // namespace iris::daemon
