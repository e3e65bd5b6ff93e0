// Daemon-wide counters. Written by the progress thread, read by `GetStats` from gRPC threads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "iris/error_code.hpp"

namespace iris::daemon {

struct Stats {
  std::atomic<uint64_t> sessions_attached_total{0};
  std::atomic<uint64_t> sessions_lost_total{0};
  std::atomic<uint64_t> ring_entries_total{0};
  std::atomic<uint64_t> collectives_completed_total{0};
  std::atomic<uint64_t> collectives_failed_total{0};
  std::atomic<uint64_t> collectives_in_flight{0};
  std::atomic<uint64_t> copies_total{0};
  std::atomic<uint64_t> bytes_copied_total{0};
  std::atomic<uint64_t> copy_engine_bytes_total{0};
  std::atomic<uint64_t> compute_unit_bytes_total{0};
  // Stream-ordered all-gathers: how many waited for their caller's stream to reach them, and for
  // how long in all (from the ring entry being seen to its ready flag being seen).
  std::atomic<uint64_t> stream_ready_waits_total{0};
  std::atomic<uint64_t> stream_ready_wait_us_total{0};
  std::atomic<uint64_t> buffers_registered{0};
  std::atomic<uint64_t> buffer_bytes_registered{0};
  std::array<std::atomic<uint64_t>, kErrorCodeCount> errors{};

  void count_error(ErrorCode code) {
    const auto i = static_cast<uint32_t>(code);
    if (i < errors.size()) errors[i].fetch_add(1, std::memory_order_relaxed);
  }
};

}  // namespace iris::daemon
