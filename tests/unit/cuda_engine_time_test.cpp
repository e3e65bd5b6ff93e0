// The engine time the cuda engine reports with each completion (CopyCompletion::engine_ns), over
// the fake driver table: a stream serves its batches one after the other, so batches that
// retire together share the time since the first of them was issued by bytes, and a batch
// issued to an idle stream is charged from its issue, not from the stream's last retirement.
// The bounds come from the test's own clock read around the engine's calls. No GPU needed.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include "daemon/engines/cuda/cuda_engine.hpp"
#include "tests/unit/fake_cuda_driver.hpp"

namespace iris::daemon {
namespace {

using fake_cuda::fake;
using Clock = std::chrono::steady_clock;

uint64_t ns(Clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

class CudaEngineTime : public ::testing::Test {
 protected:
  void SetUp() override {
    fake = fake_cuda::FakeDriverState{};
    fake.copy_engines = 3;
    std::string why;
    engine = CudaEngine::create(driver, EngineOptions{}, "test", why);
    ASSERT_NE(engine, nullptr) << why;
  }
  // One latency copy (always the device's last stream) of `bytes`, named `cookie`.
  void copy(uint64_t bytes, uint64_t cookie) {
    CopyRequest c{host.data(), host.data(), bytes, cookie, kHostMemory, 0};
    c.queue = EngineQueue::kLatency;
    engine->submit(std::span<const CopyRequest>(&c, 1));
  }
  // The copies' counters land, then one poll: its completions by cookie.
  std::map<uint64_t, CopyCompletion> land_and_poll() {
    fake_cuda::land_writes();
    std::vector<CopyCompletion> out;
    engine->poll(out);
    std::map<uint64_t, CopyCompletion> by_cookie;
    for (const CopyCompletion& c : out) by_cookie[c.cookie] = c;
    return by_cookie;
  }
  cuda::Driver driver = fake_cuda::fake_driver();
  std::unique_ptr<CudaEngine> engine;
  std::vector<std::byte> host = std::vector<std::byte>(4096);
};

TEST_F(CudaEngineTime, BatchesRetiredTogetherShareTheStreamsTimeByBytes) {
  const auto before_first = Clock::now();
  copy(3 << 20, 1);
  const auto after_first = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  copy(1 << 20, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto before_poll = Clock::now();
  auto done = land_and_poll();
  const auto after_poll = Clock::now();
  ASSERT_EQ(done.size(), 2u);
  const uint64_t a = done.at(1).engine_ns, b = done.at(2).engine_ns;
  // Served from the first's issue until the poll, three quarters of it the 3 MiB copy's.
  EXPECT_GE(a + b + 2, ns(before_poll - after_first));
  EXPECT_LE(a + b, ns(after_poll - before_first));
  EXPECT_NEAR(static_cast<double>(a) / static_cast<double>(b), 3.0, 0.01);
}

TEST_F(CudaEngineTime, ABatchOnAnIdleStreamIsChargedFromItsIssue) {
  copy(4096, 1);
  ASSERT_EQ(land_and_poll().size(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the stream idles
  const auto before_issue = Clock::now();
  copy(4096, 2);
  auto done = land_and_poll();
  const auto after_poll = Clock::now();
  ASSERT_EQ(done.size(), 1u);
  // Not the 30 ms the stream stood idle since its last batch retired.
  EXPECT_GT(done.at(2).engine_ns, 0u);
  EXPECT_LE(done.at(2).engine_ns, ns(after_poll - before_issue));
}

}  // namespace
}  // namespace iris::daemon
