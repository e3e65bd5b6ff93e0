#pragma once

#include "client/ctl/commands/command.hpp"

namespace iris::ctl {

inline constexpr int kExitUnhealthy = 2;

// `iris-ctl status`: health, version, uptime, engine and its devices. Exits 2 when irisd answers
// but is unhealthy (the liveness probe of the DaemonSet relies on it).
class StatusCommand final : public Command {
 public:
  std::string name() const override { return "status"; }
  std::string description() const override {
    return "health, daemon version, uptime, engine, devices and copy engines (exit 2: unhealthy)";
  }
  Report run(const client::ControlChannel& channel) const override;
};

// The report for one GetStatus answer (separate so that it can be tested without a daemon).
Report status_report(const v1::GetStatusResponse& status);

}  // namespace iris::ctl
