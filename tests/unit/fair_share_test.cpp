// The choice of the next slice (daemon/engines/fair_share.hpp): slice bounds, latency first
// without starving bulk, weighted shares between uids, communicators in turn, and over random
// traffic every copy served whole, in order within its flow, exactly once.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "daemon/engines/fair_share.hpp"

namespace iris::daemon {
namespace {

constexpr uint64_t kMiB = 1 << 20;
const FlowKey kBulkA{1000, 1, TrafficClass::kBulk};
const FlowKey kBulkB{1001, 2, TrafficClass::kBulk};
const FlowKey kLatencyB{1001, 3, TrafficClass::kLatency};

TEST(FairShare, ALargeCopyLeavesInSlicesOfAtMostTheBound) {
  FairShare fair({2 * kMiB, 8});
  fair.push(kBulkA, 7, 9 * kMiB + 5);
  uint64_t offset = 0;
  for (int i = 0; i < 5; ++i) {
    const auto s = fair.next();
    ASSERT_TRUE(s);
    EXPECT_EQ(s->item, 7u);
    EXPECT_EQ(s->offset, offset);
    EXPECT_EQ(s->bytes, i < 4 ? 2 * kMiB : kMiB + 5);
    EXPECT_EQ(s->last, i == 4);
    offset += s->bytes;
  }
  EXPECT_FALSE(fair.next());
  EXPECT_TRUE(fair.empty());
}

TEST(FairShare, ALatencyCopyGoesBeforeABulkTransferAlreadyWaiting) {
  FairShare fair({2 * kMiB, 8});
  fair.push(kBulkA, 1, 1024 * kMiB);
  ASSERT_EQ(fair.next()->item, 1u);
  fair.push(kLatencyB, 2, 4096);
  const auto s = fair.next();
  EXPECT_EQ(s->item, 2u);
  EXPECT_TRUE(s->last);
  EXPECT_EQ(fair.next()->item, 1u);
}

// A device with an engine kept for latency work takes each class's slices apart.
TEST(FairShare, EachClassCanBeTakenApart) {
  FairShare fair({2 * kMiB, 8});
  fair.push(kBulkA, 1, 3 * kMiB);
  EXPECT_FALSE(fair.next(TrafficClass::kLatency));
  fair.push(kLatencyB, 2, 4096);
  const auto bulk = fair.next(TrafficClass::kBulk);
  ASSERT_TRUE(bulk);
  EXPECT_EQ(bulk->item, 1u);
  EXPECT_EQ(bulk->bytes, 2 * kMiB);
  const auto latency = fair.next(TrafficClass::kLatency);
  ASSERT_TRUE(latency);
  EXPECT_EQ(latency->item, 2u);
  EXPECT_FALSE(fair.next(TrafficClass::kLatency));
  EXPECT_EQ(fair.next(TrafficClass::kBulk)->bytes, kMiB);
  EXPECT_TRUE(fair.empty());
}

// A caller may ask for smaller slices than the bound (bulk beside latency work), never larger.
TEST(FairShare, ASliceCanBeAskedSmallerThanTheBound) {
  FairShare fair({2 * kMiB, 8});
  fair.push(kBulkA, 1, 5 * kMiB);
  const auto half = fair.next(TrafficClass::kBulk, kMiB);
  ASSERT_TRUE(half);
  EXPECT_EQ(half->offset, 0u);
  EXPECT_EQ(half->bytes, kMiB);
  const auto over = fair.next(TrafficClass::kBulk, 64 * kMiB);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->offset, kMiB);
  EXPECT_EQ(over->bytes, 2 * kMiB);
  const auto zero = fair.next(TrafficClass::kBulk, 0);
  ASSERT_TRUE(zero);
  EXPECT_EQ(zero->bytes, 1u) << "a slice is never empty";
  const auto rest = fair.next(TrafficClass::kBulk);
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->offset, 3 * kMiB + 1);
  EXPECT_EQ(rest->bytes, 2 * kMiB - 1);
  EXPECT_TRUE(rest->last);
  EXPECT_TRUE(fair.empty());
}

TEST(FairShare, AStreamOfLatencyWorkNeverStarvesBulk) {
  FairShare fair({2 * kMiB, 8});
  fair.push(kBulkA, 1, 1024 * kMiB);
  int since_bulk = 0, bulk_slices = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    fair.push(kLatencyB, 100 + i, 4096);  // a new one always waits
    const auto s = fair.next();
    if (s->flow.cls == TrafficClass::kBulk) {
      ++bulk_slices;
      since_bulk = 0;
    } else {
      ASSERT_LT(++since_bulk, 8) << "bulk waited past every 8th slice";
    }
  }
  EXPECT_EQ(bulk_slices, 125);
}

TEST(FairShare, TwoBulkTenantsOfEqualWeightShareTheBytesEvenly) {
  for (const auto& [weight_a, weight_b] : {std::pair{1u, 1u}, std::pair{3u, 1u}}) {
    FairShare fair({2 * kMiB, 8});
    fair.set_weight(kBulkA.uid, weight_a);
    fair.set_weight(kBulkB.uid, weight_b);
    // A has one huge copy; B many middling ones (its slices smaller than the bound).
    fair.push(kBulkA, 1, 100000 * kMiB);
    for (uint64_t i = 0; i < 20000; ++i) fair.push(kBulkB, 10 + i, 3 * kMiB / 2);
    std::map<uint32_t, uint64_t> bytes;
    for (int i = 0; i < 4000; ++i) {
      const auto s = fair.next();
      bytes[s->flow.uid] += s->bytes;
    }
    const double share_a =
        static_cast<double>(bytes[kBulkA.uid]) / (bytes[kBulkA.uid] + bytes[kBulkB.uid]);
    const double want = static_cast<double>(weight_a) / (weight_a + weight_b);
    EXPECT_NEAR(share_a, want, 0.01) << weight_a << ":" << weight_b;
  }
}

TEST(FairShare, AUidsCommunicatorsTakeTurns) {
  FairShare fair({kMiB, 8});
  const FlowKey one{5, 1, TrafficClass::kBulk}, two{5, 2, TrafficClass::kBulk};
  fair.push(one, 1, 4 * kMiB);
  fair.push(one, 2, kMiB);
  fair.push(two, 3, 2 * kMiB);
  std::vector<uint64_t> order;
  while (auto s = fair.next()) order.push_back(s->item);
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 3, 1, 3, 1, 1, 2}));
}

TEST(FairShare, RandomTrafficIsServedWholeInOrderAndExactlyOnce) {
  std::mt19937_64 random(20261204);
  for (int trial = 0; trial < 200; ++trial) {
    FairShare fair({1 + random() % (4 * kMiB), 1 + static_cast<uint32_t>(random() % 10)});
    std::map<uint64_t, std::pair<FlowKey, uint64_t>> pushed;  // item -> flow, bytes
    std::map<uint64_t, uint64_t> served;                      // item -> bytes so far
    std::map<FlowKey, std::vector<uint64_t>> pushed_order, finished_order;
    uint64_t next_item = 0;
    for (int step = 0; step < 400; ++step) {
      if (random() % 3 != 0) {
        const FlowKey f{static_cast<uint32_t>(random() % 3), random() % 3,
                        random() % 2 ? TrafficClass::kBulk : TrafficClass::kLatency};
        const uint64_t bytes = random() % 2 ? random() % 4096 + 1 : random() % (16 * kMiB) + 1;
        if (random() % 5 == 0) fair.set_weight(f.uid, static_cast<uint32_t>(random() % 4));
        pushed[next_item] = {f, bytes};
        pushed_order[f].push_back(next_item);
        fair.push(f, next_item++, bytes);
        continue;
      }
      while (auto s = (random() % 4 == 0 ? std::optional<FairShare::Slice>{} : fair.next())) {
        const auto& [flow, bytes] = pushed.at(s->item);
        ASSERT_EQ(s->flow, flow);
        ASSERT_EQ(s->offset, served[s->item]) << "slices of a copy in order, none twice";
        ASSERT_GT(s->bytes, 0u);
        served[s->item] += s->bytes;
        ASSERT_LE(served[s->item], bytes);
        ASSERT_EQ(s->last, served[s->item] == bytes);
        if (s->last) finished_order[flow].push_back(s->item);
        break;
      }
    }
    while (auto s = fair.next()) {
      served[s->item] += s->bytes;
      if (s->last) finished_order[s->flow].push_back(s->item);
    }
    EXPECT_TRUE(fair.empty());
    for (const auto& [item, fb] : pushed) EXPECT_EQ(served[item], fb.second) << item;
    EXPECT_EQ(finished_order, pushed_order) << "copies of one flow finish in the order pushed";
  }
}

}  // namespace
}  // namespace iris::daemon
