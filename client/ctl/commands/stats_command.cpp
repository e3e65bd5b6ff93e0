#include "client/ctl/commands/stats_command.hpp"

#include <CLI/CLI.hpp>
#include <chrono>

#include "client/ctl/stats_rates.hpp"

namespace iris::ctl {

namespace {

v1::GetStatsResponse get_stats(const client::ControlChannel& channel) {
  return channel.call(&v1::Control::Stub::GetStats, v1::GetStatsRequest{}, "stats");
}

// The smallest bucket bound at or under which `quantile` of the samples fall ("> last bound"
// when they fall in the open bucket).
nlohmann::json quantile_bound_us(const v1::LatencyHistogram& h, double quantile) {
  const double wanted = quantile * static_cast<double>(h.count());
  uint64_t cumulative = 0;
  for (int b = 0; b < h.bucket_counts_size(); ++b) {
    cumulative += h.bucket_counts(b);
    if (static_cast<double>(cumulative) >= wanted)
      return b < h.upper_bound_us_size()
                 ? nlohmann::json(h.upper_bound_us(b))
                 : nlohmann::json("> " + std::to_string(h.upper_bound_us(b - 1)));
  }
  return nullptr;
}

}  // namespace

void StatsCommand::add_options(CLI::App& sub) {
  sub.add_flag("--watch", watch_, "print again every --interval, with rates since the last");
  sub.add_option("--interval", watch_options_.interval_s, "seconds between samples (--watch)")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  sub.add_option("--count", watch_options_.count, "samples to print, then exit (0: until Ctrl-C)")
      ->capture_default_str();
}

Report stats_report(const v1::GetStatsResponse& s, const v1::GetStatsResponse* before,
                    double seconds) {
  Report report;
  auto& counters = report.fields("stats");
  // Every counter field of the answer, in control.proto's order: a counter irisd adds shows here
  // without a change to iris-ctl.
  const auto* descriptor = s.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_UINT64 ||
        field->is_repeated())
      continue;
    counters.fields.push_back({field->name(), s.GetReflection()->GetUInt64(s, field)});
  }
  if (before != nullptr) {
    auto& rates = report.fields("rates");
    rates.fields.push_back({"interval_s", seconds});
    for (const Rate& r : counter_rates(*before, s, seconds))
      rates.fields.push_back({r.name, r.per_second});
  }
  auto& collectives = report.table("collectives", {"op", "outcome", "count"});
  for (const auto& c : s.collectives())
    collectives.rows.push_back({c.op(), c.outcome(), c.count()});
  auto& latency =
      report.table("latency", {"op", "size_class", "count", "mean_us", "p50_le_us", "p99_le_us"});
  for (const auto& l : s.latency())
    latency.rows.push_back({l.op(), l.size_class(), l.count(),
                            l.count() == 0 ? 0.0 : static_cast<double>(l.sum_us()) / l.count(),
                            quantile_bound_us(l, 0.5), quantile_bound_us(l, 0.99)});
  auto& devices = report.table("devices", {"device", "copy_engine_bytes", "compute_unit_bytes",
                                           "copies", "copy_errors", "in_flight"});
  for (const auto& d : s.devices())
    devices.rows.push_back({d.device(), d.copy_engine_bytes_total(), d.compute_unit_bytes_total(),
                            d.copies_total(), d.copy_errors_total(), d.copies_in_flight()});
  auto& classes = report.table("traffic_classes", {"class", "engine_bytes", "engine_busy_us",
                                                   "queued", "queue_mean_us", "queue_p99_le_us"});
  for (const auto& c : s.traffic_classes()) {
    const auto& q = c.queue_delay();
    classes.rows.push_back({c.traffic_class(), c.bytes_total(), c.busy_ns_total() / 1000, q.count(),
                            q.count() == 0 ? 0.0 : static_cast<double>(q.sum_us()) / q.count(),
                            quantile_bound_us(q, 0.99)});
  }
  auto& users = report.table("engine_users", {"user", "engine_bytes", "engine_busy_us"});
  for (const auto& u : s.engine_users())
    users.rows.push_back({u.user(), u.bytes_total(), u.busy_ns_total() / 1000});
  auto& api = report.table("api_operations", {"op", "calls", "irisd_bytes", "sm_kernel_bytes",
                                              "host_bytes", "fallback_bytes"});
  for (const auto& a : s.api_operations())
    api.rows.push_back({a.op(), a.calls_total(), a.irisd_bytes_total(), a.sm_kernel_bytes_total(),
                        a.host_bytes_total(), a.fallback_bytes_total()});
  auto& errors = report.table("errors", {"code", "count"});
  for (const auto& e : s.errors()) errors.rows.push_back({e.code(), e.count()});
  return report;
}

Report StatsCommand::run(const client::ControlChannel& channel) const {
  return stats_report(get_stats(channel));
}

int StatsCommand::execute(const client::ControlChannel& channel, const Printer& print) const {
  if (!watch_) return Command::execute(channel, print);
  v1::GetStatsResponse last;
  auto last_at = std::chrono::steady_clock::now();
  watch(watch_options_, [&](uint32_t index) {
    v1::GetStatsResponse now = get_stats(channel);
    const auto at = std::chrono::steady_clock::now();
    print(index == 0
              ? stats_report(now)
              : stats_report(now, &last, std::chrono::duration<double>(at - last_at).count()));
    last = std::move(now);
    last_at = at;
    return true;
  });
  return 0;
}

}  // namespace iris::ctl
