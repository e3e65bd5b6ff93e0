// The staging pool hands out pinned blocks that are pinned once and reused: a miss pins a slab of
// its size class (256 KiB of blocks) with one call, released blocks come back to the next take of
// their class, blocks out at once never overlap, the bound on cached bytes holds (past it blocks
// are dropped, and a slab is unpinned with its last block), and blocks released from other
// threads, or after the pool itself is gone, are handled.
#include "daemon/scaleout/staging_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "daemon/engines/engine.hpp"

namespace iris::daemon {
namespace {

// An engine that only pins, counting what it is asked to pin and how many pins are still held:
// the pool's whole point is how often that happens (the GPU engines' pinning is a driver call).
// The pool never copies.
class PinCountingEngine : public Engine {
 public:
  PinCountingEngine() : Engine(0) {}
  const EngineDescription& description() const override { return description_; }
  void stop() override {}  // copies nothing
  void submit(std::span<const CopyRequest>) override {
    throw std::logic_error("the staging pool never copies");
  }
  std::size_t poll(std::vector<CopyCompletion>&) override { return 0; }
  int completion_fd() const override { return -1; }
  std::shared_ptr<void> prepare_host_memory(void* base, uint64_t bytes) override {
    ++pins;
    ++held;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % 4096, 0u);
    EXPECT_EQ(bytes % 4096, 0u);
    return std::shared_ptr<void>(base, [this](void*) { --held; });
  }
  std::atomic<int> pins{0};
  std::atomic<int> held{0};

 private:
  EngineDescription description_{};
};

constexpr uint64_t kSlab = 256 * 1024;

TEST(StagingPool, OnePinServesASlabOfBlocksThatNeverOverlap) {
  PinCountingEngine engine;
  StagingPool pool(engine, 1 << 20);
  std::vector<std::shared_ptr<StagedData>> out;
  std::set<std::byte*> starts;
  for (uint64_t i = 0; i < kSlab / 4096; ++i) {
    out.push_back(pool.take(3000));
    EXPECT_EQ(out.back()->bytes, 3000u);
    starts.insert(out.back()->data);
    std::memset(out.back()->data, static_cast<int>(i), 4096);  // the whole page is there
  }
  EXPECT_EQ(engine.pins.load(), 1) << "64 blocks of 4 KiB should come from one slab";
  EXPECT_EQ(starts.size(), out.size());
  for (std::size_t i = 0; i < out.size(); ++i)
    for (int b = 0; b < 4096; ++b)
      ASSERT_EQ(std::to_integer<std::size_t>(out[i]->data[b]), i % 256) << "block " << i;
  out.push_back(pool.take(100));  // the slab is all out: a second one
  EXPECT_EQ(engine.pins.load(), 2);
  EXPECT_EQ(pool.pins(), 2u);
}

TEST(StagingPool, AReleasedBlockIsReusedForItsSizeClassWithoutPinningAgain) {
  PinCountingEngine engine;
  StagingPool pool(engine, 1 << 20);
  std::byte* first = nullptr;
  {
    auto a = pool.take(kSlab);  // a class whose slab is one block
    first = a->data;
  }
  for (uint64_t bytes : {kSlab / 2 + 1, kSlab}) {
    auto again = pool.take(bytes);
    EXPECT_EQ(again->data, first) << bytes << " bytes: the block should be reused";
    EXPECT_EQ(again->bytes, bytes);
  }
  EXPECT_EQ(engine.pins.load(), 1);
  // 256 KiB + 1 is the next class (512 KiB): a new block, pinned once, then reused.
  std::byte* second = pool.take(kSlab + 1)->data;
  EXPECT_NE(second, first);
  EXPECT_EQ(pool.take(2 * kSlab)->data, second);
  EXPECT_EQ(engine.pins.load(), 2);
  EXPECT_EQ(pool.cached_bytes(), 3 * kSlab);
}

TEST(StagingPool, PastTheBoundReleasedBlocksAreDroppedAndTheirSlabsUnpinned) {
  PinCountingEngine engine;
  StagingPool pool(engine, 3 * kSlab);
  {
    std::vector<std::shared_ptr<StagedData>> out;
    for (int i = 0; i < 5; ++i) out.push_back(pool.take(kSlab));
    EXPECT_EQ(engine.held.load(), 5);
  }
  EXPECT_EQ(pool.cached_bytes(), 3 * kSlab);
  EXPECT_EQ(engine.held.load(), 3) << "two slabs over the bound should have been unpinned";
  pool.take(4 * kSlab);  // larger than the whole bound: never kept
  EXPECT_EQ(engine.held.load(), 3);
  EXPECT_EQ(pool.cached_bytes(), 3 * kSlab);
}

TEST(StagingPool, BlocksReleasedOnOtherThreadsAndAfterThePoolAreHandled) {
  PinCountingEngine engine;
  std::vector<std::shared_ptr<StagedData>> late;
  {
    StagingPool pool(engine, 1 << 20);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      std::vector<std::shared_ptr<StagedData>> mine;
      for (int i = 0; i < 50; ++i) mine.push_back(pool.take(4096u << (i % 8)));
      threads.emplace_back([mine = std::move(mine)]() mutable { mine.clear(); });
    }
    for (auto& t : threads) t.join();
    late.push_back(pool.take(100));
    late.push_back(pool.take(1 << 16));
  }
  // The pool is gone: only the slabs of the two blocks still out stay pinned, usable until
  // released, then unpinned and freed too.
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
