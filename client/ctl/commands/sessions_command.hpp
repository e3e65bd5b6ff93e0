#pragma once

#include "client/ctl/commands/command.hpp"

namespace iris::ctl {

// `iris-ctl sessions`: attached clients, with pid and uid as the kernel reported them.
class SessionsCommand final : public Command {
 public:
  std::string name() const override { return "sessions"; }
  std::string description() const override {
    return "attached clients: pid, uid, buffers, communicators";
  }
  bool needs_identity() const override { return true; }
  Report run(const client::ControlChannel& channel) const override;
};

}  // namespace iris::ctl
