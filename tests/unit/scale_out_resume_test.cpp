// What lets a communicator across nodes come through a restart of one node's irisd: the
// collectives heard of from a rank (SeqSet, so that what a node sends again is dropped), the
// copies a node keeps of what it sent another until that node completed the collective
// (KeptArrivals), checked against plain models over random histories, and where other nodes
// moved to, kept for the next irisd (NodeAddressBook).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <set>

#include "daemon/engines/host/host_engine.hpp"
#include "daemon/scaleout/kept_arrivals.hpp"
#include "daemon/scaleout/node_address_book.hpp"
#include "daemon/scaleout/seq_set.hpp"

namespace iris::daemon {
namespace {

TEST(SeqSet, AgreesWithAPlainSetOverRandomNearlyOrderedArrivals) {
  std::mt19937_64 random(7);
  for (int round = 0; round < 200; ++round) {
    SeqSet seqs;
    std::set<uint64_t> model;
    // Arrivals come nearly in order: a window of collectives in flight, any order within it.
    uint64_t next = 1;
    for (int step = 0; step < 500; ++step) {
      const uint64_t seq = next + random() % 8;
      if (seq == next) ++next;
      const bool fresh = model.insert(seq).second;
      ASSERT_EQ(seqs.insert(seq), fresh) << "seq " << seq;
      while (model.count(next) != 0) ++next;
    }
    for (uint64_t seq = 0; seq < next + 16; ++seq)
      ASSERT_EQ(seqs.contains(seq), seq == 0 || model.count(seq) != 0) << "seq " << seq;
    // The watermark is the first missing one, and only the gap above it is held.
    EXPECT_EQ(seqs.below(), next);
    EXPECT_EQ(seqs.above(), static_cast<std::size_t>(std::count_if(
                                model.begin(), model.end(), [&](uint64_t s) { return s > next; })));
  }
}

TEST(SeqSet, TakingOutArrivalsWhoseDataNeverCameAgreesWithAPlainSet) {
  std::mt19937_64 random(11);
  for (int round = 0; round < 200; ++round) {
    SeqSet seqs;
    std::set<uint64_t> model;
    for (int step = 0; step < 300; ++step) {
      const uint64_t seq = 1 + random() % 64;
      if (random() % 4 == 0) {
        seqs.erase(seq);
        model.erase(seq);
      } else {
        ASSERT_EQ(seqs.insert(seq), model.insert(seq).second) << "seq " << seq;
      }
    }
    for (uint64_t seq = 1; seq < 80; ++seq)
      ASSERT_EQ(seqs.contains(seq), model.count(seq) != 0) << "seq " << seq;
  }
}

class KeptArrivalsTest : public ::testing::Test {
 protected:
  KeptArrivals::Arrival arrival(uint32_t node, uint64_t seq, uint32_t rank, uint64_t bytes) {
    KeptArrivals::Arrival a;
    a.node = node;
    a.seq = seq;
    a.rank = rank;
    a.header = std::to_string(node) + "/" + std::to_string(seq) + "/" + std::to_string(rank);
    if (bytes > 0) a.data = staging.take(bytes);
    return a;
  }
  HostEngine engine{EngineOptions{}, "test"};
  StagingPool staging{engine, 0};
};

TEST_F(KeptArrivalsTest, ANodeGetsAgainWhatItsRanksDidNotCompleteAndNothingElse) {
  KeptArrivals kept(1 << 20);
  for (uint64_t seq = 1; seq <= 6; ++seq)
    for (uint32_t node : {1u, 2u}) kept.keep(arrival(node, seq, 0, 1000));
  kept.release(1, 1);  // node 1's ranks completed seq 1 (NodeDone)
  kept.release(1, 3);
  std::optional<uint64_t> lost;
  // Node 1 comes back: its ranks had completed everything before 4.
  const auto again = kept.to_send_again(
      1, [](uint64_t seq) { return seq < 4; }, lost);
  EXPECT_FALSE(lost);
  std::vector<uint64_t> seqs;
  for (const auto& a : again) {
    EXPECT_EQ(a.node, 1u);
    ASSERT_TRUE(a.data);
    seqs.push_back(a.seq);
  }
  EXPECT_EQ(seqs, (std::vector<uint64_t>{4, 5, 6}));  // in order, node 2's untouched
  EXPECT_EQ(kept.size(), 3u + 6u);
  EXPECT_EQ(kept.bytes(), 9u * 1000u);
  // Sending again keeps them until the node says it completed them.
  for (uint64_t seq = 4; seq <= 6; ++seq) kept.release(1, seq);
  for (uint64_t seq = 1; seq <= 6; ++seq) kept.release(2, seq);
  EXPECT_EQ(kept.size(), 0u);
  EXPECT_EQ(kept.bytes(), 0u);
}

TEST_F(KeptArrivalsTest, OverTheBoundTheOldestGoAndANodeStillNeedingOneCannotResume) {
  KeptArrivals kept(3000);
  for (uint64_t seq = 1; seq <= 5; ++seq) kept.keep(arrival(1, seq, 0, 1000));
  EXPECT_LE(kept.bytes(), 3000u);
  EXPECT_EQ(kept.size(), 3u);  // seqs 3, 4, 5
  std::optional<uint64_t> lost;
  kept.to_send_again(
      1, [](uint64_t seq) { return seq < 2; }, lost);
  ASSERT_TRUE(lost);
  EXPECT_EQ(*lost, 2u);  // dropped over the bound, and node 1 still needs it
  // Once the node completed what went over the bound, nothing is lost.
  KeptArrivals again(3000);
  for (uint64_t seq = 1; seq <= 5; ++seq) again.keep(arrival(1, seq, 0, 1000));
  again.release(1, 1);
  again.release(1, 2);
  const auto rest = again.to_send_again(
      1, [](uint64_t) { return false; }, lost);
  EXPECT_FALSE(lost);
  EXPECT_EQ(rest.size(), 3u);
}

TEST_F(KeptArrivalsTest, ArrivalsWithoutDataAndTheSameArrivalKeptTwiceCountOnce) {
  KeptArrivals kept(1 << 20);
  kept.keep(arrival(1, 1, 0, 0));  // a failure or a rank with nothing for node 1
  kept.keep(arrival(1, 1, 1, 500));
  kept.keep(arrival(1, 1, 1, 700));  // the same (node, seq, rank) again: the newer copy
  EXPECT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept.bytes(), 700u);
  std::optional<uint64_t> lost;
  const auto again = kept.to_send_again(
      1, [](uint64_t) { return false; }, lost);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_FALSE(again[0].data);
  EXPECT_EQ(again[1].data->bytes, 700u);
}

class NodeAddressBookTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/iris-address-book-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    directory = dir;
    path = directory + "/irisd.sock.nodes";
  }
  void TearDown() override { std::system(("rm -rf " + directory).c_str()); }
  std::string directory, path;
};

TEST_F(NodeAddressBookTest, TheNextIrisdFindsWhereNodesMovedByKeyAndSecretOnly) {
  const std::string moved("\x00\x01new-address\xff", 15);
  {
    NodeAddressBook book(path);
    book.learned("job", "0123456789abcdef-secret", 2, moved);
    book.learned("other-job", "0123456789abcdef-secret", 1, "elsewhere");
  }
  NodeAddressBook next(path);  // a restarted irisd reads what the previous one learned
  std::vector<std::string> addresses = {"a", "b", "c"};
  next.update("job", "0123456789abcdef-secret", addresses);
  EXPECT_EQ(addresses, (std::vector<std::string>{"a", "b", moved}));
  // Another secret under the same key is another communicator: nothing moves.
  std::vector<std::string> forged = {"a", "b", "c"};
  next.update("job", "not-the-secret-at-all", forged);
  EXPECT_EQ(forged, (std::vector<std::string>{"a", "b", "c"}));
  // The secret is never written.
  std::ifstream file(path);
  const std::string text((std::istreambuf_iterator<char>(file)), {});
  EXPECT_EQ(text.find("0123456789abcdef"), std::string::npos);
  // A communicator that is gone leaves no entry behind, for this irisd or the next.
  next.forget("job", "0123456789abcdef-secret");
  NodeAddressBook after(path);
  std::vector<std::string> again = {"a", "b", "c"};
  after.update("job", "0123456789abcdef-secret", again);
  EXPECT_EQ(again, (std::vector<std::string>{"a", "b", "c"}));
  std::vector<std::string> kept = {"x", "y"};
  after.update("other-job", "0123456789abcdef-secret", kept);
  EXPECT_EQ(kept, (std::vector<std::string>{"x", "elsewhere"}));
}

TEST_F(NodeAddressBookTest, AFileItCannotReadCostsOnlyItsBadLines) {
  {
    std::ofstream out(path);
    out << "not a line\nffff 1 zz\n12 4294967296 6161\n";
  }
  NodeAddressBook book(path);
  book.learned("job", "0123456789abcdef-secret", 0, "fresh");
  std::vector<std::string> addresses = {"old"};
  NodeAddressBook(path).update("job", "0123456789abcdef-secret", addresses);
  EXPECT_EQ(addresses, std::vector<std::string>{"fresh"});
}

}  // namespace
}  // namespace iris::daemon
