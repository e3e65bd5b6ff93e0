#pragma once

#include "client/ctl/commands/command.hpp"

namespace iris::ctl {

// `iris-ctl stats`: counters since the daemon started.
class StatsCommand final : public Command {
 public:
  std::string name() const override { return "stats"; }
  std::string description() const override {
    return "collectives, copies, bytes (copy engine vs compute units) and errors since start";
  }
  Report run(const client::ControlChannel& channel) const override;
};

}  // namespace iris::ctl
