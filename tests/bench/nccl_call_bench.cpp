// What irisd's NCCL-API library costs per call on top of libiris, in one process against one
// irisd (started here, host engine, --log-level warn): a one-rank 4 KiB all-gather waited for on
// the host, through libiris's C++ API and through ncclAllGather with a null stream (the library
// plans it, runs it in a round of one and waits), on memory irisd shares (Client::allocate,
// ncclMemAlloc); and ncclAllReduce of 1024 floats, whose plan adds two all-to-all-v and a host
// reduction. Report each as time per call; their ratio is the library's overhead.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
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

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  the_daemon.reset();
  return 0;
}
