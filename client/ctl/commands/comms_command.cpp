#include "client/ctl/commands/comms_command.hpp"

namespace iris::ctl {

namespace {
nlohmann::json ranks(const google::protobuf::RepeatedField<uint32_t>& field) {
  return nlohmann::json(std::vector<uint32_t>(field.begin(), field.end()));
}
}  // namespace

std::string describe_rank(const v1::MissingRank& m) {
  return std::to_string(m.rank()) + ": " +
         (m.session_id() == 0 ? std::string("not joined")
                              : std::to_string(m.session_id()) + "/" + std::to_string(m.pid()));
}

std::string describe_missing(const v1::InFlightCollective& f) {
  std::string missing;
  for (const auto& m : f.missing()) {
    if (!missing.empty()) missing += " ";
    missing += describe_rank(m);
  }
  return missing;
}

std::string describe_channel(const v1::WaitingPointToPoint& w) {
  return w.op() + " " + std::to_string(w.src()) + "->" + std::to_string(w.dst());
}

Report CommsCommand::run(const client::ControlChannel& channel) const {
  const auto r = channel.call(&v1::Control::Stub::ListComms, v1::ListCommsRequest{}, "comms");
  Report report;
  auto& comms = report.table("communicators", {"comm", "key", "nranks", "joined", "uid", "state",
                                               "completed", "in_flight", "class"});
  auto& in_flight =
      report.table("in_flight", {"comm", "key", "seq", "collective", "bytes", "waiting_s",
                                 "arrived", "waiting_on", "missing (rank: session/pid)"});
  auto& point_to_point = report.table(
      "point_to_point",
      {"comm", "key", "op", "src", "dst", "bytes", "waiting_s", "waits_on (rank: session/pid)"});
  for (const auto& c : r.comms()) {
    comms.rows.push_back({c.comm_id(), c.key(), c.nranks(), ranks(c.joined_ranks()), c.uid(),
                          c.broken() ? "broken" : "ok", c.completed(), c.in_flight_size(),
                          c.traffic_class()});
    for (const auto& f : c.in_flight())
      in_flight.rows.push_back({c.comm_id(), c.key(), f.seq(), f.collective(), f.bytes(),
                                f.waiting_seconds(), ranks(f.arrived_ranks()),
                                ranks(f.waiting_on_ranks()), describe_missing(f)});
    for (const auto& w : c.waiting_p2p())
      point_to_point.rows.push_back({c.comm_id(), c.key(), w.op(), w.src(), w.dst(), w.bytes(),
                                     w.waiting_seconds(), describe_rank(w.waits_on())});
  }
  return report;
}

}  // namespace iris::ctl
