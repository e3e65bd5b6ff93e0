// Daemon-wide counters. Written by the progress thread, read by `GetStats` from gRPC threads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "iris/error_code.hpp"

namespace iris::daemon {

// Every counter, once: its name and what it counts. Stats has one atomic per entry; GetStats
// fills the GetStatsResponse field of the same name and iris-ctl stats prints those fields, so a
// counter added here shows everywhere (a unit test checks control.proto has a field for each).
// clang-format off
#define IRIS_STATS_COUNTERS(X) \
  X(sessions_attached_total, "sessions that attached") \
  X(sessions_lost_total, "sessions whose connection dropped without a detach") \
  X(ring_entries_total, "ring entries popped") \
  X(collectives_completed_total, "collectives completed on every rank") \
  X(collectives_failed_total, "collectives that failed") \
  X(collectives_in_flight, "collectives matched or waiting now") \
  X(copies_total, "copies the engine finished") \
  X(bytes_copied_total, "bytes the engine copied") \
  X(copy_engine_bytes_total, "bytes moved by DMA copy engines") \
  X(compute_unit_bytes_total, "bytes moved by compute units (GPU SMs/CUs) or host threads") \
  X(stream_ready_waits_total, "stream-ordered requests that waited for their caller's stream") \
  X(stream_ready_wait_us_total, "microseconds they waited in all (entry seen to ready flag)") \
  X(buffers_registered, "buffers registered now") \
  X(buffer_bytes_registered, "bytes of the buffers registered now")
// clang-format on

struct Stats {
#define IRIS_STATS_DECLARE(name, help) std::atomic<uint64_t> name{0};
  IRIS_STATS_COUNTERS(IRIS_STATS_DECLARE)
#undef IRIS_STATS_DECLARE
  std::array<std::atomic<uint64_t>, kErrorCodeCount> errors{};

  void count_error(ErrorCode code) {
    const auto i = static_cast<uint32_t>(code);
    if (i < errors.size()) errors[i].fetch_add(1, std::memory_order_relaxed);
  }
};

// The counters' names in declaration order, for code that walks them all.
inline constexpr const char* kStatsCounterNames[] = {
#define IRIS_STATS_NAME(name, help) #name,
    IRIS_STATS_COUNTERS(IRIS_STATS_NAME)
#undef IRIS_STATS_NAME
};

}  // namespace iris::daemon
