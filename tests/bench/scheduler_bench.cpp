// The progress thread's own work per collective, without clients, rings or other threads: n ranks
// arrive at an all-gather (or a broadcast from rank 0) of small blocks, the host engine copies
// them inline, and the scheduler retires the completions. What irisd's one progress thread spends
// per collective bounds the small-collective rate of the whole node (the 16-core profile in
// docs/PERFORMANCE.md), and this measures it on any machine: run under `perf stat -e instructions`
// for a figure that other load does not move.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "daemon/collectives/collective_scheduler.hpp"
#include "daemon/engines/host/host_engine.hpp"

namespace iris::daemon {
namespace {

void BM_SchedulerCollective(benchmark::State& state) {
  const auto nranks = static_cast<uint32_t>(state.range(0));
  const uint64_t bytes = static_cast<uint64_t>(state.range(1));
  const auto kind = static_cast<CollectiveKind>(state.range(2));
  EngineOptions options;
  options.workers = 1;
  options.inline_bytes = uint64_t{1} << 30;  // every copy on this thread, as small ones are
  HostEngine engine(options, "bench");
  Stats stats;
  TenantLog log{stats.log_lines_suppressed_total};
  uint64_t completed = 0;
  CopyDispatcher copies(engine, stats);
  CollectiveScheduler scheduler(
      copies, stats, log,
      [&](const CompletionTarget&, ErrorCode, const std::string&) { ++completed; }, 64);
  Communicator comm;
  comm.id = 1;
  comm.key = "bench";
  comm.nranks = nranks;
  comm.members.resize(nranks);
  comm.next_seq.assign(nranks, 1);
  std::vector<std::vector<std::byte>> send(nranks), recv(nranks);
  std::vector<ValidatedRequest> requests(nranks);
  for (uint32_t r = 0; r < nranks; ++r) {
    comm.members[r] = r;
    send[r].resize(bytes);
    recv[r].resize(bytes * nranks);
    requests[r].send = std::make_shared<MappedBuffer>(
        MappedBuffer{2 * r, r, send[r].data(), send[r].size(), nullptr});
    requests[r].recv = kind == CollectiveKind::kBroadcast
                           ? requests[r].send
                           : std::make_shared<MappedBuffer>(MappedBuffer{
                                 2 * r + 1, r, recv[r].data(), recv[r].size(), nullptr});
    requests[r].args.kind = kind;
    requests[r].args.bytes = bytes;
  }
  uint64_t seq = 0;
  for (auto _ : state) {
    ++seq;
    for (uint32_t r = 0; r < nranks; ++r)
      scheduler.arrive(comm, r, seq, {r, r, static_cast<uint32_t>(seq)},
                       ValidatedRequest(requests[r]));
    while (copies.poll()) {
    }
  }
  if (completed != nranks * seq) state.SkipWithError("not every rank completed");
  state.counters["ns_per_arrival"] =
      benchmark::Counter(static_cast<double>(nranks) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
constexpr auto kAllGather = static_cast<int64_t>(CollectiveKind::kAllGather);
constexpr auto kBroadcast = static_cast<int64_t>(CollectiveKind::kBroadcast);
BENCHMARK(BM_SchedulerCollective)
    ->ArgNames({"ranks", "bytes", "opcode"})
    ->Args({2, 64, kAllGather})
    ->Args({8, 64, kAllGather})
    ->Args({8, 4096, kAllGather})
    ->Args({8, 64, kBroadcast});

}  // namespace
}  // namespace iris::daemon

BENCHMARK_MAIN();
