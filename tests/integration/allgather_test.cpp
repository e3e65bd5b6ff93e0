// All-gathers through a real irisd, ranks in real separate processes (iris-test-rank), every
// byte of every receive buffer checked against data only the right rank could have sent.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "tests/support/daemon_process.hpp"

namespace iris::testing {
namespace {

void expect_all_ok(const std::vector<int>& codes, const DaemonProcess& daemon) {
  for (std::size_t r = 0; r < codes.size(); ++r)
    EXPECT_EQ(codes[r], 0) << "rank " << r << " failed; daemon log:\n" << daemon.log();
}

struct SweepCase {
  uint32_t nranks;
  uint64_t max_bytes;
  uint32_t iterations;
};

void PrintTo(const SweepCase& c, std::ostream* out) {
  *out << c.nranks << " ranks, up to " << c.max_bytes << " bytes, " << c.iterations
       << " iterations";
}

class AllGatherSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(AllGatherSweep, EveryByteArrivesFromTheRightRank) {
  const SweepCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  DaemonProcess daemon;
  expect_all_ok(
      run_ranks(daemon, c.nranks,
                {"--key", "sweep", "--seed", std::to_string(seed), "--iterations",
                 std::to_string(c.iterations), "--max-bytes", std::to_string(c.max_bytes)}),
      daemon);
}

INSTANTIATE_TEST_SUITE_P(RankCounts, AllGatherSweep,
                         ::testing::Values(SweepCase{1, 64 << 20, 8}, SweepCase{2, 64 << 20, 10},
                                           SweepCase{4, 64 << 20, 8}, SweepCase{8, 16 << 20, 8}),
                         [](const auto& info) {
                           return std::to_string(info.param.nranks) + "ranks";
                         });

TEST(AllGather, InPlace) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  DaemonProcess daemon;
  expect_all_ok(run_ranks(daemon, 4,
                          {"--key", "inplace", "--inplace", "--seed", std::to_string(seed),
                           "--iterations", "12", "--max-bytes", std::to_string(8 << 20)}),
                daemon);
}

TEST(AllGather, ManySmallInFlight) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  DaemonProcess daemon;
  expect_all_ok(run_ranks(daemon, 4,
                          {"--key", "inflight", "--inflight", "32", "--seed", std::to_string(seed),
                           "--iterations", "256", "--max-bytes", "65536"}),
                daemon);
}

TEST(AllGather, ManyLargeInFlight) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  DaemonProcess daemon;
  expect_all_ok(
      run_ranks(daemon, 2,
                {"--key", "inflight-large", "--inflight", "6", "--seed", std::to_string(seed),
                 "--iterations", "18", "--max-bytes", std::to_string(4 << 20)}),
      daemon);
}

TEST(AllGather, TwoCommunicatorsAtOnce) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  DaemonProcess daemon;
  // Two independent groups on two keys, and within each process two communicators interleaved.
  std::vector<int> a, b;
  std::thread other([&] {
    b = run_ranks(daemon, 3,
                  {"--key", "group-b", "--comms", "2", "--seed", std::to_string(seed + 1),
                   "--iterations", "20", "--max-bytes", std::to_string(2 << 20)});
  });
  a = run_ranks(daemon, 2,
                {"--key", "group-a", "--comms", "2", "--seed", std::to_string(seed), "--iterations",
                 "20", "--max-bytes", std::to_string(2 << 20)});
  other.join();
  expect_all_ok(a, daemon);
  expect_all_ok(b, daemon);
}

}  // namespace
}  // namespace iris::testing
