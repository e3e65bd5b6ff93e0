#include "client/ctl/commands/sessions_command.hpp"

namespace iris::ctl {

Report SessionsCommand::run(const client::ControlChannel& channel) const {
  const auto r =
      channel.call(&v1::Control::Stub::ListSessions, v1::ListSessionsRequest{}, "sessions");
  Report report;
  auto& table = report.table(
      "sessions", {"session", "pid", "uid", "gid", "name", "buffers", "buffer_bytes", "comms",
                   "ranks (key:rank/nranks)", "submitted", "rejected", "attached_s"});
  for (const auto& s : r.sessions()) {
    std::string held;
    for (const auto& k : s.ranks()) {
      if (!held.empty()) held += " ";
      held += k.key() + ":" + std::to_string(k.rank()) + "/" + std::to_string(k.nranks());
    }
    table.rows.push_back({s.session_id(), s.pid(), s.uid(), s.gid(),
                          s.client_name().empty() ? "-" : s.client_name(), s.buffers(),
                          s.buffer_bytes(), s.communicators(), held.empty() ? "-" : held,
                          s.submitted(), s.client_rejections(), s.attached_seconds()});
  }
  auto& users = report.table("users", {"uid", "sessions", "max_sessions", "host_buffer_bytes",
                                       "max_host_buffer_bytes", "comm_bytes", "max_comm_bytes"});
  for (const auto& u : r.users())
    users.rows.push_back({u.uid(), u.sessions(), u.max_sessions(), u.host_buffer_bytes(),
                          u.max_host_buffer_bytes(), u.comm_bytes(), u.max_comm_bytes()});
  return report;
}

}  // namespace iris::ctl
