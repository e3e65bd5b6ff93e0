// ArrivedRanks: a rank's record found by rank, walks over arrived ranks only, records released
// by clear() at once, memory kept for small collectives and given back by large ones.
#include "daemon/collectives/arrived_ranks.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <stdexcept>

namespace iris::daemon {
namespace {

std::shared_ptr<MappedBuffer> a_buffer() { return std::make_shared<MappedBuffer>(); }

TEST(ArrivedRanks, FindsEachArrivedRankAndWalksOnlyThose) {
  ArrivedRanks ranks;
  ranks.reset(1000);
  for (uint32_t r : {999u, 3u, 500u}) ranks.put(r).copies_touching = r + 1;
  EXPECT_EQ(ranks.size(), 3u);
  for (uint32_t r : {999u, 3u, 500u}) {
    ASSERT_TRUE(ranks.contains(r));
    EXPECT_EQ(ranks.at(r).rank, r);
    EXPECT_EQ(ranks.at(r).copies_touching, r + 1);
  }
  EXPECT_FALSE(ranks.contains(4));
  EXPECT_EQ(ranks.find(4), nullptr);
  EXPECT_THROW(ranks.at(4), std::out_of_range);
  std::set<uint32_t> walked;
  for (const ArrivedRank& r : ranks) walked.insert(r.rank);
  EXPECT_EQ(walked, (std::set<uint32_t>{3, 500, 999}));
}

TEST(ArrivedRanks, ARankPastTheCollectiveIsRefusedNotWritten) {
  ArrivedRanks ranks;
  ranks.reset(8);
  EXPECT_THROW(ranks.put(8), std::out_of_range);
  EXPECT_THROW(ranks.put(0xffffffffu), std::out_of_range);
  EXPECT_FALSE(ranks.contains(8));
  EXPECT_FALSE(ranks.contains(0xffffffffu));
  EXPECT_TRUE(ranks.empty());
}

TEST(ArrivedRanks, PutResetsARecordAlreadyThere) {
  ArrivedRanks ranks;
  ranks.reset(4);
  ArrivedRank& first = ranks.put(2);
  first.delivered = true;
  first.request = ValidatedRequest{{}, a_buffer(), nullptr};
  ArrivedRank& again = ranks.put(2);
  EXPECT_EQ(ranks.size(), 1u);
  EXPECT_EQ(again.rank, 2u);
  EXPECT_FALSE(again.delivered);
  EXPECT_FALSE(again.request.has_value());
}

TEST(ArrivedRanks, ClearLetsGoOfTheBuffersAtOnceAndTheRanksArriveAfresh) {
  ArrivedRanks ranks;
  ranks.reset(8);
  auto held = a_buffer();
  ranks.put(5).request = ValidatedRequest{{}, held, held};
  EXPECT_EQ(held.use_count(), 3);
  ranks.clear();
  EXPECT_EQ(held.use_count(), 1) << "a cleared collective holds no mapping";
  ranks.reset(8);
  EXPECT_TRUE(ranks.empty());
  EXPECT_FALSE(ranks.contains(5)) << "the index forgot the rank";
  ranks.put(5);
  EXPECT_EQ(ranks.size(), 1u);
}

TEST(ArrivedRanks, ASmallCollectiveKeepsItsMemoryALargeOneGivesItBack) {
  ArrivedRanks small;
  small.reset(8);
  EXPECT_GE(small.room(), 8u) << "room for every rank up front";
  for (uint32_t r = 0; r < 8; ++r) small.put(r);
  const ArrivedRank* record = &small.at(0);
  small.clear();
  EXPECT_GE(small.room(), 8u);
  small.reset(8);
  EXPECT_EQ(&small.put(3), record) << "the next collective's first record reuses the memory";

  ArrivedRanks large;
  const uint32_t n = 16 * ArrivedRanks::kIndexedRanks;
  large.reset(n);
  EXPECT_EQ(large.room(), 0u) << "a large communicator's collective holds what arrived only";
  for (uint32_t r = 0; r < ArrivedRanks::kIndexedRanks + 1; ++r) large.put(n - 1 - 3 * r);
  EXPECT_TRUE(large.contains(n - 1));
  EXPECT_FALSE(large.contains(n - 2));
  EXPECT_EQ(large.at(n - 4).rank, n - 4);
  EXPECT_GT(large.room(), ArrivedRanks::kIndexedRanks);
  large.clear();
  EXPECT_EQ(large.room(), 0u) << "a large collective's records are given back";
  large.reset(2);
  EXPECT_FALSE(large.contains(n - 1));
  EXPECT_THROW(large.put(2), std::out_of_range) << "sized for the new collective";
  large.put(1);
  EXPECT_EQ(large.size(), 1u);
}

}  // namespace
}  // namespace iris::daemon
