// The progress thread's own work per collective, without clients, rings or other threads: n ranks
// arrive at an all-gather (or a broadcast from rank 0) of small blocks, the host engine copies
// them inline, and the scheduler retires the completions. What irisd's one progress thread spends
// per collective bounds the small-collective rate of the whole node (the 16-core profile in
// docs/PERFORMANCE.md), and this measures it on any machine: run under `perf stat -e instructions`
// for a figure that other load does not move. The paced variant is the same collective while
// two users share the node: its copies go through the dispatcher's fair share to an engine that
// copies at once (a GPU engine's path, without a GPU), and it counts the heap allocations per
// collective, which steady traffic should not make.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "daemon/collectives/collective_scheduler.hpp"
#include "daemon/engines/host/host_engine.hpp"

namespace {
std::atomic<uint64_t> allocations{0};
}  // namespace

// Replaces the global allocation functions, malloc underneath, to count them; GCC takes the
// free() in the replaced delete for a mismatch with new.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t bytes) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace iris::daemon {
namespace {

// Copies at submit and reports them on the next poll: the dispatcher's and scheduler's own work.
class CopyAtOnceEngine final : public Engine {
 public:
  CopyAtOnceEngine() : Engine(0) {}
  const EngineDescription& description() const override { return description_; }
  void stop() override {}
  void submit(std::span<const CopyRequest> copies) override {
    for (const CopyRequest& c : copies) {
      std::memcpy(c.dst, c.src, c.bytes);
      done_.push_back({c.cookie, ErrorCode::kOk, TransferPath::kCopyEngine, c.bytes});
    }
  }
  std::size_t poll(std::vector<CopyCompletion>& out) override {
    out.insert(out.end(), done_.begin(), done_.end());
    const std::size_t n = done_.size();
    done_.clear();
    return n;
  }
  int completion_fd() const override { return -1; }

 private:
  EngineDescription description_{"copy-at-once", "bench", {}, "", "", ""};
  std::vector<CopyCompletion> done_;
};

void run_collectives(benchmark::State& state, Engine& engine, Pacing pacing, std::size_t users) {
  const auto nranks = static_cast<uint32_t>(state.range(0));
  const uint64_t bytes = static_cast<uint64_t>(state.range(1));
  const auto kind = static_cast<CollectiveKind>(state.range(2));
  Stats stats;
  TenantLog log{stats.log_lines_suppressed_total};
  uint64_t completed = 0;
  CopyDispatcher copies(engine, stats, pacing);
  copies.set_users(users);
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
  uint64_t allocated_before = 0;
  for (auto _ : state) {
    if (seq == 16) allocated_before = allocations.load(std::memory_order_relaxed);  // warmed up
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
  if (seq > 16)
    state.counters["allocations_per_collective"] =
        static_cast<double>(allocations.load(std::memory_order_relaxed) - allocated_before) /
        static_cast<double>(seq - 16);
}

void BM_SchedulerCollective(benchmark::State& state) {
  EngineOptions options;
  options.workers = 1;
  options.inline_bytes = uint64_t{1} << 30;  // every copy on this thread, as small ones are
  HostEngine engine(options, "bench");
  run_collectives(state, engine, Pacing{}, 1);
}

// Two users attached, pacing at the GPU engines' 4 MiB: every copy through the fair share.
void BM_SchedulerCollectivePaced(benchmark::State& state) {
  CopyAtOnceEngine engine;
  Pacing pacing;
  pacing.queue_bytes = 4ull << 20;
  run_collectives(state, engine, pacing, 2);
}
constexpr auto kAllGather = static_cast<int64_t>(CollectiveKind::kAllGather);
constexpr auto kBroadcast = static_cast<int64_t>(CollectiveKind::kBroadcast);
BENCHMARK(BM_SchedulerCollective)
    ->ArgNames({"ranks", "bytes", "opcode"})
    ->Args({2, 64, kAllGather})
    ->Args({8, 64, kAllGather})
    ->Args({8, 4096, kAllGather})
    ->Args({8, 64, kBroadcast});
BENCHMARK(BM_SchedulerCollectivePaced)
    ->ArgNames({"ranks", "bytes", "opcode"})
    ->Args({2, 64, kAllGather})
    ->Args({8, 4096, kAllGather});

}  // namespace
}  // namespace iris::daemon

BENCHMARK_MAIN();
