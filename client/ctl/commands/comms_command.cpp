#include "client/ctl/commands/comms_command.hpp"

namespace iris::ctl {

namespace {
nlohmann::json ranks(const google::protobuf::RepeatedField<uint32_t>& field) {
  return nlohmann::json(std::vector<uint32_t>(field.begin(), field.end()));
}
}  // namespace

std::string describe_missing(const v1::InFlightCollective& f) {
  std::string missing;
  for (const auto& m : f.missing()) {
    if (!missing.empty()) missing += " ";
    missing +=
        std::to_string(m.rank()) + ": " +
        (m.session_id() == 0 ? std::string("not joined")
                             : std::to_string(m.session_id()) + "/" + std::to_string(m.pid()));
  }
  return missing;
}

Report CommsCommand::run(const client::ControlChannel& channel) const {
  const auto r = channel.call(&v1::Control::Stub::ListComms, v1::ListCommsRequest{}, "comms");
  Report report;
  auto& comms = report.table("communicators", {"comm", "key", "nranks", "joined", "uid", "state",
                                               "completed", "in_flight"});
  auto& in_flight =
      report.table("in_flight", {"comm", "key", "seq", "collective", "bytes", "waiting_s",
                                 "arrived", "waiting_on", "missing (rank: session/pid)"});
  for (const auto& c : r.comms()) {
    comms.rows.push_back({c.comm_id(), c.key(), c.nranks(), ranks(c.joined_ranks()), c.uid(),
                          c.broken() ? "broken" : "ok", c.completed(), c.in_flight_size()});
    for (const auto& f : c.in_flight())
      in_flight.rows.push_back({c.comm_id(), c.key(), f.seq(), f.collective(), f.bytes(),
                                f.waiting_seconds(), ranks(f.arrived_ranks()),
                                ranks(f.waiting_on_ranks()), describe_missing(f)});
  }
  return report;
}

}  // namespace iris::ctl
