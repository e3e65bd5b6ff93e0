// The operator-facing parts of irisd that need no daemon: the Prometheus families, the health
// verdict, the progress loop's heartbeat, JSON log lines and iris-ctl's rates.
#include <gtest/gtest.h>

#include <prometheus/text_serializer.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <future>
#include <set>
#include <sstream>

#include "client/ctl/stats_rates.hpp"
#include "daemon/front/reports.hpp"
#include "daemon/operations/health.hpp"
#include "daemon/operations/json_log_formatter.hpp"
#include "daemon/operations/prometheus_collector.hpp"
#include "daemon/operations/stats_report.hpp"
#include "daemon/progress_loop.hpp"

namespace iris::daemon {
namespace {

// The family /metrics serves for each repeated field of GetStatsResponse. A field added to the
// proto without a family here (and in PrometheusCollector) fails EveryCounterIsServed.
const std::map<std::string, std::vector<std::string>> kFamiliesOfFields = {
    {"errors", {"iris_errors_total"}},
    {"collectives", {"iris_collectives_total"}},
    {"latency", {"iris_collective_latency_seconds"}},
    {"api_operations", {"iris_api_operations_total", "iris_api_operation_bytes_total"}},
    {"traffic_classes",
     {"iris_engine_class_bytes_total", "iris_engine_class_busy_seconds_total",
      "iris_engine_queue_delay_seconds"}},
    {"engine_users", {"iris_engine_user_bytes_total", "iris_engine_user_busy_seconds_total"}},
    {"devices",
     {"iris_copied_bytes_total", "iris_copies_total", "iris_copy_errors_total",
      "iris_engine_queue_depth"}},
};

std::map<std::string, const prometheus::MetricFamily*> by_name(
    const std::vector<prometheus::MetricFamily>& families) {
  std::map<std::string, const prometheus::MetricFamily*> out;
  for (const auto& f : families) out[f.name] = &f;
  return out;
}

EngineDescription two_gpus() {
  EngineDescription e;
  e.name = "cuda";
  e.devices.resize(2);
  return e;
}

TEST(Metrics, EveryCounterIsServed) {
  Stats stats;
  const EngineDescription engine = two_gpus();
  Health health(stats);
  stats.count_error(ErrorCode::kPeerLost);
  stats.count_collective(static_cast<uint32_t>(shm::Opcode::kAllGather), Outcome::kCompleted, 4096,
                         40);
  const auto families = PrometheusCollector(stats, engine, health).Collect();
  const auto named = by_name(families);
  for (const CounterInfo& c : kStatsCounters)
    EXPECT_EQ(named.count(prometheus_name(c.name)), 1u) << c.name << " is not served";
  const auto* descriptor = v1::GetStatsResponse::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    if (!field->is_repeated()) continue;
    const auto it = kFamiliesOfFields.find(field->name());
    ASSERT_NE(it, kFamiliesOfFields.end())
        << "GetStatsResponse." << field->name() << " has no Prometheus family";
    for (const std::string& family : it->second)
      EXPECT_EQ(named.count(family), 1u) << family << " is not served";
  }
  EXPECT_EQ(named.count("iris_healthy"), 1u);
  EXPECT_EQ(named.count("iris_build_info"), 1u);
}

TEST(Metrics, NamesFollowPrometheusConventions) {
  EXPECT_EQ(prometheus_name("stream_ready_wait_us_total"), "iris_stream_ready_wait_seconds_total");
  EXPECT_EQ(prometheus_name("ring_full_total"), "iris_ring_full_total");
  Stats stats;
  const EngineDescription engine = two_gpus();
  Health health(stats);
  for (const auto& f : PrometheusCollector(stats, engine, health).Collect()) {
    EXPECT_TRUE(f.name.starts_with("iris_")) << f.name;
    if (f.type == prometheus::MetricType::Counter) {
      EXPECT_TRUE(f.name.ends_with("_total")) << f.name;
    } else {
      EXPECT_FALSE(f.name.ends_with("_total")) << f.name;
    }
    EXPECT_TRUE(f.name.find("_us_") == std::string::npos && !f.name.ends_with("_us"))
        << f.name << ": base units (seconds)";
  }
}

TEST(Metrics, ValuesAreTheCountersInBaseUnits) {
  Stats stats;
  const EngineDescription engine = two_gpus();
  Health health(stats);
  stats.stream_ready_wait_us_total = 2'500'000;
  stats.devices[device_slot(kHostMemory, 1)].copy_engine_bytes_total = 1 << 20;
  stats.devices[device_slot(kHostMemory, 1)].copies_in_flight = 3;
  for (int i = 0; i < 3; ++i)
    stats.count_collective(static_cast<uint32_t>(shm::Opcode::kAllToAll), Outcome::kCompleted,
                           8u << 20, 2000);
  const auto families = PrometheusCollector(stats, engine, health).Collect();
  const std::string text = prometheus::TextSerializer().Serialize(families);
  EXPECT_NE(text.find("iris_stream_ready_wait_seconds_total 2.5"), std::string::npos) << text;
  EXPECT_NE(text.find("iris_copied_bytes_total{device=\"1\",path=\"copy_engine\"} 1048576"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("iris_engine_queue_depth{device=\"1\"} 3"), std::string::npos) << text;
  // Engine time by user in seconds; irisd's own copies under "irisd".
  stats.users[0].uid = 1000;
  stats.users[0].used = true;
  stats.users[1].uid = kDaemonUid;
  stats.users[1].used = true;
  stats.count_engine_work(1, 0, 4096, 1'500'000'000);
  stats.count_engine_work(1, 1, 8192, 250'000'000);
  const std::string users =
      prometheus::TextSerializer().Serialize(PrometheusCollector(stats, engine, health).Collect());
  for (const char* line : {"iris_engine_user_bytes_total{user=\"1000\"} 4096",
                           "iris_engine_user_busy_seconds_total{user=\"1000\"} 1.5",
                           "iris_engine_user_bytes_total{user=\"irisd\"} 8192",
                           "iris_engine_class_busy_seconds_total{class=\"bulk\"} 1.75"})
    EXPECT_NE(users.find(line), std::string::npos) << line << " in\n" << users;
  EXPECT_NE(text.find("iris_collectives_total{op=\"all_to_all\",outcome=\"completed\"} 3"),
            std::string::npos)
      << text;
  // 2 ms is in the 2.5 ms bucket, cumulative counts from there on, the sum in seconds.
  EXPECT_NE(text.find("iris_collective_latency_seconds_bucket{op=\"all_to_all\",size_class="
                      "\"1MiB-16MiB\",le=\"0.001\"} 0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("iris_collective_latency_seconds_bucket{op=\"all_to_all\",size_class="
                      "\"1MiB-16MiB\",le=\"0.0025\"} 3"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("iris_collective_latency_seconds_bucket{op=\"all_to_all\",size_class="
                      "\"1MiB-16MiB\",le=\"+Inf\"} 3"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("iris_collective_latency_seconds_sum{op=\"all_to_all\",size_class="
                      "\"1MiB-16MiB\"} 0.006"),
            std::string::npos)
      << text;
}

TEST(Health, AWedgedLoopAndAFailingDeviceAreUnhealthyUntilTheyRecover) {
  Stats stats;
  Health health(stats, std::chrono::milliseconds(100), 4);
  const auto t0 = Health::Clock::now();
  health.loop_turned(t0);
  EXPECT_TRUE(health.verdict(t0 + std::chrono::milliseconds(50)).healthy);
  const auto stalled = health.verdict(t0 + std::chrono::seconds(3));
  EXPECT_FALSE(stalled.healthy);
  EXPECT_NE(stalled.reason.find("progress loop has not turned for 3 s"), std::string::npos)
      << stalled.reason;
  health.loop_turned(t0 + std::chrono::seconds(3));
  EXPECT_TRUE(health.verdict(t0 + std::chrono::seconds(3)).healthy);

  auto& gpu1 = stats.devices[device_slot(kHostMemory, 1)];
  gpu1.failing_streak = 3;
  EXPECT_TRUE(health.verdict(t0 + std::chrono::seconds(3)).healthy);
  gpu1.failing_streak = 4;
  const auto failing = health.verdict(t0 + std::chrono::seconds(3));
  EXPECT_FALSE(failing.healthy);
  EXPECT_NE(failing.reason.find("copies for device 1 all failed"), std::string::npos)
      << failing.reason;
  gpu1.failing_streak = 0;  // a copy succeeded
  EXPECT_TRUE(health.verdict(t0 + std::chrono::seconds(3)).healthy);
}

TEST(Heartbeat, BeatsOnTheLoopThreadAndStopsWhileTheLoopIsBlocked) {
  ProgressLoop loop(std::chrono::microseconds(0));
  std::atomic<int> beats{0};
  std::atomic<std::thread::id> beat_thread{};  // the thread of the first beat
  std::atomic<bool> one_thread{true};          // every beat on that thread
  loop.set_heartbeat(std::chrono::milliseconds(10), [&] {
    std::thread::id none{};
    const std::thread::id me = std::this_thread::get_id();
    if (!beat_thread.compare_exchange_strong(none, me) && none != me) one_thread = false;
    ++beats;
  });
  loop.start();
  const std::thread::id loop_thread = loop.call([] { return std::this_thread::get_id(); });
  const auto wait_for_beats = [&](int n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (beats.load() < n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return beats.load() >= n;
  };
  ASSERT_TRUE(wait_for_beats(beats.load() + 3)) << "no beats from an idle loop";
  // A closure that never returns wedges the loop: the beats must stop with it.
  std::promise<void> release;
  std::promise<void> entered;
  loop.post([&] {
    entered.set_value();
    release.get_future().wait();
  });
  entered.get_future().wait();
  const int while_blocked = beats.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(beats.load(), while_blocked) << "a beat came while the loop was blocked";
  release.set_value();
  EXPECT_TRUE(wait_for_beats(while_blocked + 3)) << "beats did not resume";
  loop.stop();
  EXPECT_TRUE(one_thread.load());
  EXPECT_EQ(beat_thread.load(), loop_thread) << "the beat ran off the loop thread";
}

TEST(JsonLog, EachLineIsOneObjectWhateverTheMessageHolds) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::logger logger("irisd", sink);
  logger.set_formatter(std::make_unique<JsonLogFormatter>());
  // A client-chosen key with a quote, a newline, a forged field and invalid UTF-8.
  const std::string hostile = "k\"\n{\"level\":\"critical\"}\xff\xfe";
  logger.warn("comm '{}' failed", hostile);
  logger.info("second");
  std::istringstream lines(out.str());
  std::string line;
  std::vector<nlohmann::json> parsed;
  while (std::getline(lines, line)) parsed.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(parsed.size(), 2u) << out.str();
  EXPECT_EQ(parsed[0]["level"], "warning");
  EXPECT_EQ(parsed[0]["logger"], "irisd");
  EXPECT_TRUE(parsed[0]["msg"].get<std::string>().starts_with("comm 'k\"\n{\"level\""));
  EXPECT_EQ(parsed[1]["msg"], "second");
  EXPECT_EQ(parsed[1]["time"].get<std::string>().size(),
            std::string("2026-12-01T13:05:03.970494Z").size());
}

TEST(CtlRates, CountersPerSecondAndNoNegativeRateAfterARestart) {
  v1::GetStatsResponse before, after;
  before.set_collectives_completed_total(100);
  after.set_collectives_completed_total(300);
  before.set_ring_entries_total(50);
  after.set_ring_entries_total(10);  // irisd restarted
  auto* d0 = before.add_devices();
  d0->set_device("0");
  d0->set_copy_engine_bytes_total(1000);
  auto* d1 = after.add_devices();
  d1->set_device("0");
  d1->set_copy_engine_bytes_total(5000);
  d1->set_copies_in_flight(7);
  std::map<std::string, double> rates;
  for (const auto& r : ctl::counter_rates(before, after, 2.0)) rates[r.name] = r.per_second;
  EXPECT_DOUBLE_EQ(rates.at("collectives_completed_per_s"), 100.0);
  EXPECT_DOUBLE_EQ(rates.at("ring_entries_per_s"), 0.0);
  EXPECT_EQ(rates.count("sessions"), 0u);  // gauges have no rate
  const auto devices = ctl::device_rates(before, after, 2.0);
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_DOUBLE_EQ(devices[0].copy_engine_bytes_per_s, 2000.0);
  EXPECT_EQ(devices[0].copies_in_flight, 7u);
}

}  // namespace
}  // namespace iris::daemon
