// GPU all-gathers through a real irisd with the cuda engine and real rank processes on one GPU.
// Without an NVIDIA GPU and driver every test skips and says why.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <signal.h>

#include <random>
#include <thread>

#include "iris/error_code.hpp"
#include "tests/gpu/gpu_test.hpp"

namespace iris::testing {
namespace {

using GpuAllGather = GpuTest;

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
