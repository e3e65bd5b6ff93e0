// The cuda engine's constructor over a driver table whose calls fail on purpose: whichever call
// fails, what it had taken (primary contexts, pinned memory, streams) is given back, so that
// `--engine auto` falls back to the next engine holding nothing. No GPU needed.
#include <gtest/gtest.h>

#include "daemon/engines/cuda/cuda_engine.hpp"
#include "tests/unit/fake_cuda_driver.hpp"

namespace iris::daemon {
namespace {

using fake_cuda::fake;
using fake_cuda::fake_driver;
using fake_cuda::FakeDriverState;

void expect_nothing_held() {
  EXPECT_EQ(fake.retained_contexts, 0);
  EXPECT_TRUE(fake.pinned.empty());
  EXPECT_TRUE(fake.streams.empty());
}

TEST(CudaEngineRelease, AFailedStartGivesBackWhatItTook) {
  const cuda::Driver driver = fake_driver();
  // 2 devices x (1 signalling stream + 2 copy-engine streams): fail each stream in turn.
  for (int fail_at = 0; fail_at < 6; ++fail_at) {
    fake = FakeDriverState{};
    fake.fail_stream_create_at = fail_at;
    std::string why;
    auto engine = CudaEngine::create(driver, EngineOptions{}, "test", why);
    EXPECT_EQ(engine, nullptr);
    EXPECT_NE(why.find("cuStreamCreate"), std::string::npos) << why;
    expect_nothing_held();
  }
  fake = FakeDriverState{};
  fake.fail_host_alloc = true;
  std::string why;
  EXPECT_EQ(CudaEngine::create(driver, EngineOptions{}, "test", why), nullptr);
  EXPECT_NE(why.find("cuMemHostAlloc"), std::string::npos) << why;
  expect_nothing_held();
  fake = FakeDriverState{};
  fake.fail_retain_of_device = 1;  // the second GPU's context
  EXPECT_EQ(CudaEngine::create(driver, EngineOptions{}, "test", why), nullptr);
  expect_nothing_held();
}

TEST(CudaEngineRelease, AnEngineThatStartedGivesEverythingBackWhenItGoes) {
  const cuda::Driver driver = fake_driver();
  fake = FakeDriverState{};
  std::string why;
  auto engine = CudaEngine::create(driver, EngineOptions{}, "test", why);
  ASSERT_NE(engine, nullptr) << why;
  EXPECT_EQ(fake.retained_contexts, 2);
  EXPECT_EQ(fake.streams.size(), 6u);
  EXPECT_EQ(fake.pinned.size(), 1u);
  engine.reset();
  expect_nothing_held();
}

}  // namespace
}  // namespace iris::daemon
