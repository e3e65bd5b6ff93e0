// One iris-ctl subcommand: asks irisd over the control channel and describes the answer as a
// Report, which main prints as text or JSON. Watching commands (stats --watch, top) print a
// Report per interval through the same printer.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/ctl/control_channel.hpp"
#include "client/ctl/report.hpp"

// CLI11 is costly to compile (about 11 s per file on 2 cores); only the commands with options
// of their own include it.
namespace CLI {
class App;
}

namespace iris::ctl {

class Command {
 public:
  virtual ~Command() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  // Whether irisd must know who asks (the session and communicator lists): main attaches as an
  // operator first and the channel carries the token.
  virtual bool needs_identity() const { return false; }
  // Options of its own, added to its subcommand.
  virtual void add_options(CLI::App& subcommand) {}
  virtual Report run(const client::ControlChannel& channel) const = 0;

  using Printer = std::function<void(const Report&)>;
  // What main calls: prints run()'s Report once and returns its exit status; watching commands
  // print many.
  virtual int execute(const client::ControlChannel& channel, const Printer& print) const {
    const Report report = run(channel);
    print(report);
    return report.exit_code;
  }
};

std::vector<std::unique_ptr<Command>> all_commands();

}  // namespace iris::ctl
