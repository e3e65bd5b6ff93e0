#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "iris/shared/descriptor.hpp"
#include "iris/shared/segment_layout.hpp"
#include "iris/shared/spsc_ring.hpp"

namespace iris::shm {
namespace {

struct Ring {
  explicit Ring(uint32_t depth) : entries(depth) {}
  RingControl control{};
  std::vector<SubmitEntry> entries;
  RingProducer<SubmitEntry> producer() {
    return {&control, entries.data(), static_cast<uint32_t>(entries.size())};
  }
  RingConsumer<SubmitEntry> consumer() {
    return {&control, entries.data(), static_cast<uint32_t>(entries.size())};
  }
};

SubmitEntry entry(uint64_t seq) {
  SubmitEntry e{};
  e.seq = seq;
  e.bytes = seq * 3;
  return e;
}

TEST(Ring, HeadAndTailOnSeparateCacheLines) {
  RingControl c;
  const auto head = reinterpret_cast<uintptr_t>(&c.head);
  const auto tail = reinterpret_cast<uintptr_t>(&c.tail);
  EXPECT_GE(tail - head, kCacheLine);
  EXPECT_EQ(head % kCacheLine, 0u);
  EXPECT_EQ(tail % kCacheLine, 0u);
}

// What iris_ring_full_total counts: the consumer saw every entry taken when it looked.
TEST(Ring, TheConsumerNoticesAFullRingOnce) {
  Ring ring(4);
  auto p = ring.producer();
  auto c = ring.consumer();
  SubmitEntry out;
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(p.try_push(entry(i)));
  ASSERT_EQ(c.try_pop(out), PopResult::kEntry);
  EXPECT_FALSE(c.take_found_full()) << "3 of 4 is not full";
  while (c.try_pop(out) == PopResult::kEntry) {
  }
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(p.try_push(entry(i)));
  ASSERT_EQ(c.try_pop(out), PopResult::kEntry);
  EXPECT_TRUE(c.take_found_full());
  EXPECT_FALSE(c.take_found_full()) << "reported once per time it was seen";
}

TEST(Ring, FullRingRefusesAndKeepsEveryEntry) {
  Ring ring(4);
  auto p = ring.producer();
  auto c = ring.consumer();
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(p.try_push(entry(i)));
  EXPECT_FALSE(p.try_push(entry(99)));  // full: refused, nothing overwritten
  SubmitEntry out;
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_EQ(c.try_pop(out), PopResult::kEntry);
    EXPECT_EQ(out.seq, i);
  }
  EXPECT_EQ(c.try_pop(out), PopResult::kEmpty);
  EXPECT_TRUE(p.try_push(entry(4)));  // room again once the consumer moved
}

TEST(Ring, WrapsAroundManyTimesInOrder) {
  Ring ring(8);
  auto p = ring.producer();
  auto c = ring.consumer();
  SubmitEntry out;
  uint64_t next_in = 0, next_out = 0;
  for (int round = 0; round < 1000; ++round) {
    const int burst = 1 + round % 8;
    for (int i = 0; i < burst; ++i) ASSERT_TRUE(p.try_push(entry(next_in++)));
    for (int i = 0; i < burst; ++i) {
      ASSERT_EQ(c.try_pop(out), PopResult::kEntry);
      ASSERT_EQ(out.seq, next_out++);
      ASSERT_EQ(out.bytes, out.seq * 3);
    }
  }
  EXPECT_EQ(ring.control.head.load(), next_in);
}

TEST(Ring, ConsumerReportsCorruptTail) {
  Ring ring(4);
  auto c = ring.consumer();
  ring.control.tail.store(1000);  // a hostile or broken producer
  SubmitEntry out;
  EXPECT_EQ(c.try_pop(out), PopResult::kCorrupt);
}

TEST(Ring, TwoThreadStressDeliversEachEntryOnceInOrder) {
  Ring ring(16);
  constexpr uint64_t kCount = 2'000'000;
  std::thread producer([&] {
    auto p = ring.producer();
    for (uint64_t i = 0; i < kCount; ++i)
      while (!p.try_push(entry(i))) std::this_thread::yield();
  });
  auto c = ring.consumer();
  SubmitEntry out;
  uint64_t expected = 0;
  while (expected < kCount) {
    const auto r = c.try_pop(out);
    ASSERT_NE(r, PopResult::kCorrupt);
    if (r == PopResult::kEmpty) continue;
    ASSERT_EQ(out.seq, expected);
    ASSERT_EQ(out.bytes, expected * 3);
    ++expected;
  }
  producer.join();
  EXPECT_EQ(c.try_pop(out), PopResult::kEmpty);
}

TEST(Segment, LayoutValidatesAndRejectsForeignMemory) {
  EXPECT_FALSE(SegmentLayout::for_depth(3));
  EXPECT_FALSE(SegmentLayout::for_depth(0));
  EXPECT_FALSE(SegmentLayout::for_depth(1u << 17));
  const auto layout = SegmentLayout::for_depth(64);
  ASSERT_TRUE(layout);
  std::vector<std::byte> memory(layout->total_bytes + kCacheLine);
  void* base =
      memory.data() + (kCacheLine - reinterpret_cast<uintptr_t>(memory.data()) % kCacheLine);
  EXPECT_FALSE(validate_segment(base, layout->total_bytes));  // zeroed: no magic
  initialize_segment(base, *layout, 7);
  const auto view = validate_segment(base, layout->total_bytes);
  ASSERT_TRUE(view);
  EXPECT_EQ(view->ring_depth, 64u);
  EXPECT_EQ(view->header->session_id, 7u);
  EXPECT_FALSE(validate_segment(base, layout->total_bytes - 1));  // mapped too little
}

TEST(Completion, PackedWordMatchesOnlyItsGeneration) {
  const uint64_t w = pack_completion(41, ErrorCode::kPeerLost);
  EXPECT_TRUE(completion_matches(w, 41));
  EXPECT_FALSE(completion_matches(w, 40));
  EXPECT_FALSE(completion_matches(0, 0));  // a fresh slot is not complete
  EXPECT_EQ(completion_code(w), ErrorCode::kPeerLost);
}

}  // namespace
}  // namespace iris::shm
