// First-use registration of GPU memory (GpuRegistrationCache) over a fake runtime and a fake
// session: one registration per allocation, memory freed and mapped again at the same address
// registered anew, VMM segments' allocations joined, the bound with least-recently-used
// eviction, and no registration ending while a request may still name it.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <set>

#include "client/gpu/gpu_registration_cache.hpp"
#include "tests/unit/fake_gpu_runtime.hpp"

namespace iris {
namespace {

constexpr uintptr_t kMiB = 1 << 20;

class FakeSession final : public GpuRegistrationCache::Session {
 public:
  struct Held {
    uintptr_t base;
    std::size_t bytes;
  };
  std::map<uint64_t, Held> live;  // what irisd holds now
  std::vector<uint64_t> deregistered;
  std::set<std::pair<uint32_t, uint32_t>> unfinished;  // (slot, generation) still in flight
  bool refuse = false;
  std::size_t limit = 1 << 20;  // buffers irisd accepts at once
  uint64_t next_id = 1;
  uint64_t connection = 0;                        // which irisd: a restart advances it
  std::function<void(uint64_t id)> after_answer;  // runs between irisd's answer and its return

  Registration register_range(void* base, std::size_t bytes) override {
    if (refuse || live.size() >= limit) throw Error(ErrorCode::kLimitExceeded, "too many buffers");
    live[next_id] = {reinterpret_cast<uintptr_t>(base), bytes};
    const Registration made{next_id++, connection};
    if (after_answer) after_answer(made.buffer_id);
    return made;
  }
  bool answered_by_current_irisd(uint64_t answered) const override {
    return answered == connection;
  }
  uint64_t current_connection() const override { return connection; }
  // As irisd answers an id it never got (a registration a resume left behind): not_found.
  bool unknown_is_not_found = false;
  void deregister(uint64_t id, uint64_t on) override {
    ASSERT_EQ(on, connection);
    if (unknown_is_not_found && !live.contains(id))
      throw Error(ErrorCode::kNotFound, "buffer " + std::to_string(id) + " is not registered");
    ASSERT_EQ(live.erase(id), 1u) << "deregistered twice or never registered: " << id;
    deregistered.push_back(id);
  }
  bool finished(uint32_t slot, uint32_t generation) const override {
    return !unfinished.contains({slot, generation});
  }
};

class GpuRegistrationCacheTest : public ::testing::Test {
 protected:
  FakeGpuRuntime runtime{GpuVendor::kCuda, true};
  FakeSession session;
  uint64_t next_block = 100;

  void allocate(uintptr_t base, std::size_t bytes) {
    runtime.chunks[base] = GpuChunk{base, bytes, next_block++};
  }
  // Locates and submits at once, as a collective does; returns the location.
  GpuRegistrationCache::Location use(GpuRegistrationCache& cache, uintptr_t ptr, uint64_t bytes,
                                     std::optional<GpuRegistrationCache::Use> by = std::nullopt,
                                     bool captured = false) {
    HeldRegistrations held;
    auto found = cache.locate(ptr, bytes);
    EXPECT_TRUE(found.has_value());
    held.add(cache, *found);
    if (by || captured) held.submitted(by);
    return *found;
  }
};

TEST_F(GpuRegistrationCacheTest, TensorsOfOneAllocationShareOneRegistrationAndALookupIsOneQuery) {
  allocate(0x10000000, 20 * kMiB);
  GpuRegistrationCache cache(runtime, session, 16);
  const auto a = use(cache, 0x10000000 + 4096, 1000);
  const auto b = use(cache, 0x10000000 + 5 * kMiB, 3 * kMiB);
  EXPECT_EQ(a.buffer_id, b.buffer_id);
  EXPECT_EQ(a.offset, 4096u);
  EXPECT_EQ(b.offset, 5 * kMiB);
  EXPECT_EQ(b.available, 15 * kMiB);
  ASSERT_EQ(session.live.size(), 1u);
  EXPECT_EQ(session.live.begin()->second.base, 0x10000000u);
  EXPECT_EQ(session.live.begin()->second.bytes, 20 * kMiB);

  const int before = runtime.chunk_queries;
  use(cache, 0x10000000 + 7 * kMiB, 64);
  EXPECT_EQ(runtime.chunk_queries - before, 1) << "a hit costs one driver query";
  EXPECT_EQ(session.live.size(), 1u);
}

// cudaMalloc puts small allocations side by side in one 2 MiB mapping; an IPC handle exports one
// allocation, so each is registered on its own (the mapping's range would be refused).
TEST_F(GpuRegistrationCacheTest, SmallAllocationsSharingAMappingAreRegisteredEachOnItsOwn) {
  allocate(0x30000000, 2 * kMiB);
  runtime.allocations = {{0x30000000, 4096}, {0x30000000 + 8192, 4096}};
  GpuRegistrationCache cache(runtime, session, 16);
  const auto a = use(cache, 0x30000000 + 100, 1000);
  const auto b = use(cache, 0x30000000 + 8192, 4096);
  EXPECT_NE(a.buffer_id, b.buffer_id);
  EXPECT_EQ(a.offset, 100u);
  EXPECT_EQ(a.available, 4096u - 100);
  EXPECT_EQ(b.offset, 0u);
  ASSERT_EQ(session.live.size(), 2u);
  EXPECT_EQ(session.live.at(a.buffer_id).base, 0x30000000u);
  EXPECT_EQ(session.live.at(a.buffer_id).bytes, 4096u);
  EXPECT_EQ(session.live.at(b.buffer_id).base, 0x30000000u + 8192);
  EXPECT_EQ(use(cache, 0x30000000 + 8192 + 10, 10).buffer_id, b.buffer_id) << "a hit";
}

TEST_F(GpuRegistrationCacheTest, MemoryFreedAndAllocatedAgainAtTheSameAddressIsRegisteredAnew) {
  allocate(0x20000000, 50 * kMiB);
  GpuRegistrationCache cache(runtime, session, 16);
  const auto first = use(cache, 0x20000000, 50 * kMiB);
  allocate(0x20000000, 50 * kMiB);  // cudaFree + cudaMalloc: same address, new block id
  const auto second = use(cache, 0x20000000, 50 * kMiB);
  EXPECT_NE(first.buffer_id, second.buffer_id);
  EXPECT_EQ(session.deregistered, std::vector<uint64_t>{first.buffer_id});
  EXPECT_EQ(session.live.size(), 1u);
}

TEST_F(GpuRegistrationCacheTest, FreedMemoryIsNoLongerGpuMemoryAndItsRegistrationEnds) {
  allocate(0x20000000, 2 * kMiB);
  GpuRegistrationCache cache(runtime, session, 16);
  use(cache, 0x20000000, 64);
  runtime.chunks.clear();
  EXPECT_FALSE(cache.locate(0x20000000, 64).has_value());
  EXPECT_TRUE(session.live.empty());
  EXPECT_FALSE(cache.locate(0x30000000, 64).has_value()) << "host memory is not registered";
}

TEST_F(GpuRegistrationCacheTest, FreedMemoryIsReleasedByTheNextNewRegistration) {
  GpuRegistrationCache cache(runtime, session, 1024);
  // A training loop's pattern: a large tensor per step, freed (empty_cache), a new one elsewhere.
  for (uintptr_t step = 0; step < 20; ++step) {
    runtime.chunks.clear();
    allocate(0x1000000000 + step * 1024 * kMiB, 1024 * kMiB);
    use(cache, 0x1000000000 + step * 1024 * kMiB, 1024 * kMiB);
    EXPECT_EQ(session.live.size(), 1u) << "step " << step << ": stale imports kept";
  }
}

TEST_F(GpuRegistrationCacheTest, VmmAllocationsARangeStraddlesAreJoinedWithOverlappingOnes) {
  // An expandable segment: 20 MiB allocations mapped back to back.
  for (uintptr_t i = 0; i < 4; ++i) allocate(0x300000000 + i * 20 * kMiB, 20 * kMiB);
  GpuRegistrationCache cache(runtime, session, 16);
  const uintptr_t seg = 0x300000000;
  const auto a = use(cache, seg + 3 * kMiB, 30 * kMiB);  // chunks 0-1
  EXPECT_EQ(a.offset, 3 * kMiB);
  const auto b = use(cache, seg + 35 * kMiB, 10 * kMiB);  // chunks 1-2: joined with 0-1
  EXPECT_NE(a.buffer_id, b.buffer_id);
  EXPECT_EQ(b.offset, 35 * kMiB) << "the joined registration starts at chunk 0";
  ASSERT_EQ(session.live.size(), 1u);
  EXPECT_EQ(session.live.begin()->second.bytes, 60 * kMiB);
  // Both tensors now hit the joined registration: no more registering.
  EXPECT_EQ(use(cache, seg + 3 * kMiB, 30 * kMiB).buffer_id, b.buffer_id);
  EXPECT_EQ(use(cache, seg + 35 * kMiB, 10 * kMiB).buffer_id, b.buffer_id);
  EXPECT_EQ(session.next_id, 3u);

  // One allocation of the segment unmapped and mapped anew: a range inside it re-registers,
  // ranges elsewhere in the old registration are not checked against it.
  allocate(seg + 40 * kMiB, 20 * kMiB);
  EXPECT_EQ(use(cache, seg, kMiB).buffer_id, b.buffer_id);
  const auto c = use(cache, seg + 41 * kMiB, kMiB);
  EXPECT_NE(c.buffer_id, b.buffer_id);
  EXPECT_EQ(session.live.size(), 1u);
}

TEST_F(GpuRegistrationCacheTest, RangeRunningPastMappedMemoryIsRefusedAndNothingIsRegistered) {
  allocate(0x40000000, 2 * kMiB);
  GpuRegistrationCache cache(runtime, session, 16);
  try {
    cache.locate(0x40000000 + kMiB, 2 * kMiB);
    FAIL() << "expected kOutOfRange";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
  }
  session.refuse = true;
  try {
    cache.locate(0x40000000, 64);
    FAIL() << "expected irisd's refusal";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLimitExceeded);
  }
  EXPECT_TRUE(session.live.empty());
  EXPECT_EQ(cache.registrations(), 0u);
}

TEST_F(GpuRegistrationCacheTest, BoundedLeastRecentlyUsedGoesFirst) {
  GpuRegistrationCache cache(runtime, session, 4);
  for (uintptr_t i = 0; i < 10; ++i) allocate(0x50000000 + i * 4 * kMiB, 2 * kMiB);
  for (uintptr_t i = 0; i < 4; ++i) use(cache, 0x50000000 + i * 4 * kMiB, 64);
  use(cache, 0x50000000, 64);  // allocation 0 used again: allocation 1 is now the oldest
  for (uintptr_t i = 4; i < 10; ++i) {
    use(cache, 0x50000000 + i * 4 * kMiB, 64);
    EXPECT_LE(session.live.size(), 4u);
  }
  EXPECT_EQ(cache.registrations(), 4u);
  EXPECT_EQ(session.deregistered.size(), 6u);
  EXPECT_EQ(session.deregistered.front(), 2u) << "allocation 1 (id 2) went first, not 0";
}

TEST_F(GpuRegistrationCacheTest, AtIrisdsBufferLimitTheLeastRecentlyUsedMakesRoom) {
  GpuRegistrationCache cache(runtime, session, 1024);
  session.limit = 2;  // irisd's per-session limit, reached long before the cache's own
  for (uintptr_t i = 0; i < 6; ++i) allocate(0x50000000 + i * 4 * kMiB, 2 * kMiB);
  session.unfinished.insert({1, 1});
  const auto busy = use(cache, 0x50000000, 64, GpuRegistrationCache::Use{1, 1});
  for (uintptr_t i = 1; i < 6; ++i) {
    use(cache, 0x50000000 + i * 4 * kMiB, 64);
    EXPECT_LE(session.live.size(), 2u);
    EXPECT_TRUE(session.live.contains(busy.buffer_id)) << "its request is still running";
  }
  // With every registration named by a running request, irisd's refusal reaches the caller.
  session.unfinished.insert({2, 1});
  use(cache, 0x50000000 + 5 * 4 * kMiB, 64, GpuRegistrationCache::Use{2, 1});
  try {
    cache.locate(0x50000000 + 4 * kMiB, 64);
    FAIL() << "expected kLimitExceeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLimitExceeded);
  }
}

TEST_F(GpuRegistrationCacheTest, ARegistrationARequestMayStillNameRetiresUntilItFinishes) {
  GpuRegistrationCache cache(runtime, session, 1);
  allocate(0x60000000, 2 * kMiB);
  allocate(0x70000000, 2 * kMiB);
  session.unfinished.insert({3, 7});
  const auto a = use(cache, 0x60000000, 64, GpuRegistrationCache::Use{3, 7});
  use(cache, 0x70000000, 64);  // evicts a, whose request is in flight
  EXPECT_EQ(cache.retiring(), 1u);
  EXPECT_TRUE(session.live.contains(a.buffer_id));
  session.unfinished.clear();
  EXPECT_FALSE(cache.locate(0x12345, 1).has_value());  // any lookup ends finished retirements
  EXPECT_EQ(cache.retiring(), 0u);
  EXPECT_FALSE(session.live.contains(a.buffer_id));
}

TEST_F(GpuRegistrationCacheTest, ALocatedRangeIsHeldUntilSubmittedOrDropped) {
  GpuRegistrationCache cache(runtime, session, 1);
  allocate(0x60000000, 2 * kMiB);
  allocate(0x70000000, 2 * kMiB);
  uint64_t held_id = 0;
  {
    HeldRegistrations held;
    const auto found = *cache.locate(0x60000000, 64);
    held_id = found.buffer_id;
    held.add(cache, found);
    // Another thread's lookup would evict the older one: held, it stays; the other goes.
    use(cache, 0x70000000, 64);
    EXPECT_TRUE(session.live.contains(held_id));
    EXPECT_EQ(session.live.size(), 1u);
  }  // never submitted (a later argument was refused): released, and evictable again
  use(cache, 0x70000000, 64);
  EXPECT_FALSE(session.live.contains(held_id));
  EXPECT_EQ(session.live.size(), 1u);
}

TEST_F(GpuRegistrationCacheTest, CapturedRegistrationsStayUntilTheirMemoryGoes) {
  GpuRegistrationCache cache(runtime, session, 1);
  allocate(0x60000000, 2 * kMiB);
  allocate(0x70000000, 2 * kMiB);
  const auto captured = use(cache, 0x60000000, 64, std::nullopt, /*captured=*/true);
  use(cache, 0x70000000, 64);  // over the bound: this one goes, not the captured one
  EXPECT_TRUE(session.live.contains(captured.buffer_id)) << "a graph replays it";
  EXPECT_EQ(session.live.size(), 1u);
  cache.forget_range(0x60000000, 0x60000000 + 2 * kMiB);  // the pool allocator frees it
  EXPECT_TRUE(session.live.empty());
}

// irisd restarts between its answer to a registration and the cache recording it: the session's
// resume (another thread) lists the registrations while the lookup still holds the cache, and
// must not wait for it; the answer, from the irisd gone since, is not listed and the range is
// registered again with the next one.
TEST_F(GpuRegistrationCacheTest, ARestartUnderARegistrationListsTheRestAndTheRangeIsMadeAgain) {
  GpuRegistrationCache cache(runtime, session, 16);
  allocate(0x60000000, 2 * kMiB);
  allocate(0x70000000, 2 * kMiB);
  const auto before = use(cache, 0x60000000, 64);
  std::vector<uint64_t> listed;
  uint64_t stale = 0;
  session.after_answer = [&](uint64_t id) {
    if (stale != 0) return;  // the next irisd's answer
    stale = id;
    session.live.erase(id);  // it went with its irisd
    ++session.connection;
    auto resume = std::async(std::launch::async, [&] {
      cache.for_each_registration(
          [&](uintptr_t, uintptr_t, uint64_t id, bool) { listed.push_back(id); });
    });
    ASSERT_EQ(resume.wait_for(std::chrono::seconds(10)), std::future_status::ready)
        << "the resume waited for the lookup, which waits for the resume";
  };
  const auto after = use(cache, 0x70000000, 64);
  EXPECT_EQ(listed, std::vector<uint64_t>{before.buffer_id});
  EXPECT_NE(stale, 0u);
  EXPECT_NE(after.buffer_id, stale);
  EXPECT_TRUE(session.live.contains(after.buffer_id));
  std::vector<uint64_t> now;
  cache.for_each_registration([&](uintptr_t, uintptr_t, uint64_t id, bool) { now.push_back(id); });
  EXPECT_EQ(now, (std::vector<uint64_t>{before.buffer_id, after.buffer_id}));
}

// Seen: torch.cuda.empty_cache() (or entering a graph capture) freed memory registered on first
// use, and the next resume registered it again, failed, and ended the session. The resume now
// learns which registrations' memory is gone (freed, or freed and allocated anew at the same
// address) and registers only the others; the gone ones end at their next lookup (irisd, which
// never got them, answers their deregistration as unknown), and memory at the same address is
// registered anew.
TEST_F(GpuRegistrationCacheTest, AResumeSkipsRegistrationsWhoseMemoryWasFreed) {
  GpuRegistrationCache cache(runtime, session, 16);
  allocate(0x80000000, 2 * kMiB);
  allocate(0x81000000, 2 * kMiB);
  allocate(0x82000000, 2 * kMiB);
  const auto kept = use(cache, 0x80000000, 64);
  const auto freed = use(cache, 0x81000000, 64);
  const auto moved = use(cache, 0x82000000, 64);
  runtime.chunks.erase(0x81000000);  // empty_cache
  runtime.chunks.erase(0x82000000);
  allocate(0x82000000, 2 * kMiB);  // another allocation at the same address
  std::map<uint64_t, bool> listed;
  cache.for_each_registration(
      [&](uintptr_t, uintptr_t, uint64_t id, bool present) { listed[id] = present; });
  EXPECT_EQ(listed, (std::map<uint64_t, bool>{
                        {kept.buffer_id, true}, {freed.buffer_id, false}, {moved.buffer_id, false}}));
  // The next irisd holds only what the resume registered again.
  ++session.connection;
  session.live = {{kept.buffer_id, {0x80000000, 2 * kMiB}}};
  session.unknown_is_not_found = true;
  const auto again = use(cache, 0x82000000, 64);
  EXPECT_NE(again.buffer_id, moved.buffer_id) << "new memory under the id of freed memory";
  EXPECT_TRUE(session.live.contains(again.buffer_id));
  EXPECT_EQ(use(cache, 0x80000000, 64).buffer_id, kept.buffer_id);
}

}  // namespace
}  // namespace iris
