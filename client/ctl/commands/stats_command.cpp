#include "client/ctl/commands/stats_command.hpp"

namespace iris::ctl {

Report StatsCommand::run(const client::ControlChannel& channel) const {
  const auto s = channel.call(&v1::Control::Stub::GetStats, v1::GetStatsRequest{}, "stats");
  Report report;
  auto& counters = report.fields("stats");
  counters.fields = {
      {"sessions_attached_total", s.sessions_attached_total()},
      {"sessions_lost_total", s.sessions_lost_total()},
      {"ring_entries_total", s.ring_entries_total()},
      {"collectives_completed_total", s.collectives_completed_total()},
      {"collectives_failed_total", s.collectives_failed_total()},
      {"collectives_in_flight", s.collectives_in_flight()},
      {"copies_total", s.copies_total()},
      {"bytes_copied_total", s.bytes_copied_total()},
      {"copy_engine_bytes_total", s.copy_engine_bytes_total()},
      {"compute_unit_bytes_total", s.sm_bytes_total()},
      {"stream_ready_waits_total", s.stream_ready_waits_total()},
      {"stream_ready_wait_us_total", s.stream_ready_wait_us_total()},
      {"buffers_registered", s.buffers_registered()},
      {"buffer_bytes_registered", s.buffer_bytes_registered()},
  };
  auto& errors = report.table("errors", {"code", "count"});
  for (const auto& e : s.errors()) errors.rows.push_back({e.code(), e.count()});
  return report;
}

}  // namespace iris::ctl
