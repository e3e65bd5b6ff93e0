// Which copy-engine stream the cuda engine puts a copy on (EngineQueue), over a fake driver table
// that records each copy's stream: latency copies on the device's last stream, bulk ones (split or
// not) on the others, kAny on every stream in turn; and which copies it lets irisd pace. No GPU
// needed.
#include <gtest/gtest.h>

#include <map>

#include "daemon/engines/cuda/cuda_engine.hpp"
#include "tests/unit/fake_cuda_driver.hpp"

namespace iris::daemon {
namespace {

using fake_cuda::fake;

class CudaEngineQueues : public ::testing::Test {
 protected:
  void SetUp() override {
    fake = fake_cuda::FakeDriverState{};
    fake.copy_engines = 3;
    std::string why;
    EngineOptions options;
    options.split_bytes = 64 << 20;
    engine = CudaEngine::create(driver, options, "test", why);
    ASSERT_NE(engine, nullptr) << why;
    // Streams are made per device: the signalling stream, then one per copy engine.
    for (CUstream s : fake.streams) ordered.push_back(s);
  }
  // Copies to GPU 0 from host memory, one submit.
  void copy(std::initializer_list<std::pair<uint64_t, EngineQueue>> sizes) {
    std::vector<CopyRequest> copies;
    for (const auto& [bytes, queue] : sizes) {
      CopyRequest c{host.data(), host.data(), bytes, copies.size(), kHostMemory, 0};
      c.queue = queue;
      copies.push_back(c);
    }
    engine->submit(copies);
  }
  // The copy engine (0-2 on GPU 0) that each copy went to, by its size (the driver is handed a
  // submit's copies grouped by stream).
  std::map<uint64_t, int> engines_used() const {
    std::map<uint64_t, int> used;
    for (const auto& c : fake.copies) {
      const auto at = std::find(ordered.begin(), ordered.end(), c.stream) - ordered.begin();
      used[c.bytes] = static_cast<int>(at) - 1;  // the device's first stream signals
    }
    return used;
  }
  cuda::Driver driver = fake_cuda::fake_driver();
  std::unique_ptr<CudaEngine> engine;
  std::vector<CUstream> ordered;
  std::vector<std::byte> host = std::vector<std::byte>(4096);
};

TEST_F(CudaEngineQueues, TheLastCopyEngineIsKeptForLatencyWork) {
  EXPECT_TRUE(engine->keeps_latency_engine(0));
  copy({{1, EngineQueue::kLatency}, {2, EngineQueue::kLatency}});
  copy({{3, EngineQueue::kBulk}, {4, EngineQueue::kBulk}, {5, EngineQueue::kBulk}});
  copy({{6, EngineQueue::kLatency}});
  EXPECT_EQ(engines_used(),
            (std::map<uint64_t, int>{{1, 2}, {2, 2}, {3, 0}, {4, 1}, {5, 0}, {6, 2}}));
}

TEST_F(CudaEngineQueues, ACopyOfAnyClassUsesEveryEngineInTurn) {
  copy({{1, EngineQueue::kAny},
        {2, EngineQueue::kAny},
        {3, EngineQueue::kAny},
        {4, EngineQueue::kAny}});
  EXPECT_EQ(engines_used(), (std::map<uint64_t, int>{{1, 0}, {2, 1}, {3, 2}, {4, 0}}));
}

TEST_F(CudaEngineQueues, ALargeBulkCopyIsSplitOverTheEnginesNotKeptForLatency) {
  copy({{(96 << 20) + 4096, EngineQueue::kBulk}});
  EXPECT_EQ(engines_used(), (std::map<uint64_t, int>{{(48 << 20) + 4096, 0}, {48 << 20, 1}}));
  fake.copies.clear();
  copy({{96 << 20, EngineQueue::kAny}});
  EXPECT_EQ(fake.copies.size(), 3u) << "a user alone splits over every engine";
}

TEST_F(CudaEngineQueues, AGpuWithOneCopyEngineKeepsNone) {
  engine.reset();
  fake = fake_cuda::FakeDriverState{};
  fake.copy_engines = 1;
  std::string why;
  engine = CudaEngine::create(driver, EngineOptions{}, "test", why);
  ASSERT_NE(engine, nullptr) << why;
  EXPECT_FALSE(engine->keeps_latency_engine(0));
}

// Copies within one GPU run at the memory's speed: CopyDispatcher paces them in a lane of their
// own with a bound and slices kWithinGpuPaceScale times larger; copies over PCIe at the bound.
TEST_F(CudaEngineQueues, CopiesWithinOneGpuArePacedAtALargerBoundThoseOverPcieAtTheBound) {
  auto request = [&](int src_device, int dst_device) {
    return CopyRequest{host.data(), host.data(), 4096, 0, src_device, dst_device};
  };
  EXPECT_GT(CudaEngine::kWithinGpuPaceScale, 1u);
  EXPECT_EQ(engine->pace_scale(request(0, 0)), CudaEngine::kWithinGpuPaceScale);
  EXPECT_EQ(engine->pace_scale(request(kHostMemory, 0)), 1u);
  EXPECT_EQ(engine->pace_scale(request(0, kHostMemory)), 1u);
  EXPECT_EQ(engine->pace_scale(request(kHostMemory, kHostMemory)), 1u);
}

}  // namespace
}  // namespace iris::daemon
