// Ring round trip: a no-op submitted through the session ring until its completion is visible to
// the client, against a real irisd (started here). Reports p50/p99 per round trip as counters.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "iris/iris.hpp"
#include "tests/support/daemon_process.hpp"

namespace {

double percentile(std::vector<double>& v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size() - 1)))];
}

void BM_RingRoundTrip(benchmark::State& state) {
  iris::testing::DaemonProcess daemon;
  iris::ClientOptions options;
  options.socket_path = daemon.socket();
  auto client = iris::Client::connect(options);
  for (int i = 0; i < 1000; ++i) client.nop().wait();  // warm up: daemon spinning, pages mapped
  std::vector<double> ns;
  ns.reserve(1 << 20);
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    client.nop().wait();
    ns.push_back(
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count());
  }
  state.counters["p50_us"] = percentile(ns, 0.50) / 1e3;
  state.counters["p99_us"] = percentile(ns, 0.99) / 1e3;
}
BENCHMARK(BM_RingRoundTrip)->MinTime(2.0)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
