#include "client/ctl/commands/comms_command.hpp"

namespace iris::ctl {

namespace {
nlohmann::json ranks(const google::protobuf::RepeatedField<uint32_t>& field) {
  return nlohmann::json(std::vector<uint32_t>(field.begin(), field.end()));
}
}  // namespace

Report CommsCommand::run(const client::ControlChannel& channel) const {
  const auto r = channel.call(&v1::Control::Stub::ListComms, v1::ListCommsRequest{}, "comms");
  Report report;
  auto& comms = report.table("communicators", {"comm", "key", "nranks", "joined", "uid", "state",
                                               "completed", "in_flight"});
  auto& in_flight = report.table(
      "in_flight", {"comm", "key", "seq", "collective", "bytes", "arrived", "waiting_on"});
  for (const auto& c : r.comms()) {
    comms.rows.push_back({c.comm_id(), c.key(), c.nranks(), ranks(c.joined_ranks()), c.uid(),
                          c.broken() ? "broken" : "ok", c.completed(), c.in_flight_size()});
    for (const auto& f : c.in_flight()) {
      in_flight.rows.push_back({c.comm_id(), c.key(), f.seq(), f.collective(), f.bytes(),
                                ranks(f.arrived_ranks()), ranks(f.waiting_on_ranks())});
    }
  }
  return report;
}

}  // namespace iris::ctl
