// Property test of the plan builders: for random communicators (1..64 ranks), collectives, roots,
// sizes and counts (zeros included), the plan moves every destination byte exactly once, from
// the source byte the collective's definition names, and nothing else; arguments that disagree
// between ranks are refused. Seeded afresh each run; the seed is printed.
#include "daemon/collectives/plan.hpp"

#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <random>
#include <tuple>

namespace iris::daemon {
namespace {

using Kind = CollectiveKind;
constexpr Kind kKinds[] = {Kind::kAllGather, Kind::kAllToAll, Kind::kAllToAllV,
                           Kind::kBroadcast, Kind::kGather,   Kind::kScatter};

// (rank, offset into its receive buffer) -> (rank, offset into its send buffer).
using ByteMap = std::map<std::pair<uint32_t, uint64_t>, std::pair<uint32_t, uint64_t>>;

struct Case {
  std::vector<RankArgs> ranks;
  ByteMap expected;  // what the collective's definition says lands where
};

// Random arguments for one collective and, independently of plan.cpp, where each byte must land.
Case random_case(std::mt19937_64& rng, Kind kind) {
  auto pick = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  const auto n = static_cast<uint32_t>(pick(1, 64));
  const uint64_t b = pick(0, 3) == 0 ? 0 : pick(1, 9);
  const auto root = static_cast<uint32_t>(pick(0, n - 1));
  Case c;
  c.ranks.resize(n);
  for (uint32_t r = 0; r < n; ++r) {
    RankArgs& a = c.ranks[r];
    a.kind = kind;
    a.bytes = b;
    a.root = root;
    a.send_offset = pick(0, 5);
    a.recv_offset = pick(0, 5);
    a.self_copy_done = pick(0, 3) == 0;
  }
  if (kind == Kind::kAllToAllV) {
    // counts[s][d]: what s sends d; zeros common. Displacements pack blocks in a random order.
    std::vector<std::vector<uint64_t>> counts(n, std::vector<uint64_t>(n));
    for (auto& row : counts)
      for (auto& v : row) v = pick(0, 2) == 0 ? 0 : pick(1, 7);
    auto packed = [&](const std::vector<uint64_t>& sizes) {
      std::vector<uint32_t> order(n);
      for (uint32_t i = 0; i < n; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<uint64_t> displs(n);
      uint64_t at = 0;
      for (uint32_t i : order) {
        displs[i] = at;
        at += sizes[i] + pick(0, 2);  // gaps are allowed
      }
      return displs;
    };
    for (uint32_t r = 0; r < n; ++r) {
      RankArgs& a = c.ranks[r];
      a.send_counts = counts[r];
      a.send_displs = packed(a.send_counts);
      for (uint32_t s = 0; s < n; ++s) a.recv_counts.push_back(counts[s][r]);
      a.recv_displs = packed(a.recv_counts);
    }
  }
  auto land = [&](uint32_t dst, uint64_t dst_off, uint32_t src, uint64_t src_off, uint64_t len) {
    if (src == dst && c.ranks[src].self_copy_done) return;  // already there
    for (uint64_t i = 0; i < len; ++i) c.expected[{dst, dst_off + i}] = {src, src_off + i};
  };
  for (uint32_t s = 0; s < n; ++s) {
    for (uint32_t d = 0; d < n; ++d) {
      const RankArgs& S = c.ranks[s];
      const RankArgs& D = c.ranks[d];
      switch (kind) {
        case Kind::kAllGather:
          land(d, D.recv_offset + s * b, s, S.send_offset, b);
          break;
        case Kind::kAllToAll:
          land(d, D.recv_offset + s * b, s, S.send_offset + d * b, b);
          break;
        case Kind::kAllToAllV:
          land(d, D.recv_offset + D.recv_displs[s], s, S.send_offset + S.send_displs[d],
               S.send_counts[d]);
          break;
        case Kind::kBroadcast:
          if (s == root && d != root) land(d, D.recv_offset, s, S.send_offset, b);
          break;
        case Kind::kGather:
          if (d == root) land(d, D.recv_offset + s * b, s, S.send_offset, b);
          break;
        case Kind::kScatter:
          if (s == root) land(d, D.recv_offset, s, S.send_offset + d * b, b);
          break;
        default:
          break;
      }
    }
  }
  return c;
}

class Plans : public ::testing::Test {
 protected:
  void SetUp() override {
    seed = std::random_device{}();
    std::cout << "plan property test seed " << seed << "\n";
    RecordProperty("seed", std::to_string(seed));
    rng.seed(seed);
  }
  uint64_t seed = 0;
  std::mt19937_64 rng;
};

TEST_F(Plans, EveryDestinationByteIsWrittenOnceFromTheRightSource) {
  for (int trial = 0; trial < 300; ++trial) {
    const Kind kind = kKinds[trial % std::size(kKinds)];
    const Case c = random_case(rng, kind);
    auto built = build_plan(c.ranks);
    ASSERT_TRUE(std::holds_alternative<std::vector<PlannedCopy>>(built))
        << shm::opcode_name(kind) << ": " << std::get<PlanError>(built).message << " seed " << seed;
    ByteMap written;
    for (const PlannedCopy& copy : std::get<std::vector<PlannedCopy>>(built)) {
      ASSERT_GT(copy.bytes, 0u) << "empty copies are dropped";
      for (uint64_t i = 0; i < copy.bytes; ++i) {
        const auto at = std::pair{copy.dst_rank, copy.dst_offset + i};
        const auto from = std::pair{copy.src_rank, copy.src_offset + i};
        ASSERT_TRUE(written.emplace(at, from).second)
            << shm::opcode_name(kind) << ": rank " << at.first << " byte " << at.second
            << " written twice; seed " << seed;
        auto want = c.expected.find(at);
        ASSERT_NE(want, c.expected.end())
            << shm::opcode_name(kind) << ": rank " << at.first << " byte " << at.second
            << " is outside what the collective writes; seed " << seed;
        ASSERT_EQ(want->second, from) << shm::opcode_name(kind) << ": wrong source; seed " << seed;
      }
    }
    ASSERT_EQ(written.size(), c.expected.size())
        << shm::opcode_name(kind) << ": destination bytes left unwritten; seed " << seed;
  }
}

// What another node is sent (source_block, from the sender's arguments alone) is exactly what
// the pair rule copies from the sender: the same range, for every pair that moves anything.
TEST_F(Plans, SourceBlocksAreWhatThePairsCopy) {
  for (int trial = 0; trial < 300; ++trial) {
    const Kind kind = kKinds[trial % std::size(kKinds)];
    const Case c = random_case(rng, kind);
    const auto n = static_cast<uint32_t>(c.ranks.size());
    for (uint32_t src = 0; src < n; ++src) {
      for (uint32_t dst = 0; dst < n; ++dst) {
        RankArgs sender = c.ranks[src];
        sender.self_copy_done = false;  // another node never skips the block
        auto pair = plan_pair(sender, src, c.ranks[dst], dst);
        ASSERT_TRUE(std::holds_alternative<std::optional<PlannedCopy>>(pair)) << "seed " << seed;
        const auto& planned = std::get<std::optional<PlannedCopy>>(pair);
        const auto block = source_block(sender, src, dst);
        ASSERT_EQ(planned.has_value(), block.has_value())
            << shm::opcode_name(kind) << " " << src << "->" << dst << "; seed " << seed;
        if (!planned) continue;
        EXPECT_EQ(planned->src_offset, block->offset) << "seed " << seed;
        EXPECT_EQ(planned->bytes, block->bytes) << "seed " << seed;
      }
    }
  }
}

TEST_F(Plans, DisagreeingArgumentsAreRefused) {
  for (int trial = 0; trial < 300; ++trial) {
    const Kind kind = kKinds[trial % std::size(kKinds)];
    Case c = random_case(rng, kind);
    const auto n = static_cast<uint32_t>(c.ranks.size());
    if (n < 2) continue;
    const auto r = static_cast<uint32_t>(std::uniform_int_distribution<uint32_t>(1, n - 1)(rng));
    ErrorCode want = ErrorCode::kSizeMismatch;
    switch (trial / std::size(kKinds) % 3) {
      case 0:  // another collective
        c.ranks[r].kind = kind == Kind::kAllGather ? Kind::kBroadcast : Kind::kAllGather;
        want = ErrorCode::kInvalidArgument;
        break;
      case 1:  // another size: counts for all-to-all-v, the root for rooted ones, else bytes
        if (kind == Kind::kAllToAllV) {
          c.ranks[r].recv_counts[0] += 1;
        } else if (kind == Kind::kBroadcast || kind == Kind::kGather || kind == Kind::kScatter) {
          c.ranks[r].root = (c.ranks[r].root + 1) % n;
          want = ErrorCode::kInvalidArgument;
        } else {
          c.ranks[r].bytes += 1;
        }
        break;
      default:
        if (kind == Kind::kAllToAllV) {
          c.ranks[0].send_counts[r] += 3;
        } else {
          c.ranks[r].bytes += 2;
          if (kind == Kind::kAllToAll || kind == Kind::kAllGather) break;
          c.ranks[r].root = c.ranks[0].root;
        }
    }
    auto built = build_plan(c.ranks);
    ASSERT_TRUE(std::holds_alternative<PlanError>(built))
        << shm::opcode_name(kind) << " trial " << trial << ": disagreement accepted; seed " << seed;
    EXPECT_EQ(std::get<PlanError>(built).code, want) << std::get<PlanError>(built).message;
    EXPECT_FALSE(std::get<PlanError>(built).message.empty());
  }
}

TEST(Plan, AllToAllVMismatchNamesBothRanksAndSizes) {
  RankArgs a, b;
  a.kind = b.kind = Kind::kAllToAllV;
  a.send_counts = {0, 200};
  a.send_displs = {0, 0};
  a.recv_counts = a.recv_displs = {0, 0};
  b.send_counts = b.send_displs = {0, 0};
  b.recv_counts = {100, 0};
  b.recv_displs = {0, 0};
  auto pair = plan_pair(a, 0, b, 1);
  ASSERT_TRUE(std::holds_alternative<PlanError>(pair));
  EXPECT_EQ(std::get<PlanError>(pair).message,
            "rank 0 sends 200 bytes to rank 1, which expects 100");
}

}  // namespace
}  // namespace iris::daemon
