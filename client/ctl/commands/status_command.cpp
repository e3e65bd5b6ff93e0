#include "client/ctl/commands/status_command.hpp"

namespace iris::ctl {

Report StatusCommand::run(const client::ControlChannel& channel) const {
  return status_report(
      channel.call(&v1::Control::Stub::GetStatus, v1::GetStatusRequest{}, "status"));
}

Report status_report(const v1::GetStatusResponse& s) {
  Report report;
  auto& daemon = report.fields("irisd");
  daemon.fields = {
      {"health", s.healthy() ? "SERVING" : "NOT_SERVING: " + s.health_reason()},
      {"version", s.version()},
      {"build", s.build()},
      {"protocol", s.protocol_version()},
      {"pid", s.pid()},
      {"socket", s.socket_path()},
      {"uptime_s", s.uptime_seconds()},
      {"engine", s.engine()},
      {"engine_reason", s.engine_reason()},
      {"driver", s.driver_version().empty() ? "-" : s.driver_version()},
      {"copy_method", s.copy_method().empty() ? "-" : s.copy_method()},
      {"runtime_library", s.runtime_library().empty() ? "-" : s.runtime_library()},
      {"sessions", s.sessions()},
      {"communicators", s.communicators()},
      {"sessions_resumed", s.sessions_resumed()},
      {"resume_window_ms", s.resume_window_ms()},
      {"metrics",
       s.metrics_address().empty() ? "off" : "http://" + s.metrics_address() + "/metrics"},
      {"meeting_point", s.meeting_address().empty() ? "off" : s.meeting_address()},
  };
  if (!s.healthy()) report.exit_code = kExitUnhealthy;
  auto& devices = report.table("devices", {"device", "bus_id", "memory", "copy_engines", "peers"});
  for (const auto& d : s.devices()) {
    nlohmann::json engines = nlohmann::json::array();
    for (const auto& e : d.engines()) engines.push_back(e.name());
    nlohmann::json peers = nlohmann::json::array();
    for (const auto& p : d.peer_bus_ids()) peers.push_back(p);
    devices.rows.push_back({d.name(), d.bus_id().empty() ? "-" : d.bus_id(),
                            d.memory_bytes() == 0 ? "-" : human_bytes(d.memory_bytes()), engines,
                            peers});
  }
  // Engines per direction (hsa engine): which SDMA engines serve each peer and host memory.
  bool any_links = false;
  for (const auto& d : s.devices()) any_links = any_links || d.links_size() > 0;
  if (any_links) {
    auto& links = report.table("links", {"device", "to", "link", "engines"});
    for (const auto& d : s.devices()) {
      for (const auto& l : d.links()) {
        nlohmann::json engines = nlohmann::json::array();
        for (uint32_t e : l.engines()) engines.push_back(e);
        links.rows.push_back({d.bus_id(), l.bus_id(), l.type(), engines});
      }
    }
  }
  return report;
}

}  // namespace iris::ctl
