// HostEngine: every copy lands and completes once, whether its worker was spinning or asleep; the
// eventfd announces completions while the progress loop sleeps (armed), stays quiet while it is
// awake, and arming with a completion already waiting refuses the sleep; latency copies pass the
// bulk queued before them without stopping it; each completion carries its workers' memcpy time.
#include "daemon/engines/host/host_engine.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "tests/support/client_helpers.hpp"

namespace iris::daemon {
namespace {

using namespace std::chrono_literals;

EngineOptions host_options(uint32_t workers) {
  EngineOptions options;
  options.kind = "host";
  options.workers = workers;
  options.chunk_bytes = 4096;
  return options;
}

bool fd_readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

// The engine's completions, polled until `n` came (or the bound of eventually() passed).
std::vector<CopyCompletion> completions(HostEngine& engine, std::size_t n) {
  std::vector<CopyCompletion> out;
  testing::eventually([&] {
    engine.poll(out);
    return out.size() >= n;
  });
  return out;
}

struct Buffers {
  std::vector<std::byte> src, dst;
  explicit Buffers(std::size_t bytes) : src(bytes), dst(bytes) {
    for (std::size_t i = 0; i < bytes; ++i) src[i] = std::byte(i * 7 + 3);
  }
  CopyRequest copy(uint64_t cookie) { return {src.data(), dst.data(), src.size(), cookie}; }
  bool landed() const { return std::memcmp(src.data(), dst.data(), src.size()) == 0; }
};

TEST(HostEngine, AnArmedEngineAnnouncesACompletionOnItsFd) {
  HostEngine engine(host_options(2), "test");
  Buffers b(10000);  // three chunks, shared by the workers
  ASSERT_TRUE(engine.arm_completion_wakeup()) << "nothing waits yet: the loop may sleep";
  const CopyRequest copy = b.copy(7);
  engine.submit(std::span<const CopyRequest>(&copy, 1));
  EXPECT_TRUE(fd_readable(engine.completion_fd(), 10000)) << "a sleeping loop was not woken";
  engine.disarm_completion_wakeup();
  auto done = completions(engine, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].cookie, 7u);
  EXPECT_EQ(done[0].code, ErrorCode::kOk);
  EXPECT_EQ(done[0].bytes, 10000u);
  EXPECT_TRUE(b.landed());
}

TEST(HostEngine, AnAwakeLoopIsNotSignalledAndArmingWithACompletionWaitingRefusesTheSleep) {
  HostEngine engine(host_options(2), "test");
  // Never armed: the copy completes through poll() alone, and the fd stays quiet.
  Buffers quiet(100);
  const CopyRequest first = quiet.copy(1);
  engine.submit(std::span<const CopyRequest>(&first, 1));
  ASSERT_EQ(completions(engine, 1).size(), 1u);
  EXPECT_TRUE(quiet.landed());
  EXPECT_FALSE(fd_readable(engine.completion_fd(), 0))
      << "the fd was written although the loop was awake";
  // A copy that finishes while the loop is awake: arming must see it and refuse the sleep.
  Buffers b(100);
  const CopyRequest copy = b.copy(2);
  engine.submit(std::span<const CopyRequest>(&copy, 1));
  const bool refused = testing::eventually([&] {
    const bool slept_through = engine.arm_completion_wakeup();
    engine.disarm_completion_wakeup();
    return !slept_through;
  });
  EXPECT_TRUE(refused) << "a finished copy did not keep the loop from sleeping";
  auto done = completions(engine, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(b.landed());
  EXPECT_TRUE(engine.arm_completion_wakeup()) << "polled: nothing waits any more";
  engine.disarm_completion_wakeup();
}

TEST(HostEngine, EveryCopyCompletesOnceWhetherItsWorkersSpinOrSleep) {
  HostEngine engine(host_options(3), "test");
  std::vector<Buffers> buffers;
  for (std::size_t i = 0; i < 40; ++i) buffers.emplace_back(1 + i * 997);
  std::set<uint64_t> seen;
  for (uint64_t round = 0; round < 4; ++round) {
    // Back to back (workers still spinning), then after the workers went to sleep.
    for (uint64_t i = 0; i < buffers.size(); ++i) {
      std::fill(buffers[i].dst.begin(), buffers[i].dst.end(), std::byte{0});
      const CopyRequest copy = buffers[i].copy(round * 1000 + i);
      engine.submit(std::span<const CopyRequest>(&copy, 1));
    }
    auto done = completions(engine, buffers.size());
    ASSERT_EQ(done.size(), buffers.size()) << "round " << round;
    for (const CopyCompletion& c : done) {
      EXPECT_TRUE(seen.insert(c.cookie).second) << "cookie " << c.cookie << " completed twice";
      EXPECT_EQ(c.code, ErrorCode::kOk);
    }
    for (const Buffers& b : buffers) EXPECT_TRUE(b.landed());
    std::this_thread::sleep_for(round % 2 == 0 ? 20ms : 0ms);
  }
  EXPECT_EQ(seen.size(), 4 * buffers.size());
}

// One worker handed, in one submission, a bulk copy of `bulk_chunks` 4 KiB chunks (cookie 1) and
// after it a latency copy of `latency_chunks` (cookie 2): the cookies in the order they finished,
// once both landed.
std::vector<uint64_t> finish_order(std::size_t bulk_chunks, std::size_t latency_chunks) {
  HostEngine engine(host_options(1), "test");
  EXPECT_TRUE(engine.serves_latency_first());
  Buffers bulk(bulk_chunks * 4096);
  Buffers latency(latency_chunks * 4096);
  CopyRequest both[] = {bulk.copy(1), latency.copy(2)};
  both[1].queue = EngineQueue::kLatency;
  engine.submit(both);
  std::vector<uint64_t> order;
  for (const CopyCompletion& c : completions(engine, 2)) order.push_back(c.cookie);
  EXPECT_TRUE(bulk.landed());
  EXPECT_TRUE(latency.landed());
  return order;
}

// A latency copy's chunks go before the bulk chunks queued ahead of them: a one-chunk latency copy
// after a bulk copy of a thousand finishes first (first in, first out it would finish last).
TEST(HostEngine, ALatencyCopyPassesTheBulkChunksQueuedBeforeIt) {
  EXPECT_EQ(finish_order(1024, 1), (std::vector<uint64_t>{2, 1}))
      << "the latency copy waited for the bulk copy queued before it";
}

// ...but latency work never stops bulk: a two-chunk bulk copy before a latency copy of fifty
// finishes first (a bulk chunk after each run of latency chunks).
TEST(HostEngine, ARunOfLatencyChunksLetsAWaitingBulkChunkThrough) {
  EXPECT_EQ(finish_order(2, 50), (std::vector<uint64_t>{1, 2}))
      << "bulk waited for all of the latency copy's chunks";
}

// A copy's engine time is its chunks' memcpy time, summed over the workers that did them: more
// than nothing, less than the wall time from submit to completion times the workers (the time
// queued or waiting for the next poll is nobody's).
TEST(HostEngine, ACompletionCarriesItsWorkersCopyTime) {
  constexpr uint32_t kWorkers = 2;
  HostEngine engine(host_options(kWorkers), "test");
  Buffers buffers(8 << 20);  // 2048 chunks of 4 KiB
  const CopyRequest copy = buffers.copy(7);
  const auto start = std::chrono::steady_clock::now();
  engine.submit(std::span<const CopyRequest>(&copy, 1));
  auto done = completions(engine, 1);
  const auto wall = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(buffers.landed());
  EXPECT_GT(done[0].engine_ns, 0u);
  EXPECT_LE(done[0].engine_ns,
            kWorkers * static_cast<uint64_t>(
                           std::chrono::duration_cast<std::chrono::nanoseconds>(wall).count()));
}

}  // namespace
}  // namespace iris::daemon
