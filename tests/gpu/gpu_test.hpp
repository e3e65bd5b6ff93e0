// The GPU tests' fixture: skips (saying why) without a usable NVIDIA GPU, else starts irisd with
// the cuda engine and runs iris-gpu-rank processes on GPU 0 with a fresh seed.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "iris/shared/cuda_library.hpp"
#include "tests/support/daemon_process.hpp"

namespace iris::testing {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda::load_driver(why) == nullptr) GTEST_SKIP() << "no usable NVIDIA GPU: " << why;
    daemon = std::make_unique<DaemonProcess>(std::vector<std::string>{"--engine", "cuda"});
    std::random_device entropy;
    seed = (uint64_t{entropy()} << 32) | entropy();
  }

  std::vector<int> run_ranks(uint32_t nranks, const std::vector<std::string>& args) {
    std::vector<pid_t> pids;
    for (uint32_t r = 0; r < nranks; ++r) {
      std::vector<std::string> argv = {
          gpu_rank_program_path(), "--socket", daemon->socket(),  "--nranks",
          std::to_string(nranks),  "--rank",   std::to_string(r), "--seed",
          std::to_string(seed)};
      argv.insert(argv.end(), args.begin(), args.end());
      pids.push_back(spawn(argv));
    }
    std::vector<int> codes;
    for (pid_t p : pids) codes.push_back(wait_for(p));
    return codes;
  }

  void expect_ok(const std::vector<int>& codes) {
    for (std::size_t r = 0; r < codes.size(); ++r)
      EXPECT_EQ(codes[r], 0) << "rank " << r << " (seed " << seed << "); daemon log:\n"
                             << daemon->log();
  }

  // Free memory of GPU 0, device-wide, through this process's own context.
  static uint64_t gpu0_free_bytes() {
    std::string why;
    const cuda::Driver* cu = cuda::load_driver(why);
    CUdevice device;
    CUcontext context;
    size_t free = 0, total = 0;
    if (cu->cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
        cu->cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS ||
        cu->cuCtxSetCurrent(context) != CUDA_SUCCESS ||
        cu->cuMemGetInfo(&free, &total) != CUDA_SUCCESS)
      ADD_FAILURE() << "cannot read GPU 0's free memory";
    return free;
  }

  std::unique_ptr<DaemonProcess> daemon;
  uint64_t seed = 0;
};

}  // namespace iris::testing
