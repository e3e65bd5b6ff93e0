// iris-ctl run as operators run it, its --json output parsed, for integration tests that read
// irisd's state the way a monitoring script would.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

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

}  // namespace iris::testing
