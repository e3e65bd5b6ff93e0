// iris-test-rank: one rank of an integration test, a real client process of irisd.
// Exit status: 0 on success, 10 + iris::ErrorCode when libiris threw, 2 on a data mismatch.
#include <grp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "examples/collective_sweep/pattern.hpp"
#include "iris/iris.hpp"
#include "tests/support/collective_call.hpp"
#include "tests/support/hex.hpp"

namespace {

using namespace iris::testing;

struct Options {
  std::string socket;
  std::string key = "test";
  std::string mode = "sweep";
  std::string collective = "all_gather";  // or "mixed": each iteration the next collective
  uint32_t nranks = 1;
  uint32_t rank = 0;
  uint64_t seed = 1;
  uint32_t iterations = 10;
  uint64_t max_bytes = 1 << 20;
  uint32_t inflight = 1;
  uint32_t comms = 1;
  bool inplace = false;
  int64_t as_uid = -1;
  // A communicator across nodes: every node's address (hex, as --mode node-address prints it),
  // the node of each rank, the job's secret.
  std::vector<std::string> node_addresses;
  std::vector<uint32_t> node_of_rank;
  std::string secret;
  uint32_t join_timeout_ms = 60'000;
  // Sweep until this file exists (then at most `iterations`), or wait after the first batch
  // until it exists (a job that makes no call for a while); empty: neither.
  std::string stop_file;
  std::string idle_file;
};

bool file_exists(const std::string& path) {
  return !path.empty() && ::access(path.c_str(), F_OK) == 0;
}

// The communicator `key`: across the given nodes when there are any.
iris::Communicator join(const Options& o, iris::Client& client, const std::string& key) {
  if (o.node_addresses.empty()) return iris::Communicator::init(client, key, o.nranks, o.rank);
  iris::NodeSet nodes;
  for (const std::string& hex : o.node_addresses) nodes.addresses.push_back(from_hex(hex));
  nodes.node_of_rank = o.node_of_rank;
  nodes.secret = o.secret;
  nodes.join_timeout = std::chrono::milliseconds(o.join_timeout_ms);
  return iris::Communicator::init(client, key, o.nranks, o.rank, nodes);
}

// Size of iteration i: log-uniform over [1, max_bytes], with odd sizes and the extremes mixed in.
uint64_t size_for(const Options& o, uint64_t iteration) {
  uint64_t state = o.seed ^ (iteration * 0x9e3779b97f4a7c15ull);
  const uint64_t r = iris::example::splitmix64(state);
  if (iteration == 0) return 1;
  if (iteration == 1) return o.max_bytes;
  const double span = std::log2(static_cast<double>(o.max_bytes));
  const double exponent = span * static_cast<double>(r >> 11) / static_cast<double>(1ull << 53);
  uint64_t bytes = static_cast<uint64_t>(std::exp2(exponent));
  if ((r & 1) != 0) bytes |= 1;  // odd
  return std::clamp<uint64_t>(bytes, 1, o.max_bytes);
}

uint64_t offset_for(const Options& o, uint64_t iteration, uint32_t which) {
  uint64_t state = o.seed ^ (iteration * 0xd1b54a32d192ed03ull) ^ which;
  return iris::example::splitmix64(state) % 61;  // odd offsets too
}

struct Slot {
  iris::Buffer send;
  iris::Buffer recv;
};

// In place where the collective defines it: the send block is this rank's block of recv
// (all-gather; gather at the root), recv is this rank's block of send (scatter at the root), or
// the one buffer of broadcast.
bool in_place(const Options& o, const Call& c) {
  if (c.collective == "broadcast") return true;
  if (!o.inplace) return false;
  if (c.collective == "all_gather") return true;
  return (c.collective == "gather" || c.collective == "scatter") && o.rank == c.root;
}

int sweep(const Options& o, iris::Client& client) {
  std::vector<iris::Communicator> comms;
  for (uint32_t c = 0; c < o.comms; ++c)
    comms.push_back(join(o, client, o.key + "." + std::to_string(c)));
  // Room for nranks blocks, their gaps and the odd offsets.
  const uint64_t area = o.nranks * (o.max_bytes + 3) + 128;
  std::vector<Slot> slots;
  for (uint32_t s = 0; s < o.inflight; ++s)
    slots.push_back({client.allocate(area), client.allocate(area)});

  // Whether any rank saw the stop file: agreed through an all-gather, so that every rank stops
  // after the same iteration.
  auto flags = client.allocate(o.nranks);
  auto stop_agreed = [&] {
    flags.as<unsigned char>()[o.rank] = file_exists(o.stop_file) ? 1 : 0;
    comms[0].all_gather(flags.as<unsigned char>() + o.rank, flags.data(), 1).wait();
    for (uint32_t r = 0; r < o.nranks; ++r)
      if (flags.as<unsigned char>()[r] != 0) return true;
    return false;
  };
  uint32_t done = 0;
  for (uint32_t first = 0; first < o.iterations; first += o.inflight) {
    if (!o.stop_file.empty() && first % 32 == 0 && stop_agreed()) break;
    if (first > 0 && !o.idle_file.empty())
      while (!file_exists(o.idle_file)) ::usleep(10'000);
    const uint32_t batch = std::min(o.inflight, o.iterations - first);
    done += batch;
    std::vector<iris::Request> requests;
    std::vector<Call> calls;
    std::vector<unsigned char*> sends;
    for (uint32_t b = 0; b < batch; ++b) {
      const uint64_t it = first + b;
      const std::string& kind =
          o.collective == "mixed" ? kCollectives[it % kCollectives.size()] : o.collective;
      Call call = plan_call(o.nranks, o.rank, o.seed, kind, it, size_for(o, it));
      auto* recv = slots[b].recv.as<unsigned char>() + offset_for(o, it, 1);
      unsigned char* send = slots[b].send.as<unsigned char>() + offset_for(o, it, 0);
      if (in_place(o, call)) {
        if (kind == "scatter") {
          recv = send + o.rank * call.bytes;
        } else if (kind == "broadcast") {
          send = recv;
        } else {
          send = recv + o.rank * call.bytes;
        }
      }
      for (const Block& blk : call.recv_blocks)
        iris::example::fill_block(recv + blk.offset, blk.bytes, o.seed, blk.tag, it, true);
      for (const Block& blk : call.send_blocks)
        iris::example::fill_block(send + blk.offset, blk.bytes, o.seed, blk.tag, it);
      requests.push_back(submit_call(comms[it % comms.size()], call, send, recv));
      calls.push_back(std::move(call));
      sends.push_back(send);
    }
    for (uint32_t b = 0; b < batch; ++b) {
      requests[b].wait();
      const uint64_t it = first + b;
      const Call& call = calls[b];
      // Once wait() returns, the send buffer is the rank's again: scribble over it at once.
      // Peers whose copies still read it would then receive the scribble and fail their check.
      // The tail first: that is where copies still in flight would be reading.
      if (!in_place(o, call)) {
        for (auto blk = call.send_blocks.rbegin(); blk != call.send_blocks.rend(); ++blk)
          std::memset(sends[b] + blk->offset, 0x5A, blk->bytes);
        std::memset(slots[b].send.data(), 0x5A, slots[b].send.size());
      }
      const auto* recv = in_place(o, call) && call.collective == "scatter"
                             ? sends[b] + o.rank * call.bytes
                             : slots[b].recv.as<unsigned char>() + offset_for(o, it, 1);
      for (const Block& blk : call.recv_blocks) {
        const std::size_t bad =
            iris::example::check_block(recv + blk.offset, blk.bytes, o.seed, blk.tag, it);
        if (bad != blk.bytes) {
          std::cerr << "rank " << o.rank << " iteration " << it << " " << call.collective
                    << " (root " << call.root << ", " << call.bytes << " bytes): block with tag "
                    << blk.tag << " at offset " << blk.offset << " wrong at byte " << bad
                    << " (seed " << o.seed << ")\n";
          return 2;
        }
      }
    }
  }
  std::cout << "ok rank " << o.rank << " iterations " << done << std::endl;
  return 0;
}

// Sends and receives around the ring until the stop file (every rank stops after the same
// iteration): each iteration in one of three shapes (a group of a send and a receive; the receive
// posted first; two messages each way on the channel and one to itself), every byte checked, the
// send buffers scribbled over the moment wait() returns, so that a copy run again after it
// completed shows. Data tags: (sender, iteration * 4 + message).
int p2p(const Options& o, iris::Client& client) {
  auto comm = join(o, client, o.key + ".p2p");
  const uint32_t next = (o.rank + 1) % o.nranks, prev = (o.rank + o.nranks - 1) % o.nranks;
  constexpr uint32_t kMessages = 3;
  std::vector<iris::Buffer> sends, recvs;
  for (uint32_t m = 0; m < kMessages; ++m) {
    sends.push_back(client.allocate(o.max_bytes + 1));
    recvs.push_back(client.allocate(o.max_bytes + 1));
  }
  auto flags = client.allocate(o.nranks);
  uint32_t done = 0;
  for (uint64_t it = 0; it < o.iterations; ++it) {
    if (!o.stop_file.empty() && it % 32 == 0) {
      flags.as<unsigned char>()[o.rank] = file_exists(o.stop_file) ? 1 : 0;
      comm.all_gather(flags.as<unsigned char>() + o.rank, flags.data(), 1).wait();
      if (std::count(flags.as<unsigned char>(), flags.as<unsigned char>() + o.nranks, 1) > 0) break;
    }
    const uint64_t bytes = size_for(o, it);
    const uint32_t shape = it % 3;
    // Message m goes to `to[m]` and comes from `from[m]`.
    const std::vector<uint32_t> to =
        shape == 2 ? std::vector<uint32_t>{next, next, o.rank} : std::vector<uint32_t>{next};
    const std::vector<uint32_t> from =
        shape == 2 ? std::vector<uint32_t>{prev, prev, o.rank} : std::vector<uint32_t>{prev};
    for (uint32_t m = 0; m < to.size(); ++m) {
      iris::example::fill_block(sends[m].data(), bytes, o.seed, o.rank, it * 4 + m);
      iris::example::fill_block(recvs[m].data(), bytes, o.seed, from[m], it * 4 + m, true);
    }
    std::vector<iris::Request> send_requests, recv_requests;
    auto post_sends = [&] {
      for (uint32_t m = 0; m < to.size(); ++m)
        send_requests.push_back(comm.send(sends[m].data(), bytes, to[m]));
    };
    auto post_recvs = [&] {
      for (uint32_t m = 0; m < from.size(); ++m)
        recv_requests.push_back(comm.recv(recvs[m].data(), bytes, from[m]));
    };
    if (shape == 0) {
      iris::group_start();
      post_sends();
      post_recvs();
      iris::group_end();
    } else {
      post_recvs();
      post_sends();
    }
    for (uint32_t m = 0; m < send_requests.size(); ++m) {
      send_requests[m].wait();
      std::memset(sends[m].data(), 0x5A, bytes);
    }
    for (uint32_t m = 0; m < recv_requests.size(); ++m) {
      recv_requests[m].wait();
      const std::size_t bad =
          iris::example::check_block(recvs[m].data(), bytes, o.seed, from[m], it * 4 + m);
      if (bad != bytes) {
        std::cerr << "rank " << o.rank << " iteration " << it << " message " << m << " from rank "
                  << from[m] << " (" << bytes << " bytes) wrong at byte " << bad << " (seed "
                  << o.seed << ")\n";
        return 2;
      }
    }
    ++done;
  }
  std::cout << "ok rank " << o.rank << " iterations " << done << std::endl;
  return 0;
}

// Every rank but the last passes correct all-to-all-v counts; the last expects one byte more from
// rank 0 than rank 0 sends it. Every rank must see kSizeMismatch, and no byte outside the
// receive blocks may change.
int v_mismatch(const Options& o, iris::Client& client) {
  auto comm = iris::Communicator::init(client, o.key, o.nranks, o.rank);
  Call call = plan_call(o.nranks, o.rank, o.seed, "all_to_all_v", 0, o.max_bytes);
  if (o.rank == o.nranks - 1) call.recv_counts[0] += 1;
  const uint64_t area = o.nranks * (o.max_bytes + 3) + 128;
  auto send = client.allocate(area);
  auto recv = client.allocate(area + 64);
  std::memset(recv.data(), 0xC3, recv.size());
  for (const Block& blk : call.send_blocks)
    iris::example::fill_block(send.as<unsigned char>() + blk.offset, blk.bytes, o.seed, blk.tag, 0);
  auto request = submit_call(comm, call, send.as<unsigned char>(), recv.as<unsigned char>() + 32);
  try {
    request.wait();
  } catch (const iris::Error&) {
    std::vector<bool> inside(recv.size(), false);
    for (uint32_t s = 0; s < o.nranks; ++s)
      for (uint64_t i = 0; i < call.recv_counts[s]; ++i)
        inside[32 + call.recv_displs[s] + i] = true;
    const auto* bytes = recv.as<unsigned char>();
    for (std::size_t i = 0; i < recv.size(); ++i) {
      if (!inside[i] && bytes[i] != 0xC3) {
        std::cerr << "rank " << o.rank << ": byte " << i << " outside the receive blocks changed\n";
        return 2;
      }
    }
    // Leave only once every rank has its answer: a rank leaving earlier would free the key, and
    // a late one would join a new communicator of the same name and wait there alone.
    auto done = iris::Communicator::init(client, o.key + ".done", o.nranks, o.rank);
    done.barrier();
    throw;
  }
  return 0;
}

// Joins, submits `inflight` collectives, says so, and waits to be killed.
int hang(const Options& o, iris::Client& client) {
  auto comm = join(o, client, o.key);
  auto send = client.allocate(o.nranks * (o.max_bytes + 3) + 128);
  auto recv = client.allocate(o.nranks * (o.max_bytes + 3) + 128);
  std::vector<iris::Request> requests;
  for (uint32_t i = 0; i < o.inflight; ++i) {
    const std::string& kind = o.collective == "mixed" ? kCollectives[i % 6] : o.collective;
    Call call = plan_call(o.nranks, o.rank, o.seed, kind, i, o.max_bytes);
    requests.push_back(submit_call(comm, call, send.as<unsigned char>(), recv.as<unsigned char>()));
  }
  std::cout << "submitted" << std::endl;
  for (;;) ::pause();
}

int node_address(iris::Client& client) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : client.node_address()) {
    hex.push_back(digits[c >> 4]);
    hex.push_back(digits[c & 15]);
  }
  std::cout << hex << std::endl;
  return 0;
}

int comm_init_only(const Options& o, iris::Client& client) {
  auto comm = iris::Communicator::init(client, o.key, o.nranks, o.rank);
  std::cout << "joined comm " << comm.id() << " session " << client.session_id() << " pid "
            << ::getpid() << " uid " << ::getuid() << std::endl;
  // Stay until stdin closes, so that the test can look at the session.
  char c;
  while (::read(STDIN_FILENO, &c, 1) > 0) {
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"iris-test-rank"};
  app.add_option("--socket", o.socket)->required();
  app.add_option("--key", o.key);
  app.add_option("--mode", o.mode)
      ->check(CLI::IsMember({"sweep", "p2p", "hang", "comm-init", "v-mismatch", "node-address"}));
  std::vector<std::string> collectives = kCollectives;
  collectives.push_back("mixed");
  app.add_option("--collective", o.collective)->check(CLI::IsMember(collectives));
  app.add_option("--nranks", o.nranks);
  app.add_option("--rank", o.rank);
  app.add_option("--seed", o.seed);
  app.add_option("--iterations", o.iterations);
  app.add_option("--max-bytes", o.max_bytes);
  app.add_option("--inflight", o.inflight)->check(CLI::Range(1u, 64u));
  app.add_option("--comms", o.comms)->check(CLI::Range(1u, 16u));
  app.add_flag("--inplace", o.inplace);
  app.add_option("--as-uid", o.as_uid, "drop to this uid (and its primary gid) first");
  app.add_option("--node-addresses", o.node_addresses, "every node's address, hex")->delimiter(',');
  app.add_option("--node-of-rank", o.node_of_rank, "each rank's node")->delimiter(',');
  app.add_option("--secret", o.secret);
  app.add_option("--join-timeout-ms", o.join_timeout_ms);
  app.add_option("--stop-file", o.stop_file, "sweep until this file exists");
  app.add_option("--idle-file", o.idle_file, "after the first batch, wait until this file exists");
  CLI11_PARSE(app, argc, argv);

  if (o.as_uid >= 0) {
    const auto uid = static_cast<uid_t>(o.as_uid);
    if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0) {
      std::perror("drop privileges");
      return 3;
    }
  }
  try {
    iris::ClientOptions options;
    options.socket_path = o.socket;
    options.client_name = "iris-test-rank " + std::to_string(o.rank);
    auto client = iris::Client::connect(options);
    if (o.mode == "node-address") return node_address(client);
    if (o.mode == "hang") return hang(o, client);
    if (o.mode == "comm-init") return comm_init_only(o, client);
    if (o.mode == "v-mismatch") return v_mismatch(o, client);
    if (o.mode == "p2p") return p2p(o, client);
    return sweep(o, client);
  } catch (const iris::Error& e) {
    std::cerr << "rank " << o.rank << ": " << e.what() << std::endl;
    std::cout << "error " << static_cast<uint32_t>(e.code()) << std::endl;
    return 10 + static_cast<int>(e.code());
  }
}
