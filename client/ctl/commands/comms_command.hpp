#pragma once

#include "client/ctl/commands/command.hpp"

namespace iris::ctl {

// `iris-ctl comms`: communicators, and for each collective in flight the ranks it waits on.
class CommsCommand final : public Command {
 public:
  std::string name() const override { return "comms"; }
  std::string description() const override {
    return "communicators and the ranks each in-flight collective waits on";
  }
  bool needs_identity() const override { return true; }
  Report run(const client::ControlChannel& channel) const override;
};

// "1: 7/4242 3: not joined": the ranks a collective waits on, with their session and pid.
std::string describe_missing(const v1::InFlightCollective& collective);

}  // namespace iris::ctl
