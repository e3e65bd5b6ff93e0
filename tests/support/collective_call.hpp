// Test collectives as data: for (collective, nranks, rank, seed, iteration, bytes), which blocks a
// rank sends from where, which must land where, and the call's arguments. Every rank computes the
// same plan, so each can check every byte it receives without another channel. Used by the
// host rank program (iris-test-rank) and the GPU one (iris-gpu-rank); C++17, for nvcc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "examples/collective_sweep/pattern.hpp"
#include "iris/iris.hpp"

namespace iris::testing {

inline const std::vector<std::string> kCollectives = {"all_gather", "all_to_all", "all_to_all_v",
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
inline uint64_t v_count(uint64_t seed, uint64_t it, uint32_t s, uint32_t d, uint64_t max) {
  uint64_t state = seed ^ (it * 0x9e3779b97f4a7c15ull) ^ (uint64_t{s} << 32) ^ d;
  const uint64_t r = iris::example::splitmix64(state);
  return (r >> 60) % 4 == 0 ? 0 : r % (max + 1);
}

inline Call plan_call(uint32_t n, uint32_t me, uint64_t seed, const std::string& collective,
                      uint64_t it, uint64_t b) {
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
      c.send_counts.push_back(v_count(seed, it, me, d, b));
      c.send_displs.push_back(at);
      c.send_blocks.push_back({at, c.send_counts.back(), tag(me, d)});
      at += c.send_counts.back() + d % 3;
    }
    c.recv_counts.resize(n);
    c.recv_displs.resize(n);
    at = 0;
    for (uint32_t s = n; s-- > 0;) {
      c.recv_counts[s] = v_count(seed, it, s, me, b);
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

inline iris::Request submit_call(iris::Communicator& comm, const Call& c, unsigned char* send,
                                 unsigned char* recv, iris::Stream stream = {}) {
  const std::string& k = c.collective;
  void* to = c.recv_significant ? recv : nullptr;
  const void* from = c.send_significant ? send : nullptr;
  if (k == "all_gather") return comm.all_gather(from, to, c.bytes, stream);
  if (k == "all_to_all") return comm.all_to_all(from, to, c.bytes, stream);
  if (k == "all_to_all_v")
    return comm.all_to_all_v(from, c.send_counts, c.send_displs, to, c.recv_counts, c.recv_displs,
                             stream);
  if (k == "broadcast") return comm.broadcast(send, c.bytes, c.root, stream);
  if (k == "gather") return comm.gather(from, to, c.bytes, c.root, stream);
  return comm.scatter(from, to, c.bytes, c.root, stream);
}

}  // namespace iris::testing
