// The cuda engine's constructor over a driver table whose calls fail on purpose: whichever call
// fails, what it had taken (primary contexts, pinned memory, streams) is given back, so that
// `--engine auto` falls back to the next engine holding nothing. No GPU needed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "daemon/engines/cuda/cuda_engine.hpp"

namespace iris::daemon {
namespace {

// The fake driver's state: live resources, and which call of which kind fails.
struct FakeDriverState {
  int retained_contexts = 0;
  std::set<void*> pinned;
  std::set<CUstream> streams;
  int stream_creates = 0;
  int fail_stream_create_at = -1;  // 0-based call index; -1 never
  bool fail_host_alloc = false;
  int fail_retain_of_device = -1;
};
FakeDriverState fake;

cuda::Driver fake_driver() {
  cuda::Driver d;
  d.cuGetErrorString = [](CUresult, const char** s) -> CUresult {
    *s = "injected failure";
    return CUDA_SUCCESS;
  };
  d.cuDriverGetVersion = [](int* v) -> CUresult {
    *v = 13000;
    return CUDA_SUCCESS;
  };
  d.cuDeviceGetCount = [](int* n) -> CUresult {
    *n = 2;
    return CUDA_SUCCESS;
  };
  d.cuDeviceGet = [](CUdevice* dev, int i) -> CUresult {
    *dev = i;
    return CUDA_SUCCESS;
  };
  d.cuDeviceGetName = [](char* name, int, CUdevice) -> CUresult {
    name[0] = 'G';
    return CUDA_SUCCESS;
  };
  d.cuDeviceGetPCIBusId = [](char* bus, int, CUdevice dev) -> CUresult {
    bus[0] = static_cast<char>('0' + dev);
    return CUDA_SUCCESS;
  };
  d.cuDeviceTotalMem = [](size_t* bytes, CUdevice) -> CUresult {
    *bytes = 1 << 30;
    return CUDA_SUCCESS;
  };
  d.cuDeviceGetAttribute = [](int* v, CUdevice_attribute, CUdevice) -> CUresult {
    *v = 2;
    return CUDA_SUCCESS;
  };
  d.cuDevicePrimaryCtxRetain = [](CUcontext* ctx, CUdevice dev) -> CUresult {
    if (dev == fake.fail_retain_of_device) return CUDA_ERROR_OUT_OF_MEMORY;
    ++fake.retained_contexts;
    *ctx = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(0x100 + dev));
    return CUDA_SUCCESS;
  };
  d.cuDevicePrimaryCtxRelease = [](CUdevice) -> CUresult {
    --fake.retained_contexts;
    return CUDA_SUCCESS;
  };
  d.cuDeviceCanAccessPeer = [](int* can, CUdevice, CUdevice) -> CUresult {
    *can = 0;
    return CUDA_SUCCESS;
  };
  d.cuCtxGetCurrent = [](CUcontext* ctx) -> CUresult {
    *ctx = nullptr;
    return CUDA_SUCCESS;
  };
  d.cuCtxSetCurrent = [](CUcontext) -> CUresult { return CUDA_SUCCESS; };
  d.cuMemHostAlloc = [](void** p, size_t bytes, unsigned) -> CUresult {
    if (fake.fail_host_alloc) return CUDA_ERROR_OUT_OF_MEMORY;
    *p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    fake.pinned.insert(*p);
    return CUDA_SUCCESS;
  };
  d.cuMemFreeHost = [](void* p) -> CUresult {
    fake.pinned.erase(p);
    std::free(p);
    return CUDA_SUCCESS;
  };
  d.cuMemHostGetDevicePointer = [](CUdeviceptr* dev, void* p, unsigned) -> CUresult {
    *dev = reinterpret_cast<CUdeviceptr>(p);
    return CUDA_SUCCESS;
  };
  d.cuStreamCreate = [](CUstream* s, unsigned) -> CUresult {
    if (fake.stream_creates++ == fake.fail_stream_create_at) return CUDA_ERROR_OUT_OF_MEMORY;
    *s = reinterpret_cast<CUstream>(static_cast<uintptr_t>(0x1000 + fake.stream_creates));
    fake.streams.insert(*s);
    return CUDA_SUCCESS;
  };
  d.cuStreamSynchronize = [](CUstream) -> CUresult { return CUDA_SUCCESS; };
  d.cuStreamDestroy = [](CUstream s) -> CUresult {
    fake.streams.erase(s);
    return CUDA_SUCCESS;
  };
  return d;
}

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
