// iris-test-rank: one rank of an integration test, a real client process of irisd.
// Exit status: 0 on success, 10 + iris::ErrorCode when libiris threw, 2 on a data mismatch.
#include <grp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "examples/allgather_sweep/pattern.hpp"
#include "iris/iris.hpp"

namespace {

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
};

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

const std::vector<std::string> kCollectives = {"all_gather", "all_to_all", "all_to_all_v",
                                               "broadcast",  "gather",     "scatter"};

// One block of test data: `bytes` at `offset` of a rank's send or receive area, whose contents
// are a function of (seed, tag, iteration).
struct Block {
  uint64_t offset;
  uint64_t bytes;
  uint32_t tag;
};

// This rank's side of one collective: what it sends and where, what must land where, and the
// arguments of the call. Computed alike by every rank from (seed, iteration).
struct Call {
  std::string collective;
  uint64_t bytes = 0;
  uint32_t root = 0;
  bool send_significant = true;
  bool recv_significant = true;
  std::vector<Block> send_blocks;  // offsets from the send pointer
  std::vector<Block> recv_blocks;  // offsets from the receive pointer
  std::vector<uint64_t> send_counts, send_displs, recv_counts, recv_displs;
};

// all-to-all-v's count matrix: what rank s sends rank d in an iteration, zeros common.
uint64_t v_count(const Options& o, uint64_t it, uint32_t s, uint32_t d, uint64_t max) {
  uint64_t state = o.seed ^ (it * 0x9e3779b97f4a7c15ull) ^ (uint64_t{s} << 32) ^ d;
  const uint64_t r = iris::example::splitmix64(state);
  return (r >> 60) % 4 == 0 ? 0 : r % (max + 1);
}

Call plan_call(const Options& o, const std::string& collective, uint64_t it, uint64_t b) {
  const uint32_t n = o.nranks;
  const uint32_t me = o.rank;
  Call c;
  c.collective = collective;
  c.bytes = b;
  c.root = static_cast<uint32_t>(it % n);
  const auto tag = [n](uint32_t src, uint32_t dst) { return src * n + dst; };
  if (collective == "all_gather") {
    c.send_blocks = {{0, b, tag(me, 0)}};
    for (uint32_t s = 0; s < n; ++s) c.recv_blocks.push_back({s * b, b, tag(s, 0)});
  } else if (collective == "all_to_all") {
    for (uint32_t j = 0; j < n; ++j) {
      c.send_blocks.push_back({j * b, b, tag(me, j)});
      c.recv_blocks.push_back({j * b, b, tag(j, me)});
    }
  } else if (collective == "all_to_all_v") {
    // Send blocks packed in rank order with small gaps, receive blocks in reverse order.
    uint64_t at = 0;
    for (uint32_t d = 0; d < n; ++d) {
      c.send_counts.push_back(v_count(o, it, me, d, b));
      c.send_displs.push_back(at);
      c.send_blocks.push_back({at, c.send_counts.back(), tag(me, d)});
      at += c.send_counts.back() + d % 3;
    }
    c.recv_counts.resize(n);
    c.recv_displs.resize(n);
    at = 0;
    for (uint32_t s = n; s-- > 0;) {
      c.recv_counts[s] = v_count(o, it, s, me, b);
      c.recv_displs[s] = at;
      c.recv_blocks.push_back({at, c.recv_counts[s], tag(s, me)});
      at += c.recv_counts[s] + 1;
    }
  } else if (collective == "broadcast") {
    if (me == c.root) c.send_blocks = {{0, b, tag(c.root, 0)}};
    if (me != c.root) c.recv_blocks = {{0, b, tag(c.root, 0)}};
  } else if (collective == "gather") {
    c.send_blocks = {{0, b, tag(me, 0)}};
    c.recv_significant = me == c.root;
    if (me == c.root)
      for (uint32_t s = 0; s < n; ++s) c.recv_blocks.push_back({s * b, b, tag(s, 0)});
  } else {  // scatter
    c.send_significant = me == c.root;
    if (me == c.root)
      for (uint32_t j = 0; j < n; ++j) c.send_blocks.push_back({j * b, b, tag(c.root, j)});
    c.recv_blocks = {{0, b, tag(c.root, me)}};
  }
  return c;
}

iris::Request submit_call(iris::Communicator& comm, const Call& c, unsigned char* send,
                          unsigned char* recv) {
  const std::string& k = c.collective;
  void* to = c.recv_significant ? recv : nullptr;
  const void* from = c.send_significant ? send : nullptr;
  if (k == "all_gather") return comm.all_gather(from, to, c.bytes);
  if (k == "all_to_all") return comm.all_to_all(from, to, c.bytes);
  if (k == "all_to_all_v")
    return comm.all_to_all_v(from, c.send_counts, c.send_displs, to, c.recv_counts, c.recv_displs);
  if (k == "broadcast") return comm.broadcast(send, c.bytes, c.root);
  if (k == "gather") return comm.gather(from, to, c.bytes, c.root);
  return comm.scatter(from, to, c.bytes, c.root);
}

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
    comms.push_back(
        iris::Communicator::init(client, o.key + "." + std::to_string(c), o.nranks, o.rank));
  // Room for nranks blocks, their gaps and the odd offsets.
  const uint64_t area = o.nranks * (o.max_bytes + 3) + 128;
  std::vector<Slot> slots;
  for (uint32_t s = 0; s < o.inflight; ++s)
    slots.push_back({client.allocate(area), client.allocate(area)});

  for (uint32_t first = 0; first < o.iterations; first += o.inflight) {
    const uint32_t batch = std::min(o.inflight, o.iterations - first);
    std::vector<iris::Request> requests;
    std::vector<Call> calls;
    std::vector<unsigned char*> sends;
    for (uint32_t b = 0; b < batch; ++b) {
      const uint64_t it = first + b;
      const std::string& kind =
          o.collective == "mixed" ? kCollectives[it % kCollectives.size()] : o.collective;
      Call call = plan_call(o, kind, it, size_for(o, it));
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
  std::cout << "ok rank " << o.rank << " iterations " << o.iterations << std::endl;
  return 0;
}

// Every rank but the last passes correct all-to-all-v counts; the last expects one byte more from
// rank 0 than rank 0 sends it. Every rank must see kSizeMismatch, and no byte outside the
// receive blocks may change.
int v_mismatch(const Options& o, iris::Client& client) {
  auto comm = iris::Communicator::init(client, o.key, o.nranks, o.rank);
  Call call = plan_call(o, "all_to_all_v", 0, o.max_bytes);
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
    throw;
  }
  return 0;
}

// Joins, submits `inflight` collectives, says so, and waits to be killed.
int hang(const Options& o, iris::Client& client) {
  auto comm = iris::Communicator::init(client, o.key, o.nranks, o.rank);
  auto send = client.allocate(o.nranks * (o.max_bytes + 3) + 128);
  auto recv = client.allocate(o.nranks * (o.max_bytes + 3) + 128);
  std::vector<iris::Request> requests;
  for (uint32_t i = 0; i < o.inflight; ++i) {
    const std::string& kind = o.collective == "mixed" ? kCollectives[i % 6] : o.collective;
    Call call = plan_call(o, kind, i, o.max_bytes);
    requests.push_back(submit_call(comm, call, send.as<unsigned char>(), recv.as<unsigned char>()));
  }
  std::cout << "submitted" << std::endl;
  for (;;) ::pause();
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
      ->check(CLI::IsMember({"sweep", "hang", "comm-init", "v-mismatch"}));
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
    if (o.mode == "hang") return hang(o, client);
    if (o.mode == "comm-init") return comm_init_only(o, client);
    if (o.mode == "v-mismatch") return v_mismatch(o, client);
    return sweep(o, client);
  } catch (const iris::Error& e) {
    std::cerr << "rank " << o.rank << ": " << e.what() << std::endl;
    std::cout << "error " << static_cast<uint32_t>(e.code()) << std::endl;
    return 10 + static_cast<int>(e.code());
  }
}
