// The operations' plans (operation_plan.hpp).
#include "client/nccl/operation_plan.hpp"

#include <algorithm>

namespace iris::nccl {

namespace {

std::optional<uint64_t> times(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

Transfer transfer(Move move, std::optional<At> send, std::optional<At> recv, uint64_t bytes,
                  uint32_t peer = 0) {
  Transfer t;
  t.move = move;
  t.send = send;
  t.recv = recv;
  t.bytes = bytes;
  t.peer = peer;
  return t;
}

LocalStep copy(At from, At to, uint64_t bytes) {
  LocalStep s{LocalStep::Kind::kCopy, from, to};
  s.bytes = bytes;
  return s;
}

LocalStep reduce(At from, uint32_t blocks, uint64_t stride, uint64_t count, At to) {
  LocalStep s{LocalStep::Kind::kReduce, from, to};
  s.blocks = blocks;
  s.stride = stride;
  s.count = count;
  return s;
}

constexpr At kSend0{Area::kSend, 0};
constexpr At kRecv0{Area::kRecv, 0};
constexpr At kScratch0{Area::kScratch, 0};

}  // namespace

const char* op_name(OpKind kind) {
  switch (kind) {
    case OpKind::kAllGather:
      return "AllGather";
    case OpKind::kAllReduce:
      return "AllReduce";
    case OpKind::kReduceScatter:
      return "ReduceScatter";
    case OpKind::kReduce:
      return "Reduce";
    case OpKind::kBroadcast:
      return "Broadcast";
    case OpKind::kAlltoAll:
      return "AlltoAll";
    case OpKind::kGather:
      return "Gather";
    case OpKind::kScatter:
      return "Scatter";
    case OpKind::kSend:
      return "Send";
    case OpKind::kRecv:
      return "Recv";
  }
  return "?";
}

bool reduces(OpKind kind) {
  return kind == OpKind::kAllReduce || kind == OpKind::kReduceScatter || kind == OpKind::kReduce;
}

std::pair<uint64_t, uint64_t> all_reduce_chunk(uint64_t count, uint32_t nranks, uint32_t rank) {
  const uint64_t base = count / nranks, larger = count % nranks;
  const uint64_t elements = base + (rank < larger ? 1 : 0);
  const uint64_t first = rank * base + std::min<uint64_t>(rank, larger);
  return {first, elements};
}

std::pair<uint64_t, uint64_t> transfer_reach(const Transfer& t, uint32_t nranks, bool root) {
  const uint64_t b = t.bytes, all = b * nranks;
  switch (t.move) {
    case Move::kAllGather:
      return {b, all};
    case Move::kAllToAll:
      return {all, all};
    case Move::kBroadcast:
      return {0, b};
    case Move::kGather:
      return {b, root ? all : 0};
    case Move::kScatter:
      return {root ? all : 0, b};
    case Move::kSend:
      return {b, 0};
    case Move::kRecv:
      return {0, b};
    case Move::kAllToAllV: {
      uint64_t send = 0, recv = 0;
      for (uint32_t j = 0; j < nranks; ++j) {
        send = std::max(send, t.v[1][j] + t.v[0][j]);
        recv = std::max(recv, t.v[3][j] + t.v[2][j]);
      }
      return {send, recv};
    }
  }
  return {0, 0};
}

PlanBytes plan_bytes(const OpPlan& plan, ElementType type, uint32_t nranks, bool root) {
  PlanBytes bytes;
  for (const Phase& phase : plan.phases) {
    for (const Transfer& t : phase.transfers) {
      if (t.move != Move::kAllToAllV) {
        bytes.by_irisd += transfer_reach(t, nranks, root).second;
        continue;
      }
      for (uint64_t landed : t.v[2]) bytes.by_irisd += landed;
    }
    for (const auto* steps : {&phase.before, &phase.after})
      for (const LocalStep& s : *steps)
        bytes.local += s.kind == LocalStep::Kind::kCopy ? s.bytes : s.count * element_bytes(type);
  }
  return bytes;
}

std::optional<OpPlan> plan_operation(const OpCall& call, uint32_t nranks, uint32_t rank) {
  const uint64_t size = element_bytes(call.type);
  const auto bytes_opt = times(call.count, size);
  if (!bytes_opt || !times(*bytes_opt, nranks)) return std::nullopt;
  const uint64_t bytes = *bytes_opt;    // one rank's block
  const uint64_t all = bytes * nranks;  // every rank's blocks
  const bool root = rank == call.peer;
  OpPlan plan;
  if (bytes == 0) return plan;
  Phase phase;
  switch (call.kind) {
    case OpKind::kAllGather:
      plan.send_bytes = bytes;
      plan.recv_bytes = all;
      phase.transfers.push_back(transfer(Move::kAllGather, kSend0, kRecv0, bytes));
      break;
    case OpKind::kAlltoAll:
      plan.send_bytes = all;
      plan.recv_bytes = all;
      if (call.send == call.recv) {  // in place: irisd's all-to-all reads another buffer
        plan.scratch_bytes = all;
        phase.before.push_back(copy(kSend0, kScratch0, all));
        phase.transfers.push_back(transfer(Move::kAllToAll, kScratch0, kRecv0, bytes));
      } else {
        phase.transfers.push_back(transfer(Move::kAllToAll, kSend0, kRecv0, bytes));
      }
      break;
    case OpKind::kBroadcast:
      plan.send_bytes = root ? bytes : 0;
      plan.recv_bytes = bytes;
      if (root && call.send != call.recv) phase.before.push_back(copy(kSend0, kRecv0, bytes));
      phase.transfers.push_back(transfer(Move::kBroadcast, std::nullopt, kRecv0, bytes, call.peer));
      break;
    case OpKind::kGather:
      plan.send_bytes = bytes;
      plan.recv_bytes = root ? all : 0;
      phase.transfers.push_back(transfer(Move::kGather, kSend0,
                                         root ? std::optional<At>(kRecv0) : std::nullopt, bytes,
                                         call.peer));
      break;
    case OpKind::kScatter:
      plan.send_bytes = root ? all : 0;
      plan.recv_bytes = bytes;
      phase.transfers.push_back(transfer(Move::kScatter,
                                         root ? std::optional<At>(kSend0) : std::nullopt, kRecv0,
                                         bytes, call.peer));
      break;
    case OpKind::kSend:
      plan.send_bytes = bytes;
      phase.transfers.push_back(transfer(Move::kSend, kSend0, std::nullopt, bytes, call.peer));
      break;
    case OpKind::kRecv:
      plan.recv_bytes = bytes;
      phase.transfers.push_back(transfer(Move::kRecv, std::nullopt, kRecv0, bytes, call.peer));
      break;
    case OpKind::kReduceScatter:
      plan.send_bytes = all;
      plan.recv_bytes = bytes;
      plan.scratch_bytes = all;
      phase.transfers.push_back(transfer(Move::kAllToAll, kSend0, kScratch0, bytes));
      phase.after.push_back(reduce(kScratch0, nranks, bytes, call.count, kRecv0));
      break;
    case OpKind::kReduce:
      plan.send_bytes = bytes;
      plan.recv_bytes = root ? bytes : 0;
      plan.scratch_bytes = root ? all : 0;
      phase.transfers.push_back(transfer(Move::kGather, kSend0,
                                         root ? std::optional<At>(kScratch0) : std::nullopt, bytes,
                                         call.peer));
      if (root) phase.after.push_back(reduce(kScratch0, nranks, bytes, call.count, kRecv0));
      break;
    case OpKind::kAllReduce: {
      plan.send_bytes = bytes;
      plan.recv_bytes = bytes;
      const auto [mine_first, mine] = all_reduce_chunk(call.count, nranks, rank);
      plan.scratch_bytes = mine * size * nranks;
      // Phase 1: chunk j of every rank goes to rank j's scratch, block by source rank.
      Transfer scatter_chunks = transfer(Move::kAllToAllV, kSend0, kScratch0, 0);
      // Phase 2: this rank's reduced chunk goes to every other rank, at its place in recv.
      Transfer share_chunks = transfer(Move::kAllToAllV, kRecv0, kRecv0, 0);
      for (auto& v : scatter_chunks.v) v.resize(nranks);
      for (auto& v : share_chunks.v) v.resize(nranks);
      for (uint32_t j = 0; j < nranks; ++j) {
        const auto [first, elements] = all_reduce_chunk(call.count, nranks, j);
        scatter_chunks.v[0][j] = elements * size;
        scatter_chunks.v[1][j] = first * size;
        scatter_chunks.v[2][j] = mine * size;
        scatter_chunks.v[3][j] = j * mine * size;
        const bool other = j != rank;  // its own chunk is in place already
        share_chunks.v[0][j] = other ? mine * size : 0;
        share_chunks.v[1][j] = mine_first * size;
        share_chunks.v[2][j] = other ? elements * size : 0;
        share_chunks.v[3][j] = first * size;
      }
      phase.transfers.push_back(std::move(scatter_chunks));
      if (mine > 0)
        phase.after.push_back(
            reduce(kScratch0, nranks, mine * size, mine, At{Area::kRecv, mine_first * size}));
      plan.phases.push_back(std::move(phase));
      Phase second;
      second.transfers.push_back(std::move(share_chunks));
      plan.phases.push_back(std::move(second));
      return plan;
    }
  }
  plan.phases.push_back(std::move(phase));
  return plan;
}

}  // namespace iris::nccl
