#pragma once

#include "client/ctl/commands/command.hpp"

namespace iris::ctl {

// `iris-ctl status`: version, uptime, engine and its devices.
class StatusCommand final : public Command {
 public:
  std::string name() const override { return "status"; }
  std::string description() const override {
    return "daemon version, uptime, engine, devices and copy engines";
  }
  Report run(const client::ControlChannel& channel) const override;
};

// The report for one GetStatus answer (separate so that it can be tested without a daemon).
Report status_report(const v1::GetStatusResponse& status);

}  // namespace iris::ctl
