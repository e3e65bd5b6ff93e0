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

}  // namespace iris::ctl
