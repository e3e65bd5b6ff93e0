// GPU all-gathers through a real irisd with the cuda engine and real rank processes on one GPU.
// Without an NVIDIA GPU and driver every test skips and says why.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <signal.h>

#include <random>
#include <thread>

#include "iris/error_code.hpp"
#include "iris/shared/cuda_driver.hpp"
#include "tests/support/daemon_process.hpp"

namespace iris::testing {
namespace {

class GpuAllGather : public ::testing::Test {
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

TEST_F(GpuAllGather, TwoRanksUpTo256MiB) {
  expect_ok(run_ranks(2, {"--iterations", "10", "--max-bytes", std::to_string(256 << 20)}));
}

TEST_F(GpuAllGather, FourRanksUpTo256MiB) {
  expect_ok(run_ranks(4, {"--iterations", "10", "--max-bytes", std::to_string(256 << 20)}));
}

TEST_F(GpuAllGather, EightRanksUpTo256MiB) {
  expect_ok(run_ranks(8, {"--iterations", "8", "--max-bytes", std::to_string(256 << 20)}));
}

TEST_F(GpuAllGather, InPlace) {
  expect_ok(
      run_ranks(4, {"--inplace", "--iterations", "10", "--max-bytes", std::to_string(16 << 20)}));
}

TEST_F(GpuAllGather, ReceiveIntoPinnedHostMemory) {
  expect_ok(
      run_ranks(2, {"--host-recv", "--iterations", "8", "--max-bytes", std::to_string(4 << 20)}));
}

TEST_F(GpuAllGather, StreamOrderedWithProducerAndConsumerKernels) {
  expect_ok(
      run_ranks(4, {"--stream", "--iterations", "12", "--max-bytes", std::to_string(16 << 20)}));
}

TEST_F(GpuAllGather, StreamOrderedInPlaceAndIntoHostMemory) {
  expect_ok(run_ranks(
      2, {"--stream", "--inplace", "--iterations", "8", "--max-bytes", std::to_string(8 << 20)}));
  expect_ok(run_ranks(
      2, {"--stream", "--host-recv", "--iterations", "6", "--max-bytes", std::to_string(1 << 20)}));
}

TEST_F(GpuAllGather, VmmBuffersLikeExpandableSegments) {
  // Send and receive buffers of several VMM allocations each, registered across allocation
  // boundaries; imported from file descriptors passed over the attach socket.
  expect_ok(run_ranks(2, {"--vmm", "--iterations", "8", "--max-bytes", std::to_string(24 << 20)}));
  expect_ok(run_ranks(
      2, {"--vmm", "--stream", "--iterations", "6", "--max-bytes", std::to_string(8 << 20)}));
}

TEST_F(GpuAllGather, CopiesSplitAcrossCopyEngines) {
  // --split-bytes cuts each copy of 1 MiB or more into one piece per copy engine; a rank completes
  // only once every piece of every copy has landed.
  daemon = std::make_unique<DaemonProcess>(
      std::vector<std::string>{"--engine", "cuda", "--split-bytes", std::to_string(1 << 20)});
  expect_ok(run_ranks(4, {"--iterations", "10", "--max-bytes", std::to_string(48 << 20)}));
  expect_ok(
      run_ranks(2, {"--stream", "--iterations", "6", "--max-bytes", std::to_string(16 << 20)}));
}

TEST_F(GpuAllGather, KilledRankLeavesOthersWithAnErrorNotAHang) {
  const uint64_t free_before = gpu0_free_bytes();
  const pid_t victim = spawn({gpu_rank_program_path(), "--socket", daemon->socket(), "--nranks",
                              "2", "--rank", "1", "--seed", "1", "--iterations", "1000000",
                              "--max-bytes", std::to_string(64 << 20), "--time-only"});
  const pid_t survivor = spawn({gpu_rank_program_path(), "--socket", daemon->socket(), "--nranks",
                                "2", "--rank", "0", "--seed", "1", "--iterations", "1000000",
                                "--max-bytes", std::to_string(64 << 20), "--time-only"});
  // Kill only once both are deep in their loop: irisd has completed collectives between them.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  uint64_t completed = 0;
  while (completed < 20 && std::chrono::steady_clock::now() < deadline) {
    const auto stats =
        run_program({iris_ctl_path(), "--socket", daemon->socket(), "stats", "--json"});
    if (stats.exit_code == 0)
      completed = nlohmann::json::parse(stats.output)["stats"]["collectives_completed_total"];
    if (completed < 20) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(completed, 20u) << daemon->log();
  ::kill(victim, SIGKILL);
  EXPECT_EQ(wait_for(victim), 128 + SIGKILL);
  EXPECT_EQ(wait_for(survivor), 10 + static_cast<int>(ErrorCode::kPeerLost)) << daemon->log();
  // irisd closed its imports of both ranks' buffers (192 MiB and more), so the driver could free
  // them: the GPU's free memory comes back to where it was before the ranks started.
  constexpr uint64_t kSlack = 32ull << 20;
  uint64_t free_after = gpu0_free_bytes();
  for (int i = 0; i < 50 && free_after + kSlack < free_before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    free_after = gpu0_free_bytes();
  }
  EXPECT_GE(free_after + kSlack, free_before)
      << "GPU 0 free memory " << (free_before >> 20) << " MiB before the ranks, "
      << (free_after >> 20) << " MiB after both exited; daemon log:\n"
      << daemon->log();
}

TEST_F(GpuAllGather, TenThousandBackToBack) {
  expect_ok(run_ranks(2, {"--iterations", "10000", "--max-bytes", "4096"}));
}

}  // namespace
}  // namespace iris::testing
