// SdmaPlanner on models of MI300-series nodes. The masks are models built from AMD's public
// descriptions, not read from hardware:
//   MI300X: 8 GPUs, each linked to the 7 others by xGMI; 16 SDMA engines per GPU, engines 0 and 1
//   serve host memory, engines 2..15 serve xGMI peers, the runtime recommending two per link.
//   MI308X: a reduced engine set: the status offers 4 engines (1..4) for peers and 1 for the
//   host, with no recommendation; engines 5..15 exist in the count but must never be used.
#include "daemon/engines/hsa/sdma_planner.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <map>
#include <random>
#include <set>

namespace iris::daemon::hsa {
namespace {

constexpr int kGpus = 8;

// Index of `peer` among `self`'s peers (0..6).
int link_index(int self, int peer) { return peer < self ? peer : peer - 1; }

PairEngines mi300x(int src, int dst) {
  if (src == kHostAgent || dst == kHostAgent) return {0b11, 0};
  if (src == dst) return {0xfffc, 0};
  const uint32_t link = 0b11u << (2 + 2 * link_index(src, dst));
  return {0xfffc, link};
}

PairEngines mi308x(int src, int dst) {
  if (src == kHostAgent || dst == kHostAgent) return {0b1, 0};
  return {0b11110, 0};
}

std::vector<CopyShape> all_gather(uint64_t bytes) {
  std::vector<CopyShape> copies;
  for (int src = 0; src < kGpus; ++src)
    for (int dst = 0; dst < kGpus; ++dst)
      if (src != dst) copies.push_back({src, dst, bytes});
  return copies;
}

TEST(SdmaPlanner, UsableEnginesPreferRecommendedOnesTheStatusOffers) {
  EXPECT_EQ(usable_engines({0b1100, 0b0100}), 0b0100u);
  EXPECT_EQ(usable_engines({0b1100, 0b0011}), 0b1100u);  // recommended but not offered: ignored
  EXPECT_EQ(usable_engines({0b1100, 0}), 0b1100u);
  EXPECT_EQ(usable_engines({0, 0b1}), 0u);
}

TEST(SdmaPlanner, Mi300xAllGatherPutsEachLinkOnItsOwnEngines) {
  SdmaPlanner planner(kGpus, mi300x, 0);
  const auto copies = all_gather(128 << 20);
  const auto pieces = planner.plan(copies);
  ASSERT_EQ(pieces.size(), copies.size());
  std::map<int, std::set<uint32_t>> engines_of_agent;
  for (const PlannedPiece& p : pieces) {
    const CopyShape& c = copies[p.copy];
    EXPECT_EQ(p.copy_agent, c.src_device) << "peer copies run on the source GPU's engines";
    EXPECT_EQ(std::popcount(p.engine), 1);
    EXPECT_NE(p.engine & mi300x(c.src_device, c.dst_device).preferred, 0u)
        << "copy " << c.src_device << "->" << c.dst_device << " left its link's engines";
    engines_of_agent[p.copy_agent].insert(p.engine);
  }
  for (const auto& [agent, engines] : engines_of_agent)
    EXPECT_EQ(engines.size(), 7u) << "GPU " << agent << ": its 7 copies share engines";
}

TEST(SdmaPlanner, Mi300xSplitsLargeCopiesAcrossTheLinksEngines) {
  SdmaPlanner planner(kGpus, mi300x, 64 << 20);
  const std::vector<CopyShape> copies{{0, 3, (256u << 20) + 12345}, {0, 4, 1 << 20}};
  const auto pieces = planner.plan(copies);
  std::vector<PlannedPiece> big, small;
  for (const PlannedPiece& p : pieces) (p.copy == 0 ? big : small).push_back(p);
  ASSERT_EQ(big.size(), 2u);
  ASSERT_EQ(small.size(), 1u) << "below split_bytes: one piece";
  EXPECT_EQ(big[0].offset, 0u);
  EXPECT_EQ(big[0].bytes % 4096, 0u);
  EXPECT_EQ(big[1].offset, big[0].bytes);
  EXPECT_EQ(big[0].bytes + big[1].bytes, copies[0].bytes);
  EXPECT_NE(big[0].engine, big[1].engine);
  EXPECT_EQ(big[0].engine | big[1].engine, mi300x(0, 3).preferred);
}

TEST(SdmaPlanner, HostCopiesUseOnlyTheHostEnginesAndAlternate) {
  SdmaPlanner planner(kGpus, mi300x, 0);
  std::vector<CopyShape> copies;
  for (int i = 0; i < 6; ++i) copies.push_back({2, kHostAgent, 1 << 20});
  for (int i = 0; i < 6; ++i) copies.push_back({kHostAgent, 5, 1 << 20});
  std::map<std::pair<int, uint32_t>, int> uses;
  for (const PlannedPiece& p : planner.plan(copies)) {
    EXPECT_NE(p.engine & 0b11u, 0u);
    EXPECT_EQ(p.engine & ~0b11u, 0u);
    ++uses[{p.copy_agent, p.engine}];
  }
  EXPECT_EQ(uses.size(), 4u);
  EXPECT_EQ((uses[{2, 0b01}]), 3);
  EXPECT_EQ((uses[{2, 0b10}]), 3);
  EXPECT_EQ((uses[{5, 0b01}]), 3);
  EXPECT_EQ((uses[{5, 0b10}]), 3);
}

// While tenants share the GPU: latency copies on the pair's highest engine, bulk on the rest.
TEST(SdmaPlanner, TheHighestEngineOfAPairIsKeptForLatencyCopies) {
  EXPECT_EQ(engines_for(0b1100, EngineQueue::kLatency), 0b1000u);
  EXPECT_EQ(engines_for(0b1100, EngineQueue::kBulk), 0b0100u);
  EXPECT_EQ(engines_for(0b1100, EngineQueue::kAny), 0b1100u);
  EXPECT_EQ(engines_for(0b0100, EngineQueue::kLatency), 0b0100u) << "one engine: shared";
  EXPECT_EQ(engines_for(0b0100, EngineQueue::kBulk), 0b0100u);
  SdmaPlanner planner(kGpus, mi300x, 0);
  std::vector<CopyShape> copies;
  for (int i = 0; i < 4; ++i) copies.push_back({2, kHostAgent, 64 << 20, EngineQueue::kBulk});
  for (int i = 0; i < 4; ++i) copies.push_back({2, kHostAgent, 4096, EngineQueue::kLatency});
  for (const PlannedPiece& p : planner.plan(copies))
    EXPECT_EQ(p.engine, copies[p.copy].queue == EngineQueue::kLatency ? 0b10u : 0b01u);
  // A user alone (kAny) uses both, the least loaded first: the latency engine here.
  const std::vector<CopyShape> alone{{2, kHostAgent, 1 << 20}};
  EXPECT_EQ(planner.plan(alone)[0].engine, 0b10u);
}

TEST(SdmaPlanner, Mi308xNeverLeavesTheOfferedEnginesAndSharesThemEvenly) {
  SdmaPlanner planner(kGpus, mi308x, 0);
  for (int round = 0; round < 10; ++round) {
    const auto copies = all_gather(64 << 20);
    for (const PlannedPiece& p : planner.plan(copies)) {
      const CopyShape& c = copies[p.copy];
      EXPECT_EQ(p.engine & ~usable_engines(mi308x(c.src_device, c.dst_device)), 0u);
      EXPECT_NE(p.engine, 0u);
    }
  }
  // 70 equal copies per GPU over its 4 engines: 17 or 18 each, never more.
  for (int gpu = 0; gpu < kGpus; ++gpu) {
    for (int e = 1; e <= 4; ++e) {
      EXPECT_GE(planner.queued_pieces(gpu, e), 17u) << "GPU " << gpu << " engine " << e;
      EXPECT_LE(planner.queued_pieces(gpu, e), 18u) << "GPU " << gpu << " engine " << e;
    }
    for (int e = 5; e < kMaxEngines; ++e) EXPECT_EQ(planner.queued_pieces(gpu, e), 0u);
    EXPECT_EQ(planner.queued_bytes(gpu, 0), 0u) << "the host engine took peer copies";
  }
}

TEST(SdmaPlanner, QueuedBytesSteerLaterCopiesAndReturnToZero) {
  // One pair with two engines and no recommendation: a big copy occupies one engine, so the
  // next copies of the pair go to the other until it finishes.
  SdmaPlanner planner(
      2,
      [](int, int) {
        return PairEngines{0b1100, 0};
      },
      0);
  const std::vector<CopyShape> big{{0, 1, 1 << 30}};
  const auto first = planner.plan(big);
  const std::vector<CopyShape> small{{0, 1, 4096}, {0, 1, 4096}};
  for (const PlannedPiece& p : planner.plan(small)) EXPECT_NE(p.engine, first[0].engine);
  planner.finished(first[0]);
  EXPECT_EQ(planner.queued_bytes(0, std::countr_zero(first[0].engine)), 0u);
}

TEST(SdmaPlanner, PairsWithoutEnginesAndHostToHostCopiesGetNone) {
  SdmaPlanner planner(
      2, [](int, int) { return PairEngines{}; }, 1);
  const std::vector<CopyShape> copies{{0, 1, 1 << 20}, {kHostAgent, kHostAgent, 100}, {1, 1, 0}};
  const auto pieces = planner.plan(copies);
  ASSERT_EQ(pieces.size(), 3u);
  for (const PlannedPiece& p : pieces) EXPECT_EQ(p.engine, 0u);
  EXPECT_EQ(pieces[1].copy_agent, kHostAgent);
}

TEST(SdmaPlanner, RandomMasksAndSizesStayInsideTheOfferedEnginesAndCoverEveryByte) {
  std::mt19937_64 rng(42);
  std::map<std::pair<int, int>, PairEngines> masks;
  for (int s = -1; s < 4; ++s)
    for (int d = -1; d < 4; ++d)
      masks[{s, d}] = {static_cast<uint32_t>(rng()) & 0xffff,
                       static_cast<uint32_t>(rng()) & 0xffff};
  SdmaPlanner planner(
      4,
      [&](int s, int d) {
        return masks.at({s, d});
      },
      1 << 20);
  std::vector<PlannedPiece> all;
  for (int round = 0; round < 50; ++round) {
    std::vector<CopyShape> copies;
    for (int i = 0; i < 20; ++i) {
      int s = static_cast<int>(rng() % 5) - 1, d = static_cast<int>(rng() % 5) - 1;
      if (s == kHostAgent && d == kHostAgent) d = 0;
      copies.push_back({s, d, rng() % (8 << 20)});
    }
    std::vector<uint64_t> covered(copies.size(), 0);
    for (const PlannedPiece& p : planner.plan(copies)) {
      const CopyShape& c = copies[p.copy];
      const uint32_t usable = usable_engines(masks.at({c.src_device, c.dst_device}));
      EXPECT_EQ(p.engine & ~usable, 0u);
      EXPECT_LE(std::popcount(p.engine), 1);
      if (usable != 0) {
        EXPECT_NE(p.engine, 0u);
      }
      EXPECT_EQ(p.offset, covered[p.copy]) << "pieces in order, no gap or overlap";
      covered[p.copy] += p.bytes;
      all.push_back(p);
    }
    for (std::size_t i = 0; i < copies.size(); ++i) EXPECT_EQ(covered[i], copies[i].bytes);
  }
  for (const PlannedPiece& p : all) planner.finished(p);
  for (int d = 0; d < 4; ++d)
    for (int e = 0; e < kMaxEngines; ++e) {
      EXPECT_EQ(planner.queued_bytes(d, e), 0u);
      EXPECT_EQ(planner.queued_pieces(d, e), 0u);
    }
}

}  // namespace
}  // namespace iris::daemon::hsa
