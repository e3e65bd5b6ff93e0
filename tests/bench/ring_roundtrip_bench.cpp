// Ring round trip: a no-op submitted through the session ring until its completion is visible to
// the client, against a real irisd (started here). Reports p50/p99 per round trip as counters.
// Beside it, a one-rank 64 B all-gather: the same trip plus what the collective path adds in irisd
// (validation, matching, the copy, its completion), measurable on two cores, where runs of several
// ranks would measure the sharing of cores instead. irisd runs with --log-level warn, as
// scripts/bench.sh runs it (tests start it with debug logs, whose per-collective trace lines would
// be measured too). And the floor any such round trip has on the machine: a cache-line handoff
// there and back between two threads on two cores (one writes a line, the other spins until it sees
// it and answers in another line), so that a run gives irisd's round trip as a ratio to the floor.
// Between the two, the same handoff through the session ring alone (two pinned threads, no irisd):
// a ring entry costs the consumer the tail's line and then the entry's lines, one after the other;
// the variants say how much of irisd's trip above the floor is that, for the 96-byte entry of
// today, a 64-byte entry, and a 64-byte entry that carries its own ready mark (no tail to read).
// Each with the consumer polling without a pause and with 150 ns of other work before each poll,
// as irisd's progress loop, which passes over all its pollers between two reads of a ring: a
// consumer that does not hammer the lines hands over near the floor whatever the entry's form.
#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "iris/iris.hpp"
#include "iris/shared/descriptor.hpp"
#include "iris/shared/spsc_ring.hpp"
#include "tests/support/daemon_process.hpp"

namespace {

namespace shm = iris::shm;

double percentile(std::vector<double>& v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size() - 1)))];
}

void report_percentiles(benchmark::State& state, std::vector<double>& ns) {
  state.counters["p50_us"] = percentile(ns, 0.50) / 1e3;
  state.counters["p99_us"] = percentile(ns, 0.99) / 1e3;
}

// An irisd of its own (at --log-level warn) and a client attached to it.
struct Attached {
  iris::testing::DaemonProcess daemon{{"--log-level", "warn"}};
  iris::Client client = connect(daemon);

  static iris::Client connect(const iris::testing::DaemonProcess& daemon) {
    iris::ClientOptions options;
    options.socket_path = daemon.socket();
    return iris::Client::connect(options);
  }
};

// Times `round_trip` (a submission waited for, or a handoff there and back) once per iteration,
// after 1000 untimed ones that get the daemon spinning and the pages mapped.
template <typename RoundTrip>
void time_round_trips(benchmark::State& state, RoundTrip round_trip) {
  for (int i = 0; i < 1000; ++i) round_trip();
  std::vector<double> ns;
  ns.reserve(1 << 22);
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    round_trip();
    ns.push_back(
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count());
  }
  report_percentiles(state, ns);
}

void BM_RingRoundTrip(benchmark::State& state) {
  Attached irisd;
  time_round_trips(state, [&] { irisd.client.nop().wait(); });
}
BENCHMARK(BM_RingRoundTrip)->MinTime(2.0)->UseRealTime();

void BM_OneRankAllGather(benchmark::State& state) {
  Attached irisd;
  auto comm = iris::Communicator::init(irisd.client, "ring-bench", 1, 0);
  auto send = irisd.client.allocate(64);
  auto recv = irisd.client.allocate(64);
  time_round_trips(state, [&] { comm.all_gather(send.data(), recv.data(), 64).wait(); });
}
BENCHMARK(BM_OneRankAllGather)->MinTime(2.0)->UseRealTime();

void pin_to(std::thread::native_handle_type thread, unsigned core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core % std::max(1u, std::thread::hardware_concurrency()), &set);
  pthread_setaffinity_np(thread, sizeof(set), &set);
}

struct alignas(64) Line {
  std::atomic<uint64_t> value{0};
};

// Busy for `ns` nanoseconds: the rest of a poll loop's pass.
void busy_for(std::chrono::nanoseconds ns) {
  if (ns.count() == 0) return;
  const auto until = std::chrono::steady_clock::now() + ns;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Times a handoff there and back between this thread and a partner, pinned to cores 0 and 1:
// `channel.send(i)` hands i over, the partner's `channel.receive()` returns it (0: nothing yet),
// busy for `pause` before each call, and answers in a line of its own.
template <typename Channel>
void time_handoffs(benchmark::State& state, Channel& channel,
                   std::chrono::nanoseconds pause = std::chrono::nanoseconds(0)) {
  if (std::thread::hardware_concurrency() < 2) {
    state.SkipWithError("needs two cores");
    return;
  }
  Line answer;
  std::atomic<bool> stop{false};
  std::thread partner([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      busy_for(pause);
      if (const uint64_t v = channel.receive()) answer.value.store(v, std::memory_order_release);
    }
  });
  pin_to(pthread_self(), 0);
  pin_to(partner.native_handle(), 1);
  uint64_t i = 0;
  time_round_trips(state, [&] {
    channel.send(++i);
    while (answer.value.load(std::memory_order_acquire) != i) {
    }
  });
  stop = true;
  partner.join();
  cpu_set_t all;
  CPU_ZERO(&all);
  for (unsigned c = 0; c < std::thread::hardware_concurrency(); ++c) CPU_SET(c, &all);
  pthread_setaffinity_np(pthread_self(), sizeof(all), &all);
}

// One line: the floor.
struct LineChannel {
  Line line;
  void send(uint64_t i) { line.value.store(i, std::memory_order_release); }
  uint64_t receive() {
    const uint64_t v = line.value.load(std::memory_order_acquire);
    return v == seen ? 0 : (seen = v);
  }
  uint64_t seen = 0;
};

void BM_CacheLineRoundTrip(benchmark::State& state) {
  LineChannel channel;
  time_handoffs(state, channel);
}
BENCHMARK(BM_CacheLineRoundTrip)->MinTime(1.0)->UseRealTime();

constexpr uint32_t kRingDepth = 256;

// Every ring form runs twice: the consumer polling without a pause, and with 150 ns of other
// work before each poll.
void with_and_without_pause(benchmark::internal::Benchmark* b) {
  b->ArgName("pause_ns")->Arg(0)->Arg(150)->MinTime(1.0)->UseRealTime();
}

// The session ring (shm::RingProducer/RingConsumer) with entries of type Entry, `seq` carrying i.
// Each side's own indices on a line of its own, as they are in two processes.
template <typename Entry>
struct RingChannel {
  shm::RingControl control;
  alignas(64) Entry entries[kRingDepth];
  alignas(64) shm::RingProducer<Entry> producer{&control, entries, kRingDepth};
  alignas(64) shm::RingConsumer<Entry> consumer{&control, entries, kRingDepth};
  RingChannel() : control{} {}
  void send(uint64_t i) {
    Entry e{};
    e.seq = i;
    while (!producer.try_push(e)) {
    }
  }
  uint64_t receive() {
    Entry e;
    return consumer.try_pop(e) == shm::PopResult::kEntry ? e.seq : 0;
  }
};

struct alignas(64) Entry64 {
  uint64_t seq;
  uint64_t words[7];
};
static_assert(sizeof(Entry64) == 64);

void BM_RingHandoff96ByteEntry(benchmark::State& state) {
  auto channel = std::make_unique<RingChannel<shm::SubmitEntry>>();
  time_handoffs(state, *channel, std::chrono::nanoseconds(state.range(0)));
}
BENCHMARK(BM_RingHandoff96ByteEntry)->Apply(with_and_without_pause);

void BM_RingHandoff64ByteEntry(benchmark::State& state) {
  auto channel = std::make_unique<RingChannel<Entry64>>();
  time_handoffs(state, *channel, std::chrono::nanoseconds(state.range(0)));
}
BENCHMARK(BM_RingHandoff64ByteEntry)->Apply(with_and_without_pause);

// 64-byte entries whose last word marks them ready (the index they were written at, plus one),
// so the consumer polls the next entry itself and never reads a tail.
struct MarkedSlotChannel {
  struct alignas(64) Slot {
    uint64_t words[7];
    std::atomic<uint64_t> mark;
  };
  Slot slots[kRingDepth]{};
  alignas(64) uint64_t tail = 0;
  alignas(64) uint64_t head = 0;
  void send(uint64_t i) {
    Slot& s = slots[tail % kRingDepth];
    s.words[0] = i;
    s.mark.store(++tail, std::memory_order_release);
  }
  uint64_t receive() {
    Slot& s = slots[head % kRingDepth];
    if (s.mark.load(std::memory_order_acquire) != head + 1) return 0;
    ++head;
    return s.words[0];
  }
};

void BM_RingHandoffMarked64ByteEntry(benchmark::State& state) {
  auto channel = std::make_unique<MarkedSlotChannel>();
  time_handoffs(state, *channel, std::chrono::nanoseconds(state.range(0)));
}
BENCHMARK(BM_RingHandoffMarked64ByteEntry)->Apply(with_and_without_pause);

}  // namespace

BENCHMARK_MAIN();
