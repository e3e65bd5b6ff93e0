// The staging pool hands out pinned blocks that are pinned once and reused: a released block
// comes back to the next take of its size class, the engine is asked to pin only new blocks, the
// bound on cached bytes holds (past it, blocks are unpinned and freed), and blocks released from
// other threads, or after the pool itself is gone, are handled.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "daemon/engines/engine.hpp"
#include "daemon/scaleout/staging_pool.hpp"

namespace iris::daemon {
namespace {

// An engine that only pins, counting what it is asked to pin and how many pins are still held:
// the pool's whole point is how often that happens (the GPU engines' pinning is a driver call).
// The pool never copies.
class PinCountingEngine : public Engine {
 public:
  PinCountingEngine() : Engine(0) {}
  const EngineDescription& description() const override { return description_; }
  void submit(std::span<const CopyRequest>) override {
    throw std::logic_error("the staging pool never copies");
  }
  std::size_t poll(std::vector<CopyCompletion>&) override { return 0; }
  int completion_fd() const override { return -1; }
  std::shared_ptr<void> prepare_host_memory(void* base, uint64_t bytes) override {
    ++pins;
    ++held;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % 4096, 0u);
    EXPECT_GE(bytes, 4096u);
    return std::shared_ptr<void>(base, [this](void*) { --held; });
  }
  std::atomic<int> pins{0};
  std::atomic<int> held{0};

 private:
  EngineDescription description_{};
};

TEST(StagingPool, AReleasedBlockIsReusedForItsSizeClassWithoutPinningAgain) {
  PinCountingEngine engine;
  StagingPool pool(engine, 1 << 20);
  std::byte* first = nullptr;
  {
    auto a = pool.take(64);
    EXPECT_EQ(a->bytes, 64u);
    std::memset(a->data, 0xAB, 4096);  // a whole page is there
    first = a->data;
  }
  EXPECT_EQ(pool.cached_bytes(), 4096u);
  for (uint64_t bytes : {1ull, 100ull, 4096ull}) {
    auto again = pool.take(bytes);
    EXPECT_EQ(again->data, first) << bytes << " bytes: the page should be reused";
    EXPECT_EQ(again->bytes, bytes);
  }
  EXPECT_EQ(engine.pins.load(), 1);
  // 4097 bytes is another size class (8 KiB): a new block, pinned once, then reused.
  std::byte* second = pool.take(4097)->data;
  EXPECT_NE(second, first);
  EXPECT_EQ(pool.take(8192)->data, second);
  EXPECT_EQ(engine.pins.load(), 2);
  EXPECT_EQ(pool.pinned_blocks(), 2u);
  EXPECT_EQ(pool.cached_bytes(), 4096u + 8192u);
}

TEST(StagingPool, BlocksOutAtOnceAreDistinctAndNeverOverlap) {
  PinCountingEngine engine;
  StagingPool pool(engine, 1 << 20);
  std::vector<std::shared_ptr<StagedData>> out;
  for (int i = 0; i < 16; ++i) {
    out.push_back(pool.take(3000));
    std::memset(out.back()->data, i, 3000);
  }
  for (int i = 0; i < 16; ++i)
    for (int b = 0; b < 3000; ++b)
      ASSERT_EQ(std::to_integer<int>(out[i]->data[b]), i) << "block " << i << " was overwritten";
  EXPECT_EQ(engine.pins.load(), 16);
}

TEST(StagingPool, PastTheBoundReleasedBlocksAreUnpinnedAndFreed) {
  PinCountingEngine engine;
  StagingPool pool(engine, 3 * 4096);
  {
    std::vector<std::shared_ptr<StagedData>> out;
    for (int i = 0; i < 5; ++i) out.push_back(pool.take(4096));
    EXPECT_EQ(engine.held.load(), 5);
  }
  EXPECT_EQ(pool.cached_bytes(), 3u * 4096);
  EXPECT_EQ(engine.held.load(), 3) << "two blocks over the bound should have been unpinned";
  // A block larger than the whole bound is never kept.
  pool.take(1 << 20);
  EXPECT_EQ(engine.held.load(), 3);
  EXPECT_EQ(pool.cached_bytes(), 3u * 4096);
}

TEST(StagingPool, BlocksReleasedOnOtherThreadsAndAfterThePoolAreHandled) {
  PinCountingEngine engine;
  std::vector<std::shared_ptr<StagedData>> late;
  {
    StagingPool pool(engine, 1 << 20);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      std::vector<std::shared_ptr<StagedData>> mine;
      for (int i = 0; i < 50; ++i) mine.push_back(pool.take(64 << (i % 8)));
      threads.emplace_back([mine = std::move(mine)]() mutable { mine.clear(); });
    }
    for (auto& t : threads) t.join();
    EXPECT_LE(pool.cached_bytes(), 1u << 20);
    late.push_back(pool.take(100));
    late.push_back(pool.take(1 << 16));
  }
  // The pool is gone: its cached blocks were unpinned; the two still out stay usable until
  // released, then are unpinned and freed too.
  EXPECT_EQ(engine.held.load(), 2);
  std::memset(late[0]->data, 1, 100);
  late.clear();
  EXPECT_EQ(engine.held.load(), 0);
}

TEST(StagingPool, AnImpossibleSizeIsRefusedWithLimitExceeded) {
  PinCountingEngine engine;
  StagingPool pool(engine, 1 << 20);
  try {
    pool.take(UINT64_MAX);
    FAIL() << "staging 2^64-1 bytes should have been refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLimitExceeded);
  }
  EXPECT_EQ(engine.pins.load(), 0);
}

}  // namespace
}  // namespace iris::daemon
