// Every copy-only collective through a real irisd, ranks in real separate processes
// (iris-test-rank), every byte of every receive block checked against data only the right rank
// could have sent, receive buffers poisoned first and send buffers scribbled after each wait.
#include <signal.h>

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "iris/iris.hpp"
#include "tests/support/client_helpers.hpp"
#include "tests/support/daemon_process.hpp"

namespace iris::testing {
namespace {

using namespace std::chrono_literals;

void expect_all(int code, const std::vector<int>& codes, const DaemonProcess& daemon) {
  for (std::size_t r = 0; r < codes.size(); ++r)
    EXPECT_EQ(codes[r], code) << "rank " << r << "; daemon log:\n" << daemon.log();
}

const char* const kCollectives[] = {"all_gather", "all_to_all", "all_to_all_v",
                                    "broadcast",  "gather",     "scatter"};

struct SweepCase {
  std::string collective;
  uint32_t nranks;
};

class CollectiveSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(CollectiveSweep, EveryByteArrivesFromTheRightRank) {
  const SweepCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  DaemonProcess daemon;
  // Roots rotate with the iteration; sizes are log-uniform from 1 byte, odd ones included.
  const uint64_t max_bytes = c.nranks >= 5 ? (256 << 10) : (2 << 20);
  expect_all(0,
             run_ranks(daemon, c.nranks,
                       {"--key", c.collective, "--collective", c.collective, "--seed",
                        std::to_string(seed), "--iterations", "7", "--max-bytes",
                        std::to_string(max_bytes)}),
             daemon);
}

std::vector<SweepCase> sweep_cases() {
  std::vector<SweepCase> cases;
  for (const char* collective : kCollectives)
    for (uint32_t n : {1u, 2u, 3u, 5u, 8u}) cases.push_back({collective, n});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(RankCounts, CollectiveSweep, ::testing::ValuesIn(sweep_cases()),
                         [](const auto& info) {
                           return info.param.collective + "_" + std::to_string(info.param.nranks) +
                                  "ranks";
                         });

TEST(Collectives, InPlaceWhereDefined) {
  // all-gather, gather at the root, scatter at the root, broadcast; the all-to-alls are not in
  // place (rank_main passes them separate buffers).
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  DaemonProcess daemon;
  expect_all(0,
             run_ranks(daemon, 3,
                       {"--key", "inplace", "--collective", "mixed", "--inplace", "--seed",
                        std::to_string(seed), "--iterations", "24", "--max-bytes",
                        std::to_string(1 << 20)}),
             daemon);
}

TEST(Collectives, TwoCommunicatorsRunningDifferentCollectivesAtOnce) {
  // Iteration i runs collective i % 6 on communicator i % 2, eight in flight: each
  // communicator has three kinds of collective in flight together.
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  DaemonProcess daemon;
  expect_all(0,
             run_ranks(daemon, 4,
                       {"--key", "mixed", "--collective", "mixed", "--comms", "2", "--inflight",
                        "8", "--seed", std::to_string(seed), "--iterations", "48", "--max-bytes",
                        std::to_string(256 << 10)}),
             daemon);
}

TEST(Collectives, AllToAllVCountsThatDisagreeFailEveryRankAndWriteNothingOutside) {
  DaemonProcess daemon;
  // Exit 10 + kSizeMismatch (6) on every rank; 2 would mean a byte outside a receive block.
  expect_all(
      10 + static_cast<int>(ErrorCode::kSizeMismatch),
      run_ranks(daemon, 3,
                {"--mode", "v-mismatch", "--key", "v", "--seed", "7", "--max-bytes", "5000"}),
      daemon);
  EXPECT_NE(daemon.log().find("which expects"), std::string::npos) << daemon.log();
}

TEST(Collectives, RootsOutOfRangeOrDisagreeingAreRefused) {
  DaemonProcess daemon;
  TwoRanks pair(daemon, "roots", 256);
  auto& [a, b, ca, cb, sa, ra, sb, rb] = pair;
  // Out of range: libiris refuses before anything is submitted.
  EXPECT_EQ(code_of([&] { ca.broadcast(sa.data(), 64, 2); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { ca.gather(sa.data(), ra.data(), 64, 7); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { ca.scatter(sa.data(), ra.data(), 64, 2); }), ErrorCode::kInvalidArgument);
  // Ranks naming different roots: both fail, and say why in the daemon log.
  auto x = ca.gather(sa.data(), ra.data(), 64, 0);
  auto y = cb.gather(sb.data(), rb.data(), 64, 1);
  EXPECT_EQ(code_of([&] { x.wait(); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { y.wait(); }), ErrorCode::kInvalidArgument);
  EXPECT_NE(daemon.log().find("passed root"), std::string::npos) << daemon.log();
  // Different collectives at the same position: both fail.
  auto p = ca.all_gather(sa.data(), ra.data(), 64);
  auto q = cb.all_to_all(sb.data(), rb.data(), 64);
  EXPECT_EQ(code_of([&] { p.wait(); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { q.wait(); }), ErrorCode::kInvalidArgument);
  // The communicator goes on: a correct broadcast from rank 1.
  std::memset(sb.data(), 0x42, 64);
  std::memset(sa.data(), 0, 64);
  auto u = ca.broadcast(sa.data(), 64, 1);
  auto v = cb.broadcast(sb.data(), 64, 1);
  u.wait();
  v.wait();
  EXPECT_EQ(std::memcmp(sa.data(), sb.data(), 64), 0);
  // The receive buffer must hold every rank's block at the root, and be given there.
  EXPECT_EQ(code_of([&] { ca.gather(sa.data(), ra.data(), 300, 0); }), ErrorCode::kOutOfRange);
  EXPECT_EQ(code_of([&] { ca.gather(sa.data(), nullptr, 64, 0); }), ErrorCode::kInvalidArgument);
  // all-to-all-v needs one count and displacement per rank.
  EXPECT_EQ(code_of([&] {
              ca.all_to_all_v(sa.data(), {1}, {0}, ra.data(), {1, 1}, {0, 1});
            }),
            ErrorCode::kInvalidArgument);
}

class KilledRank : public ::testing::TestWithParam<std::string> {};

TEST_P(KilledRank, OthersGetPeerLostNotAHang) {
  // Ranks 0 and 1 live here; rank 2 submits one all-gather, which completes, and is killed
  // while ranks 0 and 1 wait in the collective under test.
  DaemonProcess daemon;
  auto a = Client::connect(options_for(daemon));
  auto b = Client::connect(options_for(daemon));
  constexpr uint64_t kBytes = 1 << 20;
  auto ca = Communicator::init(a, "victim", 3, 0);
  auto cb = Communicator::init(b, "victim", 3, 1);
  const pid_t victim = spawn({rank_program_path(), "--socket", daemon.socket(), "--mode", "hang",
                              "--key", "victim", "--nranks", "3", "--rank", "2", "--inflight", "1",
                              "--max-bytes", std::to_string(kBytes)});
  auto sa = a.allocate(3 * kBytes), ra = a.allocate(3 * kBytes);
  auto sb = b.allocate(3 * kBytes), rb = b.allocate(3 * kBytes);
  auto first_a = ca.all_gather(sa.data(), ra.data(), kBytes);
  auto first_b = cb.all_gather(sb.data(), rb.data(), kBytes);
  first_a.wait();
  first_b.wait();
  const std::vector<uint64_t> counts(3, kBytes), displs = {0, kBytes, 2 * kBytes};
  auto submit = [&](Communicator& c, Buffer& s, Buffer& r) {
    const std::string& kind = GetParam();
    if (kind == "all_to_all") return c.all_to_all(s.data(), r.data(), kBytes);
    if (kind == "all_to_all_v")
      return c.all_to_all_v(s.data(), counts, displs, r.data(), counts, displs);
    if (kind == "broadcast") return c.broadcast(s.data(), kBytes, 2);
    if (kind == "gather") return c.gather(s.data(), r.data(), kBytes, 0);
    return c.scatter(s.data(), r.data(), kBytes, 0);
  };
  auto pending_a = submit(ca, sa, ra);
  auto pending_b = submit(cb, sb, rb);
  ::kill(victim, SIGKILL);
  EXPECT_EQ(wait_for(victim), 128 + SIGKILL);
  EXPECT_EQ(code_of([&] {
              if (!pending_a.wait(2s)) throw Error(ErrorCode::kTimeout, "hung");
            }),
            ErrorCode::kPeerLost);
  EXPECT_EQ(code_of([&] {
              if (!pending_b.wait(2s)) throw Error(ErrorCode::kTimeout, "hung");
            }),
            ErrorCode::kPeerLost);
}

INSTANTIATE_TEST_SUITE_P(Collectives, KilledRank,
                         ::testing::Values("all_to_all", "all_to_all_v", "broadcast", "gather",
                                           "scatter"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace iris::testing
