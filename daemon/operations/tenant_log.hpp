// Log lines that a tenant's actions cause (attaches, refused handshakes, bad requests, failing
// collectives, messages from other nodes), limited per user and per kind of line, so that no
// reconnecting, re-attaching or new communicator buys a fresh budget: one user's attacks, in any
// mix, write at most 50 lines and 50 KiB a second after a burst. Every line is escaped and cut
// (client-supplied names and keys among it), and what was left out is counted: in the next line
// of that kind and in the log_lines_suppressed_total counter.
#pragma once

#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "daemon/log_limiter.hpp"

namespace iris::daemon {

enum class TenantLogKind : uint8_t {
  kAttach,        // attaches, refused attaches, session ends
  kConnection,    // attach connections misbehaving before or after a session exists
  kSession,       // a session's bad ring entries and requests
  kCommunicator,  // a communicator's joins and failing collectives
  kScaleOut,      // messages from other nodes
};
inline constexpr std::size_t kTenantLogKinds = 5;

struct TenantLogLimits {
  double kind_lines_per_second = 10;
  double kind_burst = 64;  // one uid's 64 sessions may attach at once and each say so
  double lines_per_second = 50;
  double line_burst = 100;
  double bytes_per_second = 50 << 10;
  double byte_burst = 100 << 10;
  std::size_t max_line_bytes = 1024;
};

class TenantLog {
 public:
  // Lines from other nodes' daemons (no uid on this node) are one tenant of their own.
  static constexpr uint64_t kOtherNodes = uint64_t{1} << 32;

  explicit TenantLog(std::atomic<uint64_t>& suppressed_total, TenantLogLimits limits = {})
      : suppressed_total_(suppressed_total), limits_(limits) {}

  template <typename... Args>
  void log(spdlog::level::level_enum level, uint64_t tenant, TenantLogKind kind,
           fmt::format_string<Args...> format, Args&&... args) {
    // A line its budgets refuse is counted, never formatted: a flood costs no allocations.
    if (!spdlog::should_log(level) || !may_write(tenant, kind)) return;
    write(level, tenant, kind, fmt::format(format, std::forward<Args>(args)...));
  }
  template <typename... Args>
  void warn(uint64_t tenant, TenantLogKind kind, fmt::format_string<Args...> format,
            Args&&... args) {
    log(spdlog::level::warn, tenant, kind, format, std::forward<Args>(args)...);
  }

  // False (and the line counted as suppressed) when the tenant's line budgets are spent; the
  // byte budget is checked by write(), once the line's length is known.
  bool may_write(uint64_t tenant, TenantLogKind kind);
  // Writes `message` (escaped and cut) when the tenant's budgets allow it.
  void write(spdlog::level::level_enum level, uint64_t tenant, TenantLogKind kind,
             std::string_view message);

 private:
  struct Budget {
    explicit Budget(const TenantLogLimits& l);
    std::array<LogLimiter, kTenantLogKinds> kinds;
    LogLimiter lines;
    LogLimiter bytes;
  };
  Budget& budget(uint64_t tenant);

  std::atomic<uint64_t>& suppressed_total_;
  const TenantLogLimits limits_;
  std::mutex mutex_;  // the attach thread and the progress thread both log
  std::unordered_map<uint64_t, Budget> budgets_;
};

}  // namespace iris::daemon
