// Daemon-wide counters. Written by the progress thread, read by `GetStats` (gRPC threads) and
// by the Prometheus exporter's threads: every value is a relaxed atomic.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "daemon/engines/fair_share.hpp"
#include "iris/error_code.hpp"
#include "iris/shared/api_operations.hpp"
#include "iris/shared/descriptor.hpp"

namespace iris::daemon {

enum class MetricKind { kCounter, kGauge };

// Every unlabelled counter and gauge, once: its name, kind and what it counts. Stats has one
// atomic per entry; GetStats fills the GetStatsResponse field of the same name, iris-ctl stats
// prints those fields and /metrics serves `iris_<name>` (microseconds as seconds). Tests check
// that control.proto and /metrics have each one.
// clang-format off
#define IRIS_STATS_COUNTERS(X) \
  X(sessions_attached_total, kCounter, "sessions that attached") \
  X(sessions_lost_total, kCounter, "sessions whose connection dropped without a detach") \
  X(sessions, kGauge, "sessions attached now") \
  X(communicators, kGauge, "communicators now") \
  X(ring_entries_total, kCounter, "ring entries popped") \
  X(ring_full_total, kCounter, "times irisd found a session's submission ring full (its client waited for room)") \
  X(collectives_in_flight, kGauge, "collectives matched or waiting now") \
  X(stream_ready_waits_total, kCounter, "stream-ordered requests that waited for their caller's stream") \
  X(stream_ready_wait_us_total, kCounter, "time they waited in all (entry seen to ready flag)") \
  X(registered_buffers, kGauge, "buffers registered now") \
  X(registered_buffer_bytes, kGauge, "bytes of the buffers registered now") \
  X(graph_plans, kGauge, "collectives captured in CUDA graphs, held now") \
  X(graph_replays_total, kCounter, "graph replays that reached a captured collective") \
  X(log_lines_suppressed_total, kCounter, "log lines a tenant caused that its per-user limits left out") \
  X(sessions_resumed_total, kCounter, "sessions of a previous irisd that attached again and resumed") \
  X(resume_after_start_us_total, kCounter, "time from this irisd's start to each resumed session's attach, measured by irisd, in all") \
  X(collectives_rerun_total, kCounter, "requests submitted again after a restart (unfinished when the previous irisd went)")
// clang-format on

// Labelled families. Collectives are counted by operation (the opcode; 0 when no rank's request
// was valid) and outcome, and timed (first arrival to the last rank told) by operation and size
// class; copies by the device they ran for: the GPU the bytes land on, else the GPU they come
// from, else the host.
inline constexpr std::size_t kOpSlots = shm::kLastCollectiveOpcode + 1;
inline constexpr std::size_t kSizeClasses = 4;
inline constexpr const char* kSizeClassNames[kSizeClasses] = {"0-64KiB", "64KiB-1MiB", "1MiB-16MiB",
                                                              "16MiB+"};
// Upper bounds of the latency buckets in microseconds; a last bucket takes the rest (+Inf).
inline constexpr uint64_t kLatencyBoundsUs[] = {
    10,    25,    50,     100,    250,    500,     1000,    2500,    5000,    10000,
    25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};
inline constexpr std::size_t kLatencyBuckets = std::size(kLatencyBoundsUs) + 1;
inline constexpr std::size_t kDeviceSlots = 65;  // host, then engine devices 0..63

enum class Outcome : uint8_t { kCompleted, kFailed };
inline constexpr const char* kOutcomeNames[] = {"completed", "failed"};

struct LatencyHistogram {
  std::array<std::atomic<uint64_t>, kLatencyBuckets> buckets{};  // not cumulative
  std::atomic<uint64_t> count{0};
  std::atomic<uint64_t> sum_us{0};
};

struct DeviceCounters {
  // Written by the progress loop only (add_from_loop).
  std::atomic<uint64_t> copy_engine_bytes_total{0};   // moved by DMA copy engines
  std::atomic<uint64_t> compute_unit_bytes_total{0};  // by GPU SMs/CUs or host threads
  std::atomic<uint64_t> copies_total{0};              // copies finished, well or not
  std::atomic<uint64_t> copy_errors_total{0};
  std::atomic<uint64_t> copies_in_flight{0};  // handed to the engine, not finished: its queue
  // Copies failed since the last that succeeded: what Health judges a device by (no metric).
  std::atomic<uint64_t> failing_streak{0};
};

// Adds to a counter that only the progress loop writes: a plain load and store instead of a
// locked read-modify-write (a copy's completion touches several), readers still see whole values.
inline void add_from_loop(std::atomic<uint64_t>& counter, int64_t n) {
  counter.store(counter.load(std::memory_order_relaxed) + static_cast<uint64_t>(n),
                std::memory_order_relaxed);
}

// Which DeviceCounters a copy between these engine devices (kHostMemory = -1) counts in.
constexpr std::size_t device_slot(int src_device, int dst_device) {
  const int device = dst_device >= 0 ? dst_device : src_device;
  if (device < 0) return 0;
  return device + 1 < static_cast<int>(kDeviceSlots) ? static_cast<std::size_t>(device + 1)
                                                     : kDeviceSlots - 1;
}

constexpr std::size_t size_class(uint64_t bytes) {
  return bytes < (64u << 10) ? 0 : bytes < (1u << 20) ? 1 : bytes < (16u << 20) ? 2 : 3;
}

// The engines' work by traffic class (engines/fair_share.hpp): bytes the engines moved, and how
// long each copy waited in irisd's queue before its first slice went to the engine.
struct ClassCounters {
  std::atomic<uint64_t> bytes_total{0};
  std::atomic<uint64_t> busy_ns_total{0};  // engine time (UserEngineCounters says how it is cut)
  LatencyHistogram queue_delay;
};

// The engines' work by user: the uid whose communicator queued the copies, or irisd's own
// (scale-out staging). Engine time: the engine's own account of each copy where it gives one
// (CopyCompletion::engine_ns: host workers' memcpy time, a CUDA stream's service time); else a
// device's engines are busy from when they get copies until none is left, and each interval
// between two completions there goes to the copy that completed at its end. The first
// kUserSlots - 1 users seen have a slot each; the others share the last.
inline constexpr std::size_t kUserSlots = 64;
struct UserEngineCounters {
  std::atomic<bool> used{false};  // set (release) once uid is written
  std::atomic<uint32_t> uid{0};
  std::atomic<uint64_t> bytes_total{0};
  std::atomic<uint64_t> busy_ns_total{0};
};

// What libraries over libiris reported of their API's operations (api_operations.hpp).
struct ApiOperationCounters {
  std::atomic<uint64_t> calls_total{0};
  std::atomic<uint64_t> irisd_bytes_total{0};
  std::atomic<uint64_t> sm_kernel_bytes_total{0};
  std::atomic<uint64_t> host_bytes_total{0};
  std::atomic<uint64_t> fallback_bytes_total{0};
};

struct Stats {
#define IRIS_STATS_DECLARE(name, kind, help) std::atomic<uint64_t> name{0};
  IRIS_STATS_COUNTERS(IRIS_STATS_DECLARE)
#undef IRIS_STATS_DECLARE
  std::array<std::atomic<uint64_t>, kErrorCodeCount> errors{};
  std::array<std::array<std::atomic<uint64_t>, 2>, kOpSlots> collectives{};  // [op][outcome]
  std::array<std::array<LatencyHistogram, kSizeClasses>, kOpSlots> latency{};
  std::array<DeviceCounters, kDeviceSlots> devices{};
  std::array<ApiOperationCounters, kApiOperationCount> api_operations{};
  std::array<ClassCounters, kTrafficClassCount> classes{};  // by TrafficClass
  std::array<UserEngineCounters, kUserSlots> users{};       // CopyDispatcher assigns the slots

  // From the progress loop only: `bytes` and `busy_ns` of engine time for copies of class `cls`
  // and user slot `user`.
  void count_engine_work(std::size_t cls, std::size_t user, uint64_t bytes, uint64_t busy_ns) {
    if (cls < classes.size()) {
      add_from_loop(classes[cls].bytes_total, static_cast<int64_t>(bytes));
      add_from_loop(classes[cls].busy_ns_total, static_cast<int64_t>(busy_ns));
    }
    if (user < users.size()) {
      add_from_loop(users[user].bytes_total, static_cast<int64_t>(bytes));
      add_from_loop(users[user].busy_ns_total, static_cast<int64_t>(busy_ns));
    }
  }
  void count_queue_delay(std::size_t cls, uint64_t micros) {
    if (cls < classes.size()) add_to(classes[cls].queue_delay, micros);
  }

  void count_error(ErrorCode code) {
    const auto i = static_cast<uint32_t>(code);
    if (i < errors.size()) errors[i].fetch_add(1, std::memory_order_relaxed);
  }
  // From the progress loop only (the scheduler retiring a collective): add_from_loop.
  void count_collective(uint32_t op, Outcome outcome, uint64_t bytes, uint64_t micros) {
    if (op >= kOpSlots) op = 0;
    add_from_loop(collectives[op][static_cast<std::size_t>(outcome)], 1);
    add_to(latency[op][size_class(bytes)], micros);
  }
  static void add_to(LatencyHistogram& h, uint64_t micros) {
    std::size_t b = 0;
    while (b < std::size(kLatencyBoundsUs) && micros > kLatencyBoundsUs[b]) ++b;
    add_from_loop(h.buckets[b], 1);
    add_from_loop(h.count, 1);
    add_from_loop(h.sum_us, static_cast<int64_t>(micros));
  }
};

struct CounterInfo {
  const char* name;
  MetricKind kind;
  const char* help;
};

// The unlabelled counters in declaration order, for code that walks them all.
inline constexpr CounterInfo kStatsCounters[] = {
#define IRIS_STATS_INFO(name, kind, help) {#name, MetricKind::kind, help},
    IRIS_STATS_COUNTERS(IRIS_STATS_INFO)
#undef IRIS_STATS_INFO
};

}  // namespace iris::daemon
