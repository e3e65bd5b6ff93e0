// irisd as operators run it: scraped by a real Prometheus server, watched by a systemd-style
// notify socket, reloaded with SIGHUP, logging JSON, and observed with iris-ctl top / stats
// --watch / status.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "iris/iris.hpp"
#include "iris/shared/unix_socket.hpp"
#include "tests/support/client_helpers.hpp"
#include "tests/support/ctl_json.hpp"
#include "tests/support/daemon_process.hpp"
#include "tests/support/http_get.hpp"

namespace iris::testing {
namespace {

using namespace std::chrono_literals;

std::string find_program(const std::string& name) {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    const std::string path = std::string(dir) + "/" + name;
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return {};
}

TEST(Metrics, ServedInPrometheusTextFormatFromTheSameCountersAsStats) {
  DaemonProcess daemon({"--metrics-address", "127.0.0.1:0"});
  ASSERT_EQ(run_ranks(daemon, 2, {"--key", "m", "--iterations", "20", "--max-bytes", "65536"}),
            (std::vector<int>{0, 0}));
  const auto page = http_get(metrics_address(daemon), "/metrics");
  ASSERT_EQ(page.status, 200) << page.body;
  const auto stats = ctl_json(daemon, {"stats"});
  const uint64_t completed = stats["stats"]["collectives_completed_total"];
  EXPECT_EQ(completed, 20u);
  EXPECT_NE(page.body.find("iris_collectives_total{op=\"all_gather\",outcome=\"completed\"} " +
                           std::to_string(completed)),
            std::string::npos)
      << page.body;
  EXPECT_NE(page.body.find("iris_copied_bytes_total{device=\"host\",path=\"compute_units\"} " +
                           std::to_string(uint64_t(stats["stats"]["compute_unit_bytes_total"]))),
            std::string::npos)
      << page.body;
  EXPECT_NE(page.body.find("# TYPE iris_collective_latency_seconds histogram"), std::string::npos);
  EXPECT_NE(page.body.find("iris_healthy 1"), std::string::npos);
  EXPECT_EQ(http_get(metrics_address(daemon), "/nothing-here").status, 404);
}

TEST(Metrics, ARealPrometheusScrapesIrisd) {
  const std::string prometheus = find_program("prometheus");
  if (prometheus.empty())
    GTEST_SKIP() << "Prometheus is not installed (Debian package 'prometheus'; "
                    "scripts/install-deps.sh installs it)";
  DaemonProcess daemon({"--metrics-address", "127.0.0.1:0"});
  const std::string target = metrics_address(daemon);
  const std::string dir = daemon.directory() + "/prometheus";
  std::filesystem::create_directories(dir);
  {
    std::ofstream config(dir + "/prometheus.yml");
    config << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
           << "scrape_configs:\n"
           << "  - job_name: irisd\n"
           << "    static_configs: [{targets: ['" << target << "']}]\n";
  }
  const std::string web = "127.0.0.1:" + std::to_string(free_loopback_port());
  const pid_t server = spawn({prometheus, "--config.file=" + dir + "/prometheus.yml",
                              "--storage.tsdb.path=" + dir + "/data", "--web.listen-address=" + web,
                              "--log.level=warn"});
  struct Stop {
    pid_t pid;
    ~Stop() {
      ::kill(pid, SIGTERM);
      wait_for(pid);
    }
  } stop{server};

  ASSERT_EQ(run_ranks(daemon, 3,
                      {"--key", "p", "--iterations", "30", "--max-bytes", "4096", "--collective",
                       "all_to_all"}),
            (std::vector<int>{0, 0, 0}));
  const std::string query =
      "/api/v1/query?query=sum(iris_collectives_total%7Bop%3D%22all_to_all%22%2Coutcome%3D%22"
      "completed%22%7D)";
  std::string last;
  const bool seen = eventually(
      [&] {
        const auto r = http_get(web, query);
        last = r.body;
        if (r.status != 200) return false;
        const auto doc = nlohmann::json::parse(r.body, nullptr, false);
        if (doc.is_discarded() || doc["data"]["result"].empty()) return false;
        return doc["data"]["result"][0]["value"][1] == "30";
      },
      60s);
  EXPECT_TRUE(seen) << "Prometheus never saw the 30 all-to-alls; last answer: " << last;
  const auto up = http_get(web, "/api/v1/query?query=up%7Bjob%3D%22irisd%22%7D");
  EXPECT_NE(up.body.find("\"1\""), std::string::npos) << up.body;
}

// Receives what irisd sends to $NOTIFY_SOCKET, as systemd would.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = net::Fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
      throw std::runtime_error("bind " + path);
    timeval timeout{0, 200000};
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }
  // The messages received until `enough` holds for them (or, a bound against hanging, 30 s).
  std::vector<std::string> receive_until(
      const std::function<bool(const std::vector<std::string>&)>& enough) {
    std::vector<std::string> messages;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!enough(messages) && std::chrono::steady_clock::now() < deadline) {
      char buf[4096];
      const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
      if (n > 0) messages.emplace_back(buf, n);
    }
    return messages;
  }

 private:
  std::string path_;
  net::Fd fd_;
};

TEST(Systemd, ReadyThenWatchdogPingsWithStatusThenStopping) {
  const std::string path = "/tmp/irisd-notify-" + std::to_string(::getpid());
  ::unlink(path.c_str());
  NotifySocket notify(path);
  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  ::setenv("WATCHDOG_USEC", "400000", 1);  // pings every 200 ms
  DaemonProcess daemon;
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("WATCHDOG_USEC");
  ClientOptions o;
  o.socket_path = daemon.socket();
  auto client = Client::connect(o);
  auto pings = [](const std::vector<std::string>& messages) {
    return std::count_if(messages.begin(), messages.end(),
                         [](const std::string& m) { return m.starts_with("WATCHDOG=1\n"); });
  };
  auto status_with_session = [](const std::vector<std::string>& messages) {
    return std::any_of(messages.begin(), messages.end(), [](const std::string& m) {
      return m.find("STATUS=engine host, 1 sessions, 0 communicators") != std::string::npos;
    });
  };
  const auto messages = notify.receive_until(
      [&](const std::vector<std::string>& m) { return pings(m) >= 5 && status_with_session(m); });
  ASSERT_FALSE(messages.empty());
  EXPECT_TRUE(messages[0].starts_with("READY=1\nSTATUS=engine host")) << messages[0];
  EXPECT_GE(pings(messages), 5) << "watchdog pings";
  EXPECT_TRUE(status_with_session(messages)) << messages.back();
  EXPECT_EQ(daemon.stop(), 0);
  const auto last = notify.receive_until([](const std::vector<std::string>& m) {
    return !m.empty() && m.back().starts_with("STOPPING=1");
  });
  ASSERT_FALSE(last.empty());
  EXPECT_TRUE(last.back().starts_with("STOPPING=1")) << last.back();
  ::unlink(path.c_str());
}

TEST(Reload, SighupRereadsTheLogLevelAndKeepsItOnABadConfig) {
  char tmpl[] = "/tmp/irisd-reload-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string config = std::string(tmpl) + "/irisd.toml";
  std::ofstream(config) << "log-level = \"info\"\n";
  // Level from the file alone: a --log-level flag would win over it.
  DaemonProcess daemon({"--config", config});
  std::ofstream(config) << "log-level = \"trace\"\n";
  ::kill(daemon.pid(), SIGHUP);
  EXPECT_TRUE(eventually([&] {
    return daemon.log().find("SIGHUP: log level info -> trace") != std::string::npos;
  })) << daemon.log();
  std::ofstream(config) << "log-level = \"loud\"\n";
  ::kill(daemon.pid(), SIGHUP);
  EXPECT_TRUE(eventually([&] {
    return daemon.log().find("the configuration does not parse") != std::string::npos;
  })) << daemon.log();
  EXPECT_EQ(run_program({iris_ctl_path(), "--socket", daemon.socket(), "status"}).exit_code, 0);
  EXPECT_EQ(daemon.stop(), 0);
  std::filesystem::remove_all(tmpl);
}

TEST(JsonLogs, EveryLineIsAJsonObject) {
  DaemonProcess daemon({"--log-format", "json"});
  ASSERT_EQ(run_ranks(daemon, 2, {"--key", "j\"son", "--iterations", "3", "--max-bytes", "1024"}),
            (std::vector<int>{0, 0}));
  EXPECT_EQ(daemon.stop(), 0);
  std::istringstream lines(daemon.log());
  int parsed = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto doc = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << "not JSON: " << line;
    EXPECT_TRUE(doc.contains("time") && doc.contains("level") && doc.contains("msg")) << line;
    ++parsed;
  }
  EXPECT_GT(parsed, 5);
}

TEST(IrisCtlLive, TopShowsSessionsRatesAndWhatAWaitingCollectiveWaitsOn) {
  DaemonProcess daemon;
  TwoRanks t(daemon, "top", 4096);
  for (int i = 0; i < 10; ++i) {
    auto r1 = t.ca.all_gather(t.sa.data(), t.ra.data(), 4096);
    auto r2 = t.cb.all_gather(t.sb.data(), t.rb.data(), 4096);
    r1.wait();
    r2.wait();
  }
  auto pending = t.ca.all_gather(t.sa.data(), t.ra.data(), 4096);  // rank 1 never comes
  // Piped: one snapshot over one interval, then exit.
  const auto top = ctl_json(daemon, {"top", "--interval", "0.2"});
  EXPECT_EQ(top["irisd"]["health"], "SERVING");
  EXPECT_EQ(top["irisd"]["sessions"], 2);
  EXPECT_EQ(top["irisd"]["collectives_in_flight"], 1);
  ASSERT_EQ(top["sessions"].size(), 2u);
  EXPECT_EQ(top["sessions"][0]["name"], "top-a");
  ASSERT_EQ(top["waiting"].size(), 1u);
  EXPECT_EQ(top["waiting"][0]["key"], "top");
  EXPECT_NE(top["waiting"][0]["waits_on (rank: session/pid)"].get<std::string>().find(
                "1: " + std::to_string(t.b.session_id()) + "/" + std::to_string(::getpid())),
            std::string::npos)
      << top.dump();
  const auto text =
      run_program({iris_ctl_path(), "--socket", daemon.socket(), "top", "--interval", "0.1"});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_EQ(text.output.find("\x1b["), std::string::npos) << "escape codes in piped output";
  EXPECT_NE(text.output.find("waiting"), std::string::npos) << text.output;
}

TEST(IrisCtlLive, StatsWatchPrintsASamplePerIntervalWithRates) {
  DaemonProcess daemon;
  const auto r = run_program({iris_ctl_path(), "--socket", daemon.socket(), "stats", "--watch",
                              "--interval", "0.2", "--count", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Three JSON documents, one after the other; rates from the second on.
  std::vector<nlohmann::json> docs;
  std::istringstream in(r.output);
  while (in >> std::ws && in.peek() != EOF) {
    nlohmann::json doc;
    in >> doc;
    docs.push_back(doc);
  }
  ASSERT_EQ(docs.size(), 3u) << r.output;
  EXPECT_FALSE(docs[0].contains("rates"));
  EXPECT_TRUE(docs[1]["rates"].contains("collectives_completed_per_s"));
  EXPECT_GT(double(docs[2]["rates"]["interval_s"]), 0.0);
}

TEST(IrisCtlLive, StatusSaysHealthAndWhereMetricsAre) {
  DaemonProcess daemon({"--metrics-address", "127.0.0.1:0"});
  const auto status = ctl_json(daemon, {"status"});
  EXPECT_EQ(status["irisd"]["health"], "SERVING");
  EXPECT_TRUE(std::string(status["irisd"]["metrics"]).starts_with("http://127.0.0.1:"));
  DaemonProcess without;
  EXPECT_EQ(ctl_json(without, {"status"})["irisd"]["metrics"], "off");
}

TEST(Metrics, AnAddressInUseIsAClearStartError) {
  const int port = free_loopback_port();
  DaemonProcess first({"--metrics-address", "127.0.0.1:" + std::to_string(port)});
  try {
    DaemonProcess second({"--metrics-address", "127.0.0.1:" + std::to_string(port)});
    FAIL() << "a second irisd served metrics on a taken port";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(
        std::string(e.what()).find("cannot serve metrics on 127.0.0.1:" + std::to_string(port)),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace iris::testing
