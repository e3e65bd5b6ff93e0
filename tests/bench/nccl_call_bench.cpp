// What irisd's NCCL-API library costs per call on top of libiris, in one process against one
// irisd (started here, host engine, --log-level warn): a one-rank 4 KiB all-gather waited for on
// the host, through libiris's C++ API and through ncclAllGather with a null stream (the library
// plans it, runs it in a round of one and waits), on memory irisd shares (Client::allocate,
// ncclMemAlloc); and ncclAllReduce of 1024 floats, whose plan adds two all-to-all-v and a host
// reduction. Report each as time per call; their ratio is the library's overhead. Then the
// bandwidth of both ways in: 2 ranks (a thread each) all-gathering 4 KiB to 256 MiB per rank,
// through libiris (a client each) and through ncclAllGather (ncclCommInitAll's two communicators);
// compare bytes_per_second of the same size.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "client/nccl/include/nccl.h"
#include "iris/iris.hpp"
#include "tests/support/daemon_process.hpp"

namespace {

constexpr std::size_t kBytes = 4096;

// Started by the first benchmark, stopped by main() after the last (a static's destructor would
// run after the library's own, which still hold its sessions).
std::unique_ptr<iris::testing::DaemonProcess> the_daemon;

iris::testing::DaemonProcess& daemon() {
  static std::mutex mutex;  // the two-rank benchmarks' threads ask at once
  std::lock_guard lock(mutex);
  if (!the_daemon)
    the_daemon = std::make_unique<iris::testing::DaemonProcess>(
        std::vector<std::string>{"--log-level", "warn"});
  return *the_daemon;
}

void BM_LibirisAllGather(benchmark::State& state) {
  iris::ClientOptions options;
  options.socket_path = daemon().socket();
  iris::Client client = iris::Client::connect(options);
  iris::Communicator comm = iris::Communicator::init(client, "bench-libiris", 1, 0);
  iris::Buffer send = client.allocate(kBytes), recv = client.allocate(kBytes);
  for (auto _ : state) comm.all_gather(send.data(), recv.data(), kBytes).wait();
  comm.destroy();
}
BENCHMARK(BM_LibirisAllGather)->UseRealTime();

ncclComm_t nccl_comm() {
  ::setenv("IRIS_SOCKET", daemon().socket().c_str(), 1);
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess)
    std::abort();
  return comm;
}

void BM_NcclAllGather(benchmark::State& state) {
  ncclComm_t comm = nccl_comm();
  void *send = nullptr, *recv = nullptr;
  ncclMemAlloc(&send, kBytes);
  ncclMemAlloc(&recv, kBytes);
  for (auto _ : state)
    if (ncclAllGather(send, recv, kBytes, ncclUint8, comm, nullptr) != ncclSuccess)
      state.SkipWithError(ncclGetLastError(comm));
  ncclMemFree(send);
  ncclMemFree(recv);
  ncclCommDestroy(comm);
}
BENCHMARK(BM_NcclAllGather)->UseRealTime();

void BM_NcclAllReduce(benchmark::State& state) {
  ncclComm_t comm = nccl_comm();
  void* buf = nullptr;
  ncclMemAlloc(&buf, kBytes);
  for (auto _ : state)
    if (ncclAllReduce(buf, buf, kBytes / 4, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
      state.SkipWithError(ncclGetLastError(comm));
  ncclMemFree(buf);
  ncclCommDestroy(comm);
}
BENCHMARK(BM_NcclAllReduce)->UseRealTime();

// Two ranks, a thread each: per-rank sizes 4 KiB to 256 MiB, 16x apart.
void two_ranks_by_size(benchmark::internal::Benchmark* b) {
  b->RangeMultiplier(16)->Range(4 << 10, 256 << 20)->Threads(2)->UseRealTime();
}

void count_bytes(benchmark::State& state, std::size_t bytes) {
  // What each rank receives: both ranks' blocks.
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes * 2));
}

void BM_LibirisAllGatherTwoRanks(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  iris::ClientOptions options;
  options.socket_path = daemon().socket();
  iris::Client client = iris::Client::connect(options);
  iris::Communicator comm = iris::Communicator::init(
      client, "bench-libiris-2-" + std::to_string(bytes), 2, state.thread_index());
  iris::Buffer send = client.allocate(bytes), recv = client.allocate(2 * bytes);
  comm.all_gather(send.data(), recv.data(), bytes).wait();  // first touch of the pages: untimed
  for (auto _ : state) comm.all_gather(send.data(), recv.data(), bytes).wait();
  count_bytes(state, bytes);
  comm.destroy();
}
BENCHMARK(BM_LibirisAllGatherTwoRanks)->Apply(two_ranks_by_size);

void BM_NcclAllGatherTwoRanks(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  // Both communicators from one thread (ncclCommInitAll), made by whichever thread comes first.
  static std::mutex mutex;
  static std::array<ncclComm_t, 2> comms{};
  {
    std::lock_guard lock(mutex);
    if (comms[0] == nullptr) {
      ::setenv("IRIS_SOCKET", daemon().socket().c_str(), 1);
      if (ncclCommInitAll(comms.data(), 2, nullptr) != ncclSuccess) std::abort();
    }
  }
  ncclComm_t comm = comms[static_cast<std::size_t>(state.thread_index())];
  void *send = nullptr, *recv = nullptr;
  ncclMemAlloc(&send, bytes);
  ncclMemAlloc(&recv, 2 * bytes);
  const auto all_gather = [&] {
    return ncclAllGather(send, recv, bytes, ncclUint8, comm, nullptr);
  };
  if (all_gather() != ncclSuccess) state.SkipWithError(ncclGetLastError(comm));  // first touch
  for (auto _ : state)
    if (all_gather() != ncclSuccess) state.SkipWithError(ncclGetLastError(comm));
  count_bytes(state, bytes);
  ncclMemFree(send);
  ncclMemFree(recv);
}
BENCHMARK(BM_NcclAllGatherTwoRanks)->Apply(two_ranks_by_size);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  the_daemon.reset();
  return 0;
}
