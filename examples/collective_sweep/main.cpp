// collective_sweep: one rank of a verified sweep of one collective (all_gather by default,
// all_to_all or broadcast) through irisd. Start it once per rank (the demo starts 4); rank 0
// prints latency and bandwidth per size.
//
//   collective_sweep --socket /run/irisd/irisd.sock --nranks 4 --rank 0 [--collective all_to_all]
//
// Per size, first three verified rounds (fresh data, the receive buffer poisoned first, every
// byte checked after), untimed; then the timed rounds, which do nothing but the collective (a
// barrier before each starts all ranks together; a round's time is that of its slowest rank),
// so no rank's time includes waiting for a peer still checking the previous round.
// With --csv, two more columns say where a round's time went: how far apart the ranks called
// (the last call's start minus the first's) and how long after the last call the last rank
// returned. Ranks on one machine share its monotonic clock (steady_clock), so their instants
// compare. Ranks that call together but return late point at irisd; a wide spread of calls points
// at the ranks (cores shared, a rank descheduled).
// "bytes" is one block: what each rank sends (all-gather), sends to each peer (all-to-all), or
// what the root sends (broadcast, from rank 0).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iris/iris.hpp>
#include <random>
#include <string>
#include <vector>

#include "pattern.hpp"

namespace {

struct Options {
  std::string socket = iris::default_socket_path();  // $IRIS_SOCKET, else /run/irisd/irisd.sock
  std::string key = "collective_sweep";
  uint32_t nranks = 1;
  uint32_t rank = 0;
  uint64_t min_bytes = 64;
  uint64_t max_bytes = 64ull << 20;
  uint32_t iterations = 0;  // 0: scaled by size
  bool verify = true;
  bool csv = false;
  std::string collective = "all_gather";
};

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: collective_sweep --nranks N --rank R [--socket PATH] [--key KEY]\n"
               "         [--collective all_gather|all_to_all|broadcast] [--min-bytes B]\n"
               "         [--max-bytes B] [--iterations N] [--no-verify] [--csv]\n");
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--socket")
      o.socket = value();
    else if (a == "--key")
      o.key = value();
    else if (a == "--nranks")
      o.nranks = static_cast<uint32_t>(std::stoul(value()));
    else if (a == "--rank")
      o.rank = static_cast<uint32_t>(std::stoul(value()));
    else if (a == "--min-bytes")
      o.min_bytes = std::stoull(value());
    else if (a == "--max-bytes")
      o.max_bytes = std::stoull(value());
    else if (a == "--iterations")
      o.iterations = static_cast<uint32_t>(std::stoul(value()));
    else if (a == "--no-verify")
      o.verify = false;
    else if (a == "--csv")
      o.csv = true;
    else if (a == "--collective")
      o.collective = value();
    else
      usage();
  }
  if (o.nranks == 0 || o.rank >= o.nranks || o.min_bytes == 0 || o.min_bytes > o.max_bytes ||
      (o.collective != "all_gather" && o.collective != "all_to_all" && o.collective != "broadcast"))
    usage();
  return o;
}

// Where one iteration's data lies: the blocks this rank sends (offsets into its send buffer, or
// into the receive buffer for broadcast's one buffer) and those it must receive, each tagged
// with what identifies its contents (see pattern.hpp).
struct Block {
  uint64_t offset;
  uint32_t tag;
};
struct Blocks {
  std::vector<Block> send, recv;
  bool one_buffer = false;  // broadcast: send blocks are in the receive buffer
  char* send_base(iris::Buffer& send_buffer, iris::Buffer& recv_buffer) const {
    return one_buffer ? recv_buffer.as<char>() : send_buffer.as<char>();
  }
};

Blocks blocks_of(const Options& o, uint64_t bytes) {
  const uint32_t n = o.nranks, me = o.rank;
  Blocks b;
  if (o.collective == "all_to_all") {
    for (uint32_t j = 0; j < n; ++j) {
      b.send.push_back({j * bytes, me * n + j});  // to rank j
      b.recv.push_back({j * bytes, j * n + me});  // from rank j
    }
  } else if (o.collective == "broadcast") {
    b.one_buffer = true;
    (me == 0 ? b.send : b.recv).push_back({0, 0});
  } else {
    b.send.push_back({0, me});
    for (uint32_t r = 0; r < n; ++r) b.recv.push_back({r * bytes, r});
  }
  return b;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// One rank's timed round, as every rank gathers it: when it called and when it returned.
struct Round {
  double start;  // us on the machine's monotonic clock
  double end;
};

double micros_since_epoch(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    iris::ClientOptions client_options;
    client_options.socket_path = o.socket;
    client_options.client_name = "collective_sweep rank " + std::to_string(o.rank);
    auto client = iris::Client::connect(client_options);
    auto comm = iris::Communicator::init(client, o.key, o.nranks, o.rank);
    // Room for the largest block, and for the seed and the rounds' times every rank gathers.
    const uint64_t block_room = std::max<uint64_t>(o.max_bytes, sizeof(Round));
    auto send = client.allocate(block_room * o.nranks);
    auto recv = client.allocate(block_room * o.nranks);
    // Touch every page once, also with --no-verify: untouched shared memory reads as the
    // kernel's zero page, which would make the copies look faster than real data allows.
    std::memset(send.data(), 1, send.size());
    std::memset(recv.data(), 2, recv.size());

    // Fresh data every run: rank 0 draws the seed and every rank takes it from an all-gather.
    std::random_device entropy;
    const uint64_t my_seed = (uint64_t{entropy()} << 32) | entropy();
    std::memcpy(send.data(), &my_seed, sizeof(my_seed));
    comm.all_gather(send.data(), recv.data(), sizeof(my_seed)).wait();
    uint64_t seed;
    std::memcpy(&seed, recv.data(), sizeof(seed));
    if (o.rank == 0) {
      if (o.csv) {
        std::printf(
            "nranks,bytes_per_rank,iterations,p50_us,p99_us,algbw_GBps,moved_GBps,"
            "call_spread_p50_us,after_last_call_p50_us\n");
      } else {
        std::printf("irisd %s, engine %s, %s, %u ranks%s\n", client.daemon_version().c_str(),
                    client.engine().c_str(), o.collective.c_str(), o.nranks,
                    o.verify ? ", every byte verified" : "");
        std::printf("%14s %6s %10s %10s %12s %12s\n", "bytes/rank", "iters", "p50 us", "p99 us",
                    "algbw GB/s", "moved GB/s");
      }
    }
    uint64_t iteration = 0;
    for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
      const uint32_t iters =
          o.iterations != 0
              ? o.iterations
              : static_cast<uint32_t>(std::clamp<uint64_t>((256ull << 20) / bytes, 5, 200));
      auto run_collective = [&] {
        if (o.collective == "all_to_all") {
          comm.all_to_all(send.data(), recv.data(), bytes).wait();
        } else if (o.collective == "broadcast") {
          comm.broadcast(recv.data(), bytes, 0).wait();
        } else {
          comm.all_gather(send.data(), recv.data(), bytes).wait();
        }
      };
      constexpr uint32_t kVerifiedRounds = 3;
      for (uint32_t it = 0; o.verify && it < kVerifiedRounds; ++it, ++iteration) {
        const auto blocks = blocks_of(o, bytes);
        for (const Block& b : blocks.recv)
          iris::example::fill_block(recv.as<char>() + b.offset, bytes, seed, b.tag, iteration,
                                    true);
        for (const Block& b : blocks.send)
          iris::example::fill_block(blocks.send_base(send, recv) + b.offset, bytes, seed, b.tag,
                                    iteration);
        run_collective();
        for (const Block& b : blocks.recv) {
          const auto bad =
              iris::example::check_block(recv.as<char>() + b.offset, bytes, seed, b.tag, iteration);
          if (bad != bytes) {
            std::fprintf(stderr, "rank %u: %llu-byte %s: block with tag %u wrong at %zu\n", o.rank,
                         static_cast<unsigned long long>(bytes), o.collective.c_str(), b.tag, bad);
            return 1;
          }
        }
        comm.barrier();  // nobody refills its buffers while a peer still reads them
      }
      std::vector<double> latency_us, call_spread_us, after_last_call_us;
      std::vector<Round> rounds(o.nranks);
      for (uint32_t it = 0; it < iters; ++it) {
        comm.barrier();
        const auto start = std::chrono::steady_clock::now();
        run_collective();
        const auto end = std::chrono::steady_clock::now();
        // The collective took as long as its slowest rank: gather every rank's start and end
        // (through irisd itself, after the timed part) and keep the longest time.
        const Round mine{micros_since_epoch(start), micros_since_epoch(end)};
        std::memcpy(send.data(), &mine, sizeof(mine));
        comm.all_gather(send.data(), recv.data(), sizeof(mine)).wait();
        std::memcpy(rounds.data(), recv.data(), o.nranks * sizeof(Round));
        double slowest = 0, first_call = rounds[0].start, last_call = rounds[0].start,
               last_return = rounds[0].end;
        for (const Round& r : rounds) {
          slowest = std::max(slowest, r.end - r.start);
          first_call = std::min(first_call, r.start);
          last_call = std::max(last_call, r.start);
          last_return = std::max(last_return, r.end);
        }
        latency_us.push_back(slowest);
        call_spread_us.push_back(last_call - first_call);
        after_last_call_us.push_back(last_return - last_call);
      }
      if (o.rank != 0) continue;
      const double p50 = percentile(latency_us, 0.50);
      const double p99 = percentile(latency_us, 0.99);
      // algbw (NCCL's): one rank's output bytes / time. moved: every byte irisd copied / time
      // (all n x n blocks for the all-gather and all-to-all, n - 1 for a broadcast).
      const bool broadcast = o.collective == "broadcast";
      const double out_bytes = static_cast<double>(bytes) * (broadcast ? 1 : o.nranks);
      const double algbw = out_bytes / (p50 * 1e3);
      const double moved = algbw * (broadcast ? o.nranks - 1 : o.nranks);
      if (o.csv) {
        std::printf("%u,%llu,%u,%.2f,%.2f,%.3f,%.3f,%.2f,%.2f\n", o.nranks,
                    static_cast<unsigned long long>(bytes), iters, p50, p99, algbw, moved,
                    percentile(call_spread_us, 0.50), percentile(after_last_call_us, 0.50));
      } else {
        std::printf("%14llu %6u %10.1f %10.1f %12.2f %12.2f\n",
                    static_cast<unsigned long long>(bytes), iters, p50, p99, algbw, moved);
      }
      std::fflush(stdout);
    }
    comm.destroy();
  } catch (const iris::Error& e) {
    std::fprintf(stderr, "rank %u: %s\n", o.rank, e.what());
    return 1;
  }
  return 0;
}
