#pragma once

#include "client/ctl/commands/command.hpp"
#include "client/ctl/watch.hpp"

namespace iris::ctl {

// `iris-ctl stats`: counters since the daemon started; `--watch` prints them again every
// interval with the rates since the last sample.
class StatsCommand final : public Command {
 public:
  std::string name() const override { return "stats"; }
  std::string description() const override {
    return "collectives, latency, copies, bytes (copy engine vs compute units) by device, "
           "engine bytes and time by class and user, and errors since start; --watch repeats "
           "with rates";
  }
  // Each user's engine rows are shown to that user (all of them to root and operators).
  bool needs_identity() const override { return true; }
  void add_options(CLI::App& subcommand) override;
  Report run(const client::ControlChannel& channel) const override;
  int execute(const client::ControlChannel& channel, const Printer& print) const override;

 private:
  bool watch_ = false;
  WatchOptions watch_options_;
};

// The report for one GetStats answer; with `before`, a rates section over `seconds`.
Report stats_report(const v1::GetStatsResponse& stats, const v1::GetStatsResponse* before = nullptr,
                    double seconds = 0);

}  // namespace iris::ctl
