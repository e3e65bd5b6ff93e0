#include "daemon/operations/tenant_log.hpp"

#include <utility>

#include "daemon/operations/printable.hpp"

namespace iris::daemon {

namespace {
// Budgets of tenants that have gone quiet are forgotten once this many are kept.
constexpr std::size_t kRememberedTenants = 1024;

template <std::size_t... I>
std::array<LogLimiter, sizeof...(I)> kind_limiters(const TenantLogLimits& l,
                                                   std::index_sequence<I...>) {
  return {((void)I, LogLimiter(l.kind_lines_per_second, l.kind_burst))...};
}
}  // namespace

TenantLog::Budget::Budget(const TenantLogLimits& l)
    : kinds(kind_limiters(l, std::make_index_sequence<kTenantLogKinds>())),
      lines(l.lines_per_second, l.line_burst),
      bytes(l.bytes_per_second, l.byte_burst) {}

TenantLog::Budget& TenantLog::budget(uint64_t tenant) {
  if (budgets_.size() >= kRememberedTenants && budgets_.find(tenant) == budgets_.end()) {
    for (auto it = budgets_.begin(); it != budgets_.end();) {
      bool quiet = it->second.lines.idle() && it->second.bytes.idle();
      for (LogLimiter& k : it->second.kinds) quiet = quiet && k.idle();
      it = quiet ? budgets_.erase(it) : std::next(it);
    }
  }
  return budgets_.try_emplace(tenant, limits_).first->second;
}

bool TenantLog::may_write(uint64_t tenant, TenantLogKind kind) {
  std::lock_guard lock(mutex_);
  Budget& b = budget(tenant);
  LogLimiter& of_kind = b.kinds[static_cast<std::size_t>(kind)];
  if (of_kind.can() && b.lines.can()) return true;
  of_kind.count_suppressed();
  suppressed_total_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void TenantLog::write(spdlog::level::level_enum level, uint64_t tenant, TenantLogKind kind,
                      std::string_view message) {
  std::string line = printable(message, limits_.max_line_bytes);
  std::string note;
  {
    std::lock_guard lock(mutex_);
    Budget& b = budget(tenant);
    LogLimiter& of_kind = b.kinds[static_cast<std::size_t>(kind)];
    const double bytes = static_cast<double>(line.size());
    if (!of_kind.can() || !b.lines.can() || !b.bytes.can(bytes)) {
      of_kind.count_suppressed();  // counted under its kind, whichever budget refused it
      suppressed_total_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    of_kind.spend();
    b.lines.spend();
    b.bytes.spend(bytes);
    note = of_kind.take_suppressed_note();
  }
  spdlog::log(level, "{}{}", line, note);
}

}  // namespace iris::daemon
