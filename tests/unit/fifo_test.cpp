// The fair share's queue (daemon/fifo.hpp): first in, first out across wrap-around and growth,
// its room kept when emptied (no allocation on the next use) unless a burst made it large.
#include "daemon/fifo.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <random>

namespace iris::daemon {
namespace {

TEST(Fifo, RandomPushesAndPopsComeOutInOrderAcrossWrapAndGrowth) {
  Fifo<uint64_t> fifo;
  std::deque<uint64_t> model;
  std::mt19937 rng(5);
  uint64_t next = 0;
  for (int step = 0; step < 20000; ++step) {
    if (rng() % 3 != 0 || model.empty()) {
      fifo.push_back(next);
      model.push_back(next++);
    } else {
      ASSERT_EQ(fifo.front(), model.front()) << "step " << step;
      fifo.pop_front();
      model.pop_front();
    }
    ASSERT_EQ(fifo.size(), model.size());
    ASSERT_EQ(fifo.empty(), model.empty());
  }
  EXPECT_TRUE(fifo.contains(model.back()));
  EXPECT_FALSE(fifo.contains(next));
  while (!model.empty()) {
    ASSERT_EQ(fifo.front(), model.front());
    fifo.pop_front();
    model.pop_front();
  }
  EXPECT_TRUE(fifo.empty());
}

TEST(Fifo, EmptiedItKeepsItsRoomUnlessABurstMadeItLarge) {
  Fifo<uint32_t> fifo;
  for (uint32_t i = 0; i < 100; ++i) fifo.push_back(i);
  const uint32_t* room = &fifo.front();
  fifo.clear();
  EXPECT_TRUE(fifo.empty());
  EXPECT_FALSE(fifo.contains(0));
  fifo.push_back(7);
  EXPECT_EQ(&fifo.front(), room) << "the same room serves the next use";
  EXPECT_EQ(fifo.front(), 7u);

  for (uint32_t i = 0; i < 10 * Fifo<uint32_t>::kKeptRoom; ++i) fifo.push_back(i);
  fifo.clear();
  fifo.push_back(1);
  EXPECT_EQ(fifo.size(), 1u);
  EXPECT_EQ(fifo.front(), 1u) << "a burst's room is let go and the queue still works";
}

}  // namespace
}  // namespace iris::daemon
