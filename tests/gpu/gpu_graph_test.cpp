// Collectives captured into CUDA graphs on the GPU, through a real irisd with the cuda engine:
// producer kernel -> collective -> checking kernel captured once and replayed with new data each
// time (a replay counter the graph advances), mismatches counted on the GPU; graphs destroyed and
// captured again with irisd's plans and memory back to baseline; a rank killed between replays
// failing the others' next replay instead of hanging it. Without an NVIDIA GPU each test skips.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "iris/error_code.hpp"
#include "tests/gpu/gpu_test.hpp"

namespace iris::testing {
namespace {

class GpuGraph : public GpuTest {
 protected:
  nlohmann::json stats() {
    const auto r = run_program({iris_ctl_path(), "--socket", daemon->socket(), "stats", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output)["stats"];
  }
  // irisd's stats once no graph plan is held any more (releases run on CUDA's own thread after
  // the graphs are destroyed), or after 30 s.
  nlohmann::json stats_once_plans_released() {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    nlohmann::json s = stats();
    while (s["graph_plans"] != 0 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      s = stats();
    }
    return s;
  }
  // irisd's resident memory, from /proc.
  uint64_t daemon_rss_kib() {
    std::ifstream status("/proc/" + std::to_string(daemon->pid()) + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
    return 0;
  }
};

struct Shape {
  std::string collective;
  uint32_t nranks;
};

class GpuGraphReplays : public GpuGraph, public ::testing::WithParamInterface<Shape> {};

TEST_P(GpuGraphReplays, AThousandReplaysMoveEveryReplaysDataWithNoMismatch) {
  const Shape& s = GetParam();
  expect_ok(run_ranks(s.nranks,
                      {"--graph", "--collective", s.collective, "--key", "graph-" + s.collective,
                       "--iterations", "1000", "--max-bytes", "65537"}));
  // A rank's send and its receive are a plan each.
  const int plans_per_rank = s.collective == "send_recv" ? 2 : 1;
  EXPECT_EQ(stats()["graph_replays_total"], 1000 * s.nranks * plans_per_rank);
  EXPECT_EQ(stats()["graph_plans"], 0) << "plans outlived their ranks";
}

INSTANTIATE_TEST_SUITE_P(Graphs, GpuGraphReplays,
                         ::testing::Values(Shape{"all_gather", 2}, Shape{"all_gather", 3},
                                           Shape{"all_gather", 8}, Shape{"all_to_all", 2},
                                           Shape{"all_to_all", 3}, Shape{"all_to_all", 8},
                                           Shape{"send_recv", 2}, Shape{"send_recv", 3}),
                         [](const auto& info) {
                           return info.param.collective + "_" + std::to_string(info.param.nranks) +
                                  "ranks";
                         });

TEST_F(GpuGraph, GraphsDestroyedAndCapturedAgainLeaveNoPlanOrMemoryBehind) {
  const std::string dir = daemon->directory() + "/pauses";
  std::filesystem::create_directories(dir);
  constexpr uint32_t kRanks = 2, kRound = 50;
  std::vector<pid_t> pids;
  for (uint32_t r = 0; r < kRanks; ++r)
    pids.push_back(spawn({gpu_rank_program_path(),
                          "--socket",
                          daemon->socket(),
                          "--nranks",
                          std::to_string(kRanks),
                          "--rank",
                          std::to_string(r),
                          "--seed",
                          std::to_string(seed),
                          "--graph",
                          "--key",
                          "churn",
                          "--iterations",
                          "3",
                          "--max-bytes",
                          "4096",
                          "--graphs",
                          std::to_string(2 * kRound),
                          "--pause-every",
                          std::to_string(kRound),
                          "--pause-dir",
                          dir}));
  auto wait_paused = [&](uint32_t point) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    for (;;) {
      uint32_t there = 0;
      for (uint32_t r = 0; r < kRanks; ++r)
        there += std::filesystem::exists(dir + "/paused-" + std::to_string(point) + "-" +
                                         std::to_string(r));
      if (there == kRanks) return true;
      if (std::chrono::steady_clock::now() > give_up) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  // After 50 graphs each: the plans are gone with their graphs (the ranks still run).
  ASSERT_TRUE(wait_paused(1)) << daemon->log();
  auto first = stats_once_plans_released();
  EXPECT_EQ(first["graph_plans"], 0);
  EXPECT_EQ(first["graph_replays_total"], kRound * 3 * kRanks);
  EXPECT_EQ(first["sessions"], kRanks);
  const uint64_t rss_after_first = daemon_rss_kib();
  std::ofstream(dir + "/resume-1").flush();
  // After 50 more: still none held, and irisd's memory did not grow with them.
  ASSERT_TRUE(wait_paused(2)) << daemon->log();
  auto second = stats_once_plans_released();
  EXPECT_EQ(second["graph_plans"], 0);
  EXPECT_EQ(second["graph_replays_total"], 2 * kRound * 3 * kRanks);
  const uint64_t rss_after_second = daemon_rss_kib();
  EXPECT_LT(rss_after_second, rss_after_first + 2048)
      << "irisd grew by " << (rss_after_second - rss_after_first) << " KiB over 50 graphs";
  std::ofstream(dir + "/resume-2").flush();
  for (pid_t p : pids) EXPECT_EQ(wait_for(p), 0) << daemon->log();
}

// irisd SIGKILLed while a rank's streams wait on it (a stream-ordered all-gather, graph
// replays), the rank not waiting for it to come back (resume window 0): libiris lets the streams
// go on, and its calls report daemon_gone.
TEST_F(GpuGraph, StreamsWaitingOnIrisdGoOnWhenItDies) {
  char dir_template[] = "/tmp/iris-gpu-outlive-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  const pid_t rank = spawn({gpu_rank_program_path(), "--socket", daemon->socket(), "--nranks", "2",
                            "--rank", "0", "--seed", std::to_string(seed), "--key", "outlive",
                            "--outlive-daemon", "--pause-dir", dir, "--resume-window-ms", "0"});
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(dir + "/paused-1-0") &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  daemon->kill();
  std::ofstream(dir + "/resume-1").flush();
  EXPECT_EQ(wait_for(rank), 0);
  std::filesystem::remove_all(dir);
}

TEST_F(GpuGraph, ARankKilledBetweenReplaysFailsTheOthersNextReplayInsteadOfHangingIt) {
  std::vector<pid_t> pids;
  for (uint32_t r = 0; r < 3; ++r) {
    std::vector<std::string> argv = {
        gpu_rank_program_path(), "--socket", daemon->socket(),     "--nranks", "3",     "--rank",
        std::to_string(r),       "--seed",   std::to_string(seed), "--graph",  "--key", "die",
        "--iterations",          "200",      "--max-bytes",        "8192"};
    if (r == 1) {
      argv.push_back("--die-after");
      argv.push_back("50");
    }
    pids.push_back(spawn(argv));
  }
  const auto started = std::chrono::steady_clock::now();
  const int survivor0 = wait_for(pids[0]);
  const int killed = wait_for(pids[1]);
  const int survivor2 = wait_for(pids[2]);
  EXPECT_EQ(killed, 128 + SIGKILL);
  // The survivors ran all their replays (none hung) and check_graphs reported peer_lost.
  const int peer_lost = 10 + static_cast<int>(ErrorCode::kPeerLost);
  EXPECT_EQ(survivor0, peer_lost) << daemon->log();
  EXPECT_EQ(survivor2, peer_lost) << daemon->log();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(60));
}

// irisd killed and started again 5 times (SIGKILL, and SIGTERM as an upgrade does) under three
// 2-rank jobs on the GPU: host-blocking all-gathers of GPU memory, stream-ordered ones (producer
// and checking kernels on the stream, no host synchronisation), and replays of a captured
// all-gather whose data the graph itself makes. Each checks every byte; each must finish.
TEST_F(GpuGraph, JobsOnTheGpuComeThroughRestartsOfIrisd) {
  std::vector<pid_t> pids;
  auto start_job = [&](const std::string& key, const std::vector<std::string>& args) {
    for (uint32_t r = 0; r < 2; ++r) {
      std::vector<std::string> argv = {
          gpu_rank_program_path(), "--socket", daemon->socket(),     "--nranks", "2", "--rank",
          std::to_string(r),       "--seed",   std::to_string(seed), "--key",    key};
      argv.insert(argv.end(), args.begin(), args.end());
      pids.push_back(spawn(argv));
    }
  };
  start_job("resume-blocking", {"--iterations", "4000", "--max-bytes", "262144"});
  start_job("resume-stream", {"--stream", "--iterations", "4000", "--max-bytes", "262144"});
  start_job("resume-graph", {"--graph", "--iterations", "5000", "--max-bytes", "65536"});
  auto running = [&] {
    int n = 0;
    for (pid_t p : pids) n += ::kill(p, 0) == 0 ? 1 : 0;
    return n;
  };
  std::this_thread::sleep_for(std::chrono::seconds(3));  // CUDA set up, the jobs running
  int restarts_under_load = 0;
  for (int k = 0; k < 5; ++k) {
    if (running() == static_cast<int>(pids.size())) ++restarts_under_load;
    if (k == 2) {
      daemon->stop();
    } else {
      daemon->kill();
    }
    daemon->start();
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
  }
  std::printf("restarts while every rank ran: %d of 5\n", restarts_under_load);
  for (pid_t p : pids)
    EXPECT_EQ(wait_for(p), 0) << "seed " << seed << "; daemon log:\n" << daemon->log();
  EXPECT_GE(restarts_under_load, 1)
      << "the jobs ended before irisd was restarted: make them longer";
}

}  // namespace
}  // namespace iris::testing
