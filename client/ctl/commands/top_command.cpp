#include "client/ctl/commands/top_command.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <map>
#include <thread>

#include "client/ctl/commands/comms_command.hpp"
#include "client/ctl/stats_rates.hpp"

namespace iris::ctl {

namespace {

struct Sample {
  v1::GetStatusResponse status;
  v1::GetStatsResponse stats;
  v1::ListSessionsResponse sessions;
  v1::ListCommsResponse comms;
  std::chrono::steady_clock::time_point at;
};

Sample take_sample(const client::ControlChannel& channel) {
  Sample s;
  s.status = channel.call(&v1::Control::Stub::GetStatus, v1::GetStatusRequest{}, "status");
  s.stats = channel.call(&v1::Control::Stub::GetStats, v1::GetStatsRequest{}, "stats");
  s.sessions =
      channel.call(&v1::Control::Stub::ListSessions, v1::ListSessionsRequest{}, "sessions");
  s.comms = channel.call(&v1::Control::Stub::ListComms, v1::ListCommsRequest{}, "comms");
  s.at = std::chrono::steady_clock::now();
  return s;
}

std::string per_second_bytes(double bytes_per_s) {
  return human_bytes(static_cast<uint64_t>(bytes_per_s)) + "/s";
}

Report top_report(const Sample& before, const Sample& now) {
  const double seconds = std::chrono::duration<double>(now.at - before.at).count();
  Report report;
  double collectives_per_s = 0, copy_engine_per_s = 0, compute_units_per_s = 0;
  for (const Rate& r : counter_rates(before.stats, now.stats, seconds)) {
    if (r.name == "collectives_completed_per_s") collectives_per_s = r.per_second;
    if (r.name == "copy_engine_bytes_per_s") copy_engine_per_s = r.per_second;
    if (r.name == "compute_unit_bytes_per_s") compute_units_per_s = r.per_second;
  }
  auto& head = report.fields("irisd");
  head.fields = {
      {"health", now.status.healthy() ? "SERVING" : "NOT_SERVING: " + now.status.health_reason()},
      {"version", now.status.version()},
      {"engine", now.status.engine()},
      {"uptime_s", now.status.uptime_seconds()},
      {"interval_s", seconds},
      {"sessions", now.stats.sessions()},
      {"communicators", now.stats.communicators()},
      {"collectives_in_flight", now.stats.collectives_in_flight()},
      {"collectives_per_s", collectives_per_s},
      {"copy_engine", per_second_bytes(copy_engine_per_s)},
      {"compute_units", per_second_bytes(compute_units_per_s)},
  };
  auto& devices = report.table("devices", {"device", "copy_engine", "compute_units", "queue"});
  for (const DeviceRate& d : device_rates(before.stats, now.stats, seconds))
    devices.rows.push_back({d.device, per_second_bytes(d.copy_engine_bytes_per_s),
                            per_second_bytes(d.compute_unit_bytes_per_s), d.copies_in_flight});
  auto& users = report.table("engine_users", {"user", "engine", "engine_busy"});
  for (const UserRate& u : user_rates(before.stats, now.stats, seconds))
    users.rows.push_back({u.user, per_second_bytes(u.engine_bytes_per_s), u.engine_busy});

  std::map<uint64_t, uint64_t> submitted_before;
  for (const auto& s : before.sessions.sessions()) submitted_before[s.session_id()] = s.submitted();
  auto& sessions =
      report.table("sessions", {"session", "pid", "uid", "name", "comms", "requests_per_s"});
  for (const auto& s : now.sessions.sessions()) {
    const auto it = submitted_before.find(s.session_id());
    const uint64_t was = it == submitted_before.end() ? 0 : it->second;
    sessions.rows.push_back({s.session_id(), s.pid(), s.uid(),
                             s.client_name().empty() ? "-" : s.client_name(), s.communicators(),
                             seconds > 0 && s.submitted() >= was
                                 ? static_cast<double>(s.submitted() - was) / seconds
                                 : 0.0});
  }
  auto& waiting = report.table("waiting", {"key", "seq", "collective", "bytes", "waiting_s",
                                           "waits_on (rank: session/pid)"});
  for (const auto& c : now.comms.comms()) {
    for (const auto& f : c.in_flight())
      waiting.rows.push_back(
          {c.key(), f.seq(), f.collective(), f.bytes(), f.waiting_seconds(), describe_missing(f)});
    for (const auto& w : c.waiting_p2p())  // sends and receives carry no sequence number
      waiting.rows.push_back({c.key(), "-", describe_channel(w), w.bytes(), w.waiting_seconds(),
                              describe_rank(w.waits_on())});
  }
  if (!now.status.healthy()) report.exit_code = 2;
  return report;
}

}  // namespace

void TopCommand::add_options(CLI::App& sub) {
  sub.add_option("--interval", watch_options_.interval_s, "seconds between refreshes")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  sub.add_option("--count", watch_options_.count,
                 "refreshes, then exit (default: until Ctrl-C on a terminal, 1 when piped)")
      ->each([this](const std::string&) { count_given_ = true; });
}

Report TopCommand::run(const client::ControlChannel& channel) const {
  const Sample before = take_sample(channel);
  std::this_thread::sleep_for(std::chrono::duration<double>(watch_options_.interval_s));
  return top_report(before, take_sample(channel));
}

int TopCommand::execute(const client::ControlChannel& channel, const Printer& print) const {
  // Redraw in place only for a person at a terminal; a pipe or a log gets plain snapshots.
  const bool redraw = ::isatty(STDOUT_FILENO) == 1;
  const uint32_t refreshes = count_given_ ? watch_options_.count : (redraw ? 0 : 1);
  WatchOptions options = watch_options_;
  options.count = refreshes == 0 ? 0 : refreshes + 1;  // the first sample only starts the rates
  Sample last;
  int exit_code = 0;
  watch(options, [&](uint32_t index) {
    Sample now = take_sample(channel);
    if (index > 0) {
      const Report report = top_report(last, now);
      if (redraw) std::cout << "\x1b[H\x1b[2J";
      print(report);
      std::cout.flush();
      exit_code = report.exit_code;
    }
    last = std::move(now);
    return true;
  });
  return exit_code;
}

}  // namespace iris::ctl
