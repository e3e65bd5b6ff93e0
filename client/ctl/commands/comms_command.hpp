#pragma once

#include "client/ctl/commands/command.hpp"

namespace iris::ctl {

// `iris-ctl comms`: communicators, for each collective in flight the ranks it waits on, and the
// sends and receives waiting for their peer.
class CommsCommand final : public Command {
 public:
  std::string name() const override { return "comms"; }
  std::string description() const override {
    return "communicators, the ranks each in-flight collective waits on, and the sends and "
           "receives waiting for their peer";
  }
  bool needs_identity() const override { return true; }
  Report run(const client::ControlChannel& channel) const override;
};

// "1: 7/4242": a rank with the session and pid holding it ("not joined" when none).
std::string describe_rank(const v1::MissingRank& rank);
// "1: 7/4242 3: not joined": the ranks a collective waits on, with their session and pid.
std::string describe_missing(const v1::InFlightCollective& collective);
// "send 0->1": a waiting send or receive and its channel.
std::string describe_channel(const v1::WaitingPointToPoint& waiting);

}  // namespace iris::ctl
