#include "daemon/operations/prometheus_collector.hpp"

#include <limits>

#include "daemon/operations/stats_report.hpp"
#include "iris/shared/version.hpp"

namespace iris::daemon {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

constexpr std::string_view kMicrosSuffix = "_us_total";

bool in_micros(std::string_view counter) { return counter.ends_with(kMicrosSuffix); }

MetricFamily family(std::string name, std::string help, MetricType type) {
  return MetricFamily{std::move(name), std::move(help), type, {}};
}

ClientMetric& sample(MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f.type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
  return f.metric.back();
}

// A histogram of microseconds, as GetStats carries it, in seconds.
ClientMetric histogram(std::vector<ClientMetric::Label> labels, const v1::LatencyHistogram& l) {
  ClientMetric m;
  m.label = std::move(labels);
  uint64_t cumulative = 0;
  for (int b = 0; b < l.bucket_counts_size(); ++b) {
    cumulative += l.bucket_counts(b);
    const double bound = b < l.upper_bound_us_size()
                             ? static_cast<double>(l.upper_bound_us(b)) / 1e6
                             : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back({cumulative, bound});
  }
  m.histogram.sample_count = l.count();
  m.histogram.sample_sum = static_cast<double>(l.sum_us()) / 1e6;
  return m;
}

}  // namespace

std::string prometheus_name(std::string_view counter) {
  if (in_micros(counter))
    return "iris_" + std::string(counter.substr(0, counter.size() - kMicrosSuffix.size())) +
           "_seconds_total";
  return "iris_" + std::string(counter);
}

PrometheusCollector::PrometheusCollector(const Stats& stats, const EngineDescription& engine,
                                         const Health& health)
    : stats_(stats), engine_(engine), health_(health) {}

std::vector<MetricFamily> PrometheusCollector::Collect() const {
  v1::GetStatsResponse s;
  fill_stats(stats_, gpu_count(engine_), s);
  const auto* descriptor = s.GetDescriptor();
  const auto* reflection = s.GetReflection();
  std::vector<MetricFamily> out;

  for (const CounterInfo& c : kStatsCounters) {
    const double raw =
        static_cast<double>(reflection->GetUInt64(s, descriptor->FindFieldByName(c.name)));
    auto f = family(prometheus_name(c.name), c.help,
                    c.kind == MetricKind::kCounter ? MetricType::Counter : MetricType::Gauge);
    sample(f, {}, in_micros(c.name) ? raw / 1e6 : raw);
    out.push_back(std::move(f));
  }

  auto collectives =
      family("iris_collectives_total", "collectives that ended, by operation and outcome",
             MetricType::Counter);
  for (const auto& c : s.collectives())
    sample(collectives, {{"op", c.op()}, {"outcome", c.outcome()}}, static_cast<double>(c.count()));
  out.push_back(std::move(collectives));

  auto latency = family("iris_collective_latency_seconds",
                        "collective latency, first rank's arrival to the last rank's completion, "
                        "by operation and size class (bytes per block)",
                        MetricType::Histogram);
  for (const auto& l : s.latency())
    latency.metric.push_back(histogram({{"op", l.op()}, {"size_class", l.size_class()}}, l));
  out.push_back(std::move(latency));
  auto class_bytes = family("iris_engine_class_bytes_total",
                            "bytes the engines moved, by traffic class (latency: collectives "
                            "whose copies are all at most --latency-max-bytes; bulk: larger)",
                            MetricType::Counter);
  auto queue_delay = family("iris_engine_queue_delay_seconds",
                            "how long copies waited in irisd's queue before their first slice "
                            "went to the engine, by traffic class",
                            MetricType::Histogram);
  auto class_busy = family("iris_engine_class_busy_seconds_total",
                           "time the engines were busy, by traffic class (each copy's time as its "
                           "engine accounts it, summed over engines; docs/OPERATIONS.md)",
                           MetricType::Counter);
  for (const auto& c : s.traffic_classes()) {
    sample(class_bytes, {{"class", c.traffic_class()}}, static_cast<double>(c.bytes_total()));
    sample(class_busy, {{"class", c.traffic_class()}},
           static_cast<double>(c.busy_ns_total()) / 1e9);
    queue_delay.metric.push_back(histogram({{"class", c.traffic_class()}}, c.queue_delay()));
  }
  auto user_bytes = family("iris_engine_user_bytes_total",
                           "bytes the engines moved, by user (a uid; irisd: its own copies; "
                           "other: the users past the first 63)",
                           MetricType::Counter);
  auto user_busy =
      family("iris_engine_user_busy_seconds_total",
             "time the engines were busy, by user (cut as for the classes)", MetricType::Counter);
  for (const auto& u : s.engine_users()) {
    sample(user_bytes, {{"user", u.user()}}, static_cast<double>(u.bytes_total()));
    sample(user_busy, {{"user", u.user()}}, static_cast<double>(u.busy_ns_total()) / 1e9);
  }
  for (auto* f : {&class_bytes, &class_busy, &queue_delay, &user_bytes, &user_busy})
    out.push_back(std::move(*f));

  auto bytes = family("iris_copied_bytes_total",
                      "bytes copied, by the device the copy ran for and by what moved them "
                      "(copy_engine: DMA engines; compute_units: GPU SMs/CUs or host threads)",
                      MetricType::Counter);
  auto copies = family("iris_copies_total", "copies finished, by device", MetricType::Counter);
  auto errors =
      family("iris_copy_errors_total", "copies that failed, by device", MetricType::Counter);
  auto queue = family("iris_engine_queue_depth",
                      "copies handed to the engine and not finished, by device", MetricType::Gauge);
  for (const auto& d : s.devices()) {
    sample(bytes, {{"device", d.device()}, {"path", "copy_engine"}},
           static_cast<double>(d.copy_engine_bytes_total()));
    sample(bytes, {{"device", d.device()}, {"path", "compute_units"}},
           static_cast<double>(d.compute_unit_bytes_total()));
    sample(copies, {{"device", d.device()}}, static_cast<double>(d.copies_total()));
    sample(errors, {{"device", d.device()}}, static_cast<double>(d.copy_errors_total()));
    sample(queue, {{"device", d.device()}}, static_cast<double>(d.copies_in_flight()));
  }
  for (auto* f : {&bytes, &copies, &errors, &queue}) out.push_back(std::move(*f));

  auto api_calls =
      family("iris_api_operations_total",
             "NCCL-API operations, as irisd's NCCL library reported them", MetricType::Counter);
  auto api_bytes =
      family("iris_api_operation_bytes_total",
             "bytes the NCCL library's operations wrote, by operation and mover "
             "(irisd: irisd's engine; sm_kernel: kernels on the GPU's SMs; host; fallback: a "
             "real NCCL beside irisd), "
             "as the library reported them",
             MetricType::Counter);
  for (const auto& a : s.api_operations()) {
    sample(api_calls, {{"op", a.op()}}, static_cast<double>(a.calls_total()));
    sample(api_bytes, {{"op", a.op()}, {"mover", "irisd"}},
           static_cast<double>(a.irisd_bytes_total()));
    sample(api_bytes, {{"op", a.op()}, {"mover", "sm_kernel"}},
           static_cast<double>(a.sm_kernel_bytes_total()));
    sample(api_bytes, {{"op", a.op()}, {"mover", "host"}},
           static_cast<double>(a.host_bytes_total()));
    sample(api_bytes, {{"op", a.op()}, {"mover", "fallback"}},
           static_cast<double>(a.fallback_bytes_total()));
  }
  out.push_back(std::move(api_calls));
  out.push_back(std::move(api_bytes));

  auto by_code =
      family("iris_errors_total", "errors returned to clients, by code", MetricType::Counter);
  for (const auto& e : s.errors())
    sample(by_code, {{"code", e.code()}}, static_cast<double>(e.count()));
  out.push_back(std::move(by_code));

  const Health::Verdict verdict = health_.verdict(Health::Clock::now());
  auto healthy = family("iris_healthy",
                        "1 when irisd serves normally; 0 when its progress loop is wedged or a "
                        "device's copies keep failing (iris-ctl status says why)",
                        MetricType::Gauge);
  sample(healthy, {}, verdict.healthy ? 1.0 : 0.0);
  out.push_back(std::move(healthy));
  auto build = family("iris_build_info", "irisd's version, build and copy engine (value 1)",
                      MetricType::Gauge);
  sample(build,
         {{"version", std::string(release_version())},
          {"build", std::string(build_info())},
          {"engine", engine_.name}},
         1.0);
  out.push_back(std::move(build));
  return out;
}

}  // namespace iris::daemon
