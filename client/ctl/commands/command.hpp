// One iris-ctl subcommand: asks irisd over the control channel and describes the answer as a
// Report, which main prints as text or JSON.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "client/ctl/report.hpp"
#include "client/src/control_channel.hpp"

namespace iris::ctl {

class Command {
 public:
  virtual ~Command() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  // Whether irisd must know who asks (the session and communicator lists): main attaches as an
  // operator first and the channel carries the token.
  virtual bool needs_identity() const { return false; }
  virtual Report run(const client::ControlChannel& channel) const = 0;
};

std::vector<std::unique_ptr<Command>> all_commands();

}  // namespace iris::ctl
