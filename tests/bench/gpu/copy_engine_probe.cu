// iris-gpu-copy-engine-probe: a benchmark (not a test) of what the GPU's copy engines allow the
// pacing of issue 50 (copy engines shared fairly between tenants), with irisd out of the way. It
// drives device-to-host copies the way irisd's cuda engine does: non-blocking streams, one per
// copy engine, cuMemcpyDtoHAsync per slice and cuStreamWriteValue32 of a counter into pinned host
// memory after each, one host thread polling the counters and issuing the next slice as one
// retires. Two questions:
//   slices   the bandwidth of 256 MiB moved in slices of S bytes over the bulk streams (all but
//            the last stream) with at most W bytes issued and not retired (W = all: every slice
//            queued at once), against the whole 256 MiB as one copy per bulk stream: what a
//            bound on the bytes in flight costs a bulk tenant by itself.
//   latency  a 4 KiB copy on the last stream (the one irisd keeps for latency work) issued every
//            200 us while the bulk streams move slices of S under a bound of W: its time from
//            issue to the host seeing its counter, p50 and p99. If the engines served the
//            streams side by side it would not grow with W; if they serve the bytes queued
//            before it first, it grows by W over the link's rate. Then 3 such copies at once
//            (what irisd issues when the second of 2 ranks arrives at an all-gather), one
//            cuMemcpyDtoHAsync each or one cuMemcpyBatchAsync (irisd's way): whether each copy
//            waits its own turn; and one copy, then three as one batch, each batch with its
//            counter (what irisd issues for a 2-rank all-gather whose ranks arrive one after the
//            other): whether two batches on the stream wait two turns.
//   sharing  which streams share a copy engine: for each ordered pair of streams (the probe's,
//            then as many again created after them, in creation order), one 64 MiB copy on the
//            first and 4 KiB copies on the second one after the other until it ends. A stream
//            served by another engine gets many small copies through at a few us each; one
//            queued on the same engine gets one, after the whole 64 MiB. Whether the stream
//            irisd keeps for latency work is an engine of its own decides what keeping it can
//            give.
//   cost     what small copies cost the bulk streams: bulk slices under the bounds irisd uses
//            while tenants share a GPU, beside 4 KiB copies on the last stream issued back to back
//            (the next as soon as the last retired): one copy a counter, four in one batch with
//            one counter (a 2-rank all-gather into host memory, started once), four with a
//            counter each. Bulk's GB/s against the same bulk alone, and the bulk time lost per
//            small copy: whether a copy or a counter is what the engines pay for.
//   escape   the same wait for 4 KiB copies on stream 1 against three ways a small copy might
//            pass a bulk one queued before it: a stream of the greatest priority, the other
//            direction (host to device), and a stream of a second context of the same GPU.
// Prints markdown tables. Every wait is bounded (a copy not retired in 10 s fails the run).
//   iris-gpu-copy-engine-probe [--device N]
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = "?";
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "copy_engine_probe: %s failed: %s\n", what, name);
  std::exit(1);
}

constexpr uint64_t kTotal = 256ull << 20;
constexpr uint64_t kSmall = 4096;

struct Stream {
  CUstream handle = nullptr;
  volatile uint32_t* retired = nullptr;  // pinned host word the stream writes
  CUdeviceptr retired_device = 0;
  uint32_t issued = 0;
  std::deque<uint64_t> sizes;  // of the batches issued and not yet retired, oldest first
  uint32_t seen = 0;
};

struct Probe {
  CUdeviceptr src = 0;
  char* dst = nullptr;
  std::vector<Stream> streams;

  // `count` copies of `bytes` back to back from `offset` on stream `s`, one cuMemcpyDtoHAsync
  // each, then one counter.
  void issue(Stream& s, uint64_t offset, uint64_t bytes, std::size_t count = 1) {
    for (std::size_t i = 0; i < count; ++i)
      check(cuMemcpyDtoHAsync(dst + offset + i * bytes, src + offset + i * bytes, bytes, s.handle),
            "cuMemcpyDtoHAsync");
    retire_after(s, bytes * count);
  }
  // `count` copies of `bytes` back to back from `offset`, one batch, then one counter.
  void issue_batch(Stream& s, uint64_t offset, uint64_t bytes, std::size_t count) {
    std::vector<CUdeviceptr> dsts, srcs;
    std::vector<size_t> sizes(count, bytes);
    for (std::size_t i = 0; i < count; ++i) {
      dsts.push_back(reinterpret_cast<CUdeviceptr>(dst + offset + i * bytes));
      srcs.push_back(src + offset + i * bytes);
    }
    CUmemcpyAttributes attrs{};
    attrs.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    attrs.flags = CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE;
    size_t first = 0;
    check(cuMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), count, &attrs, &first, 1,
                             s.handle),
          "cuMemcpyBatchAsync");
    retire_after(s, bytes * count);
  }
  // Gives `s` the pinned host word `word` its retire counter goes to (in the current context).
  static void count_into(Stream& s, void* word) {
    s.retired = static_cast<volatile uint32_t*>(word);
    *s.retired = 0;
    check(cuMemHostGetDevicePointer(&s.retired_device, word, 0), "cuMemHostGetDevicePointer");
  }
  void retire_after(Stream& s, uint64_t bytes) {
    check(cuStreamWriteValue32(s.handle, s.retired_device, ++s.issued, 0), "cuStreamWriteValue32");
    s.sizes.push_back(bytes);
  }
  // Bytes of `s` retired since the last call.
  uint64_t reap(Stream& s) {
    uint64_t bytes = 0;
    const uint32_t now = *s.retired;
    while (s.seen != now && !s.sizes.empty()) {
      ++s.seen;
      bytes += s.sizes.front();
      s.sizes.pop_front();
    }
    return bytes;
  }
  // Bytes of the bulk streams retired since the last call.
  uint64_t reap_bulk() {
    uint64_t bytes = 0;
    for (std::size_t i = 0; i < bulk_streams(); ++i) bytes += reap(streams[i]);
    return bytes;
  }
  std::size_t bulk_streams() const { return streams.size() > 1 ? streams.size() - 1 : 1; }
};

void fail_if_past(Clock::time_point deadline) {
  if (Clock::now() < deadline) return;
  std::fprintf(stderr, "copy_engine_probe: a copy did not retire within 10 s\n");
  std::exit(1);
}

// GB/s of kTotal moved in slices of `slice` over the bulk streams, at most `window` in flight.
double slices(Probe& p, uint64_t slice, uint64_t window) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::seconds(10);
  uint64_t next = 0, in_flight = 0, done = 0;
  std::size_t turn = 0;
  while (done < kTotal) {
    while (next < kTotal && in_flight + slice <= std::max(window, slice)) {
      const uint64_t bytes = std::min(slice, kTotal - next);
      p.issue(p.streams[turn++ % p.bulk_streams()], next, bytes);
      next += bytes;
      in_flight += bytes;
    }
    const uint64_t retired = p.reap_bulk();
    in_flight -= retired;
    done += retired;
    fail_if_past(deadline);
  }
  return static_cast<double>(kTotal) / std::chrono::duration<double>(Clock::now() - start).count() /
         1e9;
}

struct Latency {
  double p50_us, p99_us, bulk_gbps;
  std::size_t rounds;  // of small copies
  double seconds;
};

// How the small copies go: none, one, or three separately, or three in one batch, or one and
// then a batch of three, or four in one batch, or four each with its counter.
enum class Small {
  kNone,
  kOne,
  kThree,
  kThreeBatched,
  kOneThenThreeBatched,
  kFourBatched,
  kFourCounted
};

// A 4 KiB copy (or more) on the last stream every `gap` (after the last retired) for 0.3 s while
// the bulk streams move slices of `slice` under `window` bytes in flight (window 0: no bulk
// copies).
Latency latency(Probe& p, uint64_t slice, uint64_t window, Small how,
                std::chrono::microseconds gap = std::chrono::microseconds(200)) {
  Stream& small = p.streams.back();
  const uint64_t small_offset = kTotal - 4 * kSmall;  // the bulk copies stop short of it
  const uint64_t bulk_end = kTotal - (1ull << 20);
  const auto start = Clock::now();
  const auto end = start + std::chrono::milliseconds(300);
  auto deadline = start + std::chrono::seconds(10);
  uint64_t next = 0, in_flight = 0, moved = 0;
  std::size_t turn = 0;
  std::vector<double> waits;
  Clock::time_point issued_at{}, next_small = start;
  bool small_out = false;
  while (Clock::now() < end || small_out) {
    while (window > 0 && Clock::now() < end && in_flight + slice <= window) {
      if (next + slice > bulk_end) next = 0;
      p.issue(p.streams[turn++ % p.bulk_streams()], next, slice);
      next += slice;
      in_flight += slice;
    }
    const uint64_t retired = p.reap_bulk();
    in_flight -= retired;
    moved += retired;
    const auto now = Clock::now();
    if (how != Small::kNone && !small_out && now >= next_small && now < end) {
      issued_at = Clock::now();
      switch (how) {
        case Small::kNone:
          break;
        case Small::kOne:
          p.issue(small, small_offset, kSmall);
          break;
        case Small::kThree:
          p.issue(small, small_offset, kSmall, 3);
          break;
        case Small::kThreeBatched:
          p.issue_batch(small, small_offset, kSmall, 3);
          break;
        case Small::kOneThenThreeBatched:
          p.issue(small, small_offset, kSmall);
          p.issue_batch(small, small_offset + kSmall, kSmall, 3);
          break;
        case Small::kFourBatched:
          p.issue_batch(small, small_offset, kSmall, 4);
          break;
        case Small::kFourCounted:
          for (uint64_t i = 0; i < 4; ++i) p.issue(small, small_offset + i * kSmall, kSmall);
          break;
      }
      small_out = true;
      deadline = issued_at + std::chrono::seconds(10);
    }
    if (small_out) p.reap(small);
    if (small_out && small.sizes.empty()) {  // every batch of it retired
      const auto seen = Clock::now();
      waits.push_back(std::chrono::duration<double, std::micro>(seen - issued_at).count());
      small_out = false;
      next_small = seen + gap;
    }
    if (small_out) fail_if_past(deadline);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (std::size_t i = 0; i < p.bulk_streams(); ++i) {  // drain
    const auto drain_deadline = Clock::now() + std::chrono::seconds(10);
    while (!p.streams[i].sizes.empty()) {
      p.reap(p.streams[i]);
      fail_if_past(drain_deadline);
    }
  }
  std::sort(waits.begin(), waits.end());
  auto at = [&](double q) {
    return waits.empty() ? 0.0 : waits[static_cast<std::size_t>(q * (waits.size() - 1))];
  };
  return {at(0.5), at(0.99), static_cast<double>(moved) / seconds / 1e9, waits.size(), seconds};
}

struct PairWait {
  std::size_t small_copies;
  double p50_us, max_us, min_us;
};

// One 64 MiB copy on `bulk`, and small copies (`issue_small` queues one on `small`) one after
// the other until it retired.
template <typename IssueSmall>
PairWait pair_wait(Probe& p, Stream& bulk, Stream& small, IssueSmall issue_small) {
  constexpr uint64_t kBig = 64ull << 20;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  p.issue(bulk, 0, kBig);
  std::vector<double> waits;
  while (!bulk.sizes.empty()) {
    const auto issued_at = Clock::now();
    issue_small();
    while (!small.sizes.empty()) {
      p.reap(small);
      fail_if_past(deadline);
    }
    waits.push_back(std::chrono::duration<double, std::micro>(Clock::now() - issued_at).count());
    p.reap(bulk);
  }
  std::sort(waits.begin(), waits.end());
  return {waits.size(), waits[waits.size() / 2], waits.back(), waits.front()};
}

PairWait pair_wait(Probe& p, Stream& bulk, Stream& small) {
  return pair_wait(p, bulk, small, [&] { p.issue(small, kTotal - 4 * kSmall, kSmall); });
}

std::string mib(uint64_t bytes) {
  if (bytes >= kTotal) return "all";
  if (bytes >= (1ull << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

}  // namespace

int main(int argc, char** argv) {
  int device_index = 0;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--device") device_index = std::atoi(argv[i + 1]);
  check(cuInit(0), "cuInit");
  CUdevice device;
  check(cuDeviceGet(&device, device_index), "cuDeviceGet");
  CUcontext context;
  check(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  int engines = 0;
  check(cuDeviceGetAttribute(&engines, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, device),
        "cuDeviceGetAttribute");
  char name[256] = {};
  check(cuDeviceGetName(name, sizeof name, device), "cuDeviceGetName");

  Probe p;
  check(cuMemAlloc(&p.src, kTotal), "cuMemAlloc");
  check(cuMemsetD8(p.src, 1, kTotal), "cuMemsetD8");
  void* host = nullptr;
  check(cuMemHostAlloc(&host, kTotal, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
  p.dst = static_cast<char*>(host);
  void* words = nullptr;
  const int streams = std::max(engines, 2);
  check(cuMemHostAlloc(&words, 64 * (2 * streams + 1), CU_MEMHOSTALLOC_DEVICEMAP),
        "cuMemHostAlloc");
  // The probe's streams, then as many again for the sharing table only.
  p.streams.resize(streams);
  std::vector<Stream> extra(streams);
  std::vector<Stream*> all;
  for (Stream& s : p.streams) all.push_back(&s);
  for (Stream& s : extra) all.push_back(&s);
  for (std::size_t i = 0; i < all.size(); ++i) {
    Stream& s = *all[i];
    check(cuStreamCreate(&s.handle, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    Probe::count_into(s, static_cast<char*>(words) + 64 * i);
  }
  std::printf(
      "copy engine probe: %s, %d copy engines, %zu bulk streams and one latency stream, "
      "device to pinned host memory\n\n",
      name, engines, p.bulk_streams());

  slices(p, kTotal, kTotal);  // warm
  std::printf("| slice | bytes in flight at most | GB/s | of one whole copy per stream |\n");
  std::printf("| ---: | ---: | ---: | ---: |\n");
  const double whole = slices(p, kTotal / p.bulk_streams(), kTotal);
  std::printf("| whole | all | %.2f | 1.00 |\n", whole);
  for (uint64_t slice : {256ull << 10, 512ull << 10, 1ull << 20, 2ull << 20, 4ull << 20}) {
    for (uint64_t slices_in_flight : {2ull, 4ull, 0ull}) {
      const uint64_t window = slices_in_flight == 0 ? kTotal : slice * slices_in_flight;
      const double gbps = slices(p, slice, window);
      std::printf("| %s | %s | %.2f | %.2f |\n", mib(slice).c_str(), mib(window).c_str(), gbps,
                  gbps / whole);
    }
  }

  std::printf(
      "\n| bulk slice | bulk bytes in flight at most | 4 KiB copy p50 us | p99 us | "
      "bulk GB/s |\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: |\n");
  struct Case {
    uint64_t slice, window;
    Small how = Small::kOne;
  };
  constexpr uint64_t MiB = 1ull << 20;
  for (const Case c :
       {Case{0, 0}, Case{MiB / 2, MiB}, Case{MiB, 2 * MiB}, Case{2 * MiB, 4 * MiB},
        Case{4 * MiB, 8 * MiB}, Case{MiB, 4 * MiB}, Case{2 * MiB, 8 * MiB}, Case{8 * MiB, 64 * MiB},
        Case{0, 0, Small::kThree}, Case{0, 0, Small::kThreeBatched},
        Case{2 * MiB, 4 * MiB, Small::kThree}, Case{2 * MiB, 4 * MiB, Small::kThreeBatched},
        Case{0, 0, Small::kOneThenThreeBatched},
        Case{2 * MiB, 4 * MiB, Small::kOneThenThreeBatched}}) {
    const Latency l = latency(p, std::max<uint64_t>(c.slice, 1), c.window, c.how);
    const char* how = c.how == Small::kOne            ? ""
                      : c.how == Small::kThree        ? " (3 copies)"
                      : c.how == Small::kThreeBatched ? " (3 copies, one batch)"
                                                      : " (1 copy, then 3 as one batch)";
    std::printf("| %s | %s%s | %.1f | %.1f | %.2f |\n", c.window ? mib(c.slice).c_str() : "-",
                c.window ? mib(c.window).c_str() : "none", how, l.p50_us, l.p99_us, l.bulk_gbps);
  }

  std::printf(
      "\n| bulk slice | bulk bytes in flight | 4 KiB copies back to back | rounds / s | bulk GB/s "
      "| of bulk alone | bulk us lost per small copy |\n");
  std::printf("| ---: | ---: | --- | ---: | ---: | ---: | ---: |\n");
  for (const Case c : {Case{MiB, 2 * MiB}, Case{2 * MiB, 4 * MiB}}) {
    const Latency alone = latency(p, c.slice, c.window, Small::kNone);
    std::printf("| %s | %s | none | 0 | %.2f | 1.00 | - |\n", mib(c.slice).c_str(),
                mib(c.window).c_str(), alone.bulk_gbps);
    struct Way {
      Small how;
      const char* what;
      int copies;
    };
    for (const Way w : {Way{Small::kOne, "1, its counter", 1},
                        Way{Small::kFourBatched, "4 in one batch, one counter", 4},
                        Way{Small::kFourCounted, "4, a counter each", 4}}) {
      const Latency l = latency(p, c.slice, c.window, w.how, std::chrono::microseconds(0));
      const double lost_s = (1 - l.bulk_gbps / alone.bulk_gbps) * l.seconds;
      std::printf("| %s | %s | %s | %.0f | %.2f | %.2f | %.2f |\n", mib(c.slice).c_str(),
                  mib(c.window).c_str(), w.what, l.rounds / l.seconds, l.bulk_gbps,
                  l.bulk_gbps / alone.bulk_gbps,
                  l.rounds ? lost_s * 1e6 / static_cast<double>(l.rounds * w.copies) : 0.0);
    }
  }

  std::printf(
      "\n| 64 MiB on stream | 4 KiB copies on stream | 4 KiB copies during it | p50 us | max us "
      "|\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: |\n");
  for (std::size_t bulk = 0; bulk < all.size(); ++bulk) {
    for (std::size_t small = 0; small < all.size(); ++small) {
      if (small == bulk) continue;
      const PairWait w = pair_wait(p, *all[bulk], *all[small]);
      std::printf("| %zu%s | %zu%s | %zu | %.1f | %.1f |\n", bulk,
                  bulk + 1 == p.streams.size() ? " (latency)" : "", small,
                  small + 1 == p.streams.size() ? " (latency)" : "", w.small_copies, w.p50_us,
                  w.max_us);
    }
  }

  // What might let a small copy pass a bulk one queued before it: a stream of the greatest
  // priority, the other direction, a second context of the same GPU (its own channels and
  // time slices on the engines).
  std::printf(
      "\n| beside 64 MiB device to host on stream 0, 4 KiB copies | 4 KiB copies during it | "
      "min us | p50 us | max us |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: |\n");
  auto row = [](const char* what, const PairWait& w) {
    std::printf("| %s | %zu | %.1f | %.1f | %.1f |\n", what, w.small_copies, w.min_us, w.p50_us,
                w.max_us);
  };
  row("device to host on stream 1", pair_wait(p, p.streams[0], p.streams[1]));
  int least = 0, greatest = 0;
  check(cuCtxGetStreamPriorityRange(&least, &greatest), "cuCtxGetStreamPriorityRange");
  Stream urgent;
  check(cuStreamCreateWithPriority(&urgent.handle, CU_STREAM_NON_BLOCKING, greatest),
        "cuStreamCreateWithPriority");
  Probe::count_into(urgent, static_cast<char*>(words) + 64 * 2 * streams);
  row("device to host on a stream of the greatest priority", pair_wait(p, p.streams[0], urgent));
  row("host to device on stream 1", pair_wait(p, p.streams[0], p.streams[1], [&] {
        check(cuMemcpyHtoDAsync(p.src + kTotal - kSmall, p.dst + kTotal - kSmall, kSmall,
                                p.streams[1].handle),
              "cuMemcpyHtoDAsync");
        p.retire_after(p.streams[1], kSmall);
      }));
  CUcontext second;
  CUctxCreateParams params{};
  check(cuCtxCreate(&second, &params, 0, device), "cuCtxCreate");
  Stream other;
  CUdeviceptr other_src = 0;
  void* other_word = nullptr;
  check(cuStreamCreate(&other.handle, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(cuMemAlloc(&other_src, kSmall), "cuMemAlloc");
  check(cuMemHostAlloc(&other_word, 64, CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc");
  Probe::count_into(other, other_word);
  check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  row("device to host on a stream of a second context", pair_wait(p, p.streams[0], other, [&] {
        check(cuCtxSetCurrent(second), "cuCtxSetCurrent");
        check(cuMemcpyDtoHAsync(p.dst + kTotal - kSmall, other_src, kSmall, other.handle),
              "cuMemcpyDtoHAsync");
        p.retire_after(other, kSmall);
        check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
      }));
  return 0;
}
