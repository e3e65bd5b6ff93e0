#pragma once

#include "client/ctl/commands/command.hpp"
#include "client/ctl/watch.hpp"

namespace iris::ctl {

// `iris-ctl top`: what irisd does now, refreshed every interval on a terminal: health, rates of
// collectives and bytes by path and device, engine queues, sessions, and what each waiting
// collective waits on. Piped (or with --json) it prints one snapshot (rates over one interval)
// and exits, unless --count asks for more.
class TopCommand final : public Command {
 public:
  std::string name() const override { return "top"; }
  std::string description() const override {
    return "live view: rates by path and device, queues, sessions, waiting collectives";
  }
  bool needs_identity() const override { return true; }
  void add_options(CLI::App& subcommand) override;
  Report run(const client::ControlChannel& channel) const override;
  int execute(const client::ControlChannel& channel, const Printer& print) const override;

 private:
  WatchOptions watch_options_{1.0, 0};
  bool count_given_ = false;
};

}  // namespace iris::ctl
