// iris-ctl run as operators run it, its --json output parsed, for integration tests that read
// irisd's state the way a monitoring script would.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/support/client_helpers.hpp"
#include "tests/support/daemon_process.hpp"

namespace iris::testing {

// `iris-ctl --socket SOCKET ARGS... --json`, which must exit 0.
inline nlohmann::json ctl_json(const DaemonProcess& d, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {iris_ctl_path(), "--socket", d.socket()};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--json");
  const auto r = run_program(argv);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output);
}

// HOST:PORT of the daemon's /metrics, as `iris-ctl status` reports it.
inline std::string metrics_address(const DaemonProcess& d) {
  const std::string url = ctl_json(d, {"status"})["irisd"]["metrics"];
  // http://HOST:PORT/metrics
  return url.substr(7, url.size() - 7 - std::string("/metrics").size());
}

// Waits until `nranks` sessions are attached and have pushed more than 8 ring entries each on
// average: a job running, so that a restart finds every rank with a session to resume (a rank
// still attaching when irisd stops has none: it fails to attach, as it should). False past
// `limit`.
inline bool ranks_running(const DaemonProcess& d, std::size_t nranks,
                          std::chrono::milliseconds limit) {
  return eventually(
      [&] {
        const auto stats = ctl_json(d, {"stats"})["stats"];
        return uint64_t(stats["sessions"]) == nranks &&
               uint64_t(stats["ring_entries_total"]) > 8 * nranks;
      },
      limit);
}

}  // namespace iris::testing
