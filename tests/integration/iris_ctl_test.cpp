// iris-ctl against a real irisd: each subcommand's JSON reflects the daemon's state, and the
// text form is a readable table.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "iris/iris.hpp"
#include "tests/support/daemon_process.hpp"

namespace iris::testing {
namespace {

using namespace std::chrono_literals;

nlohmann::json ctl_json(const DaemonProcess& d, const std::string& command) {
  const auto r = run_program({iris_ctl_path(), "--socket", d.socket(), command, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output);
}

TEST(IrisCtl, ReportsSessionsCommsStatusAndStats) {
  DaemonProcess daemon;
  ClientOptions o;
  o.socket_path = daemon.socket();
  o.client_name = "ctl-test";
  auto a = Client::connect(o);
  auto b = Client::connect(o);
  auto ca = Communicator::init(a, "ctl", 3, 0);
  auto cb = Communicator::init(b, "ctl", 3, 2);
  auto sa = a.allocate(1024), ra = a.allocate(3072);
  auto sb = b.allocate(1024), rb = b.allocate(3072);
  auto r1 = ca.all_gather(sa.data(), ra.data(), 1024);
  auto r2 = cb.all_gather(sb.data(), rb.data(), 1024);  // rank 1 never joins: stays in flight

  const auto status = ctl_json(daemon, "status");
  EXPECT_EQ(status["irisd"]["engine"], "host");
  EXPECT_EQ(status["irisd"]["sessions"], 2);
  EXPECT_EQ(status["irisd"]["communicators"], 1);
  EXPECT_EQ(status["devices"].size(), 1u);

  const auto sessions = ctl_json(daemon, "sessions");
  ASSERT_EQ(sessions["sessions"].size(), 2u);
  EXPECT_EQ(sessions["sessions"][0]["name"], "ctl-test");
  EXPECT_EQ(sessions["sessions"][0]["buffers"], 2);

  const auto comms = ctl_json(daemon, "comms");
  ASSERT_EQ(comms["communicators"].size(), 1u);
  EXPECT_EQ(comms["communicators"][0]["joined"], nlohmann::json::array({0, 2}));
  ASSERT_EQ(comms["in_flight"].size(), 1u);
  EXPECT_EQ(comms["in_flight"][0]["seq"], 1);
  EXPECT_EQ(comms["in_flight"][0]["waiting_on"], nlohmann::json::array({1}));

  const auto stats = ctl_json(daemon, "stats");
  EXPECT_EQ(stats["stats"]["collectives_in_flight"], 1);
  EXPECT_EQ(stats["stats"]["registered_buffers"], 4);
  EXPECT_EQ(stats["stats"]["ring_entries_total"], 2);

  const auto text = run_program({iris_ctl_path(), "--socket", daemon.socket(), "comms"});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.output.find("waiting_on"), std::string::npos) << text.output;
}

TEST(IrisCtl, SaysClearlyWhenTheDaemonIsNotRunning) {
  const auto r = run_program({iris_ctl_path(), "--socket", "/tmp/no-such-irisd.sock", "status"});
  EXPECT_EQ(r.exit_code, 69);
}

}  // namespace
}  // namespace iris::testing
