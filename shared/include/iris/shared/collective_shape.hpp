// What each collective is, written once: which ranks name a send and a receive range, how large
// each is, which pairs of ranks move a block and where that block sits on either side, and when
// send and receive may be one range (in place). libiris reads it to check and submit a call,
// irisd's request validation to bound what a ring entry names, and its plans to make the copies
// (as NCCL's ncclFuncSendCount/ncclFuncRecvCount do): a new collective is one row here, its plan
// rule where the row cannot say it, and its API call.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "iris/shared/checked_range.hpp"
#include "iris/shared/descriptor.hpp"

namespace iris::shm {

// How much of one side (send or receive) a rank names, in blocks of the call's `bytes`.
enum class Extent : uint8_t {
  kNone,           // no range: the side names no buffer
  kBlock,          // one block
  kBlockPerRank,   // nranks blocks; block j is for (send) or from (receive) rank j
  kPerPeerCounts,  // all-to-all-v: per-peer counts and displacements, in the entry's args area
};

// Which ranks a side is significant on (elsewhere it is not named).
enum class On : uint8_t { kEveryRank, kRoot, kOthers };

struct Side {
  Extent extent = Extent::kNone;
  On on = On::kEveryRank;

  constexpr bool significant(uint32_t rank, uint32_t root) const {
    return extent != Extent::kNone && (on == On::kEveryRank || (on == On::kRoot) == (rank == root));
  }
};

struct CollectiveShape {
  Opcode opcode;
  std::string_view name;
  bool rooted = false;  // takes a root, which must be < nranks and the same on every rank
  Side send = {};
  Side recv = {};
  // One buffer on every rank (broadcast): the receive range is the send range, named by all.
  bool one_buffer = false;
  // Send and receive may be one range where the own block's source is its destination (NCCL's
  // and MPI's in place); any other overlap of the two ranges is refused.
  bool in_place_allowed = false;
  // The pair of a matched send (rank 0, the root) and receive (rank 1): irisd makes it from a
  // kSend and a kRecv entry (point_to_point.hpp); a ring entry never names it.
  bool point_to_point = false;
};

inline constexpr CollectiveShape kCollectiveShapes[] = {
    {.opcode = Opcode::kAllGather,
     .name = "all_gather",
     .send = {Extent::kBlock},
     .recv = {Extent::kBlockPerRank},
     .in_place_allowed = true},
    {.opcode = Opcode::kAllToAll,
     .name = "all_to_all",
     .send = {Extent::kBlockPerRank},
     .recv = {Extent::kBlockPerRank}},
    {.opcode = Opcode::kAllToAllV,
     .name = "all_to_all_v",
     .send = {Extent::kPerPeerCounts},
     .recv = {Extent::kPerPeerCounts}},
    {.opcode = Opcode::kBroadcast,
     .name = "broadcast",
     .rooted = true,
     .send = {Extent::kBlock, On::kRoot},
     .recv = {Extent::kBlock},
     .one_buffer = true},
    {.opcode = Opcode::kGather,
     .name = "gather",
     .rooted = true,
     .send = {Extent::kBlock},
     .recv = {Extent::kBlockPerRank, On::kRoot},
     .in_place_allowed = true},
    {.opcode = Opcode::kScatter,
     .name = "scatter",
     .rooted = true,
     .send = {Extent::kBlockPerRank, On::kRoot},
     .recv = {Extent::kBlock},
     .in_place_allowed = true},
    {.opcode = Opcode::kBarrier, .name = "barrier"},
    {.opcode = Opcode::kSendRecv,
     .name = "send/recv",
     .rooted = true,
     .send = {Extent::kBlock, On::kRoot},
     .recv = {Extent::kBlock, On::kOthers},
     .point_to_point = true},
};

// Point to point: a kSend entry is the pair's rank 0 (its root), a kRecv entry rank 1.
inline constexpr uint32_t kSenderInPair = 0;
inline constexpr uint32_t kReceiverInPair = 1;
constexpr bool is_point_to_point(uint32_t opcode) {
  return opcode == static_cast<uint32_t>(Opcode::kSend) ||
         opcode == static_cast<uint32_t>(Opcode::kRecv);
}

// The collective `opcode` names, or nullptr (kNop, unknown numbers from an untrusted entry).
// By opcode, built once at compile time: the client's submit, validation and every pair of a
// plan look a row up, so the lookup is an index, not a search.
inline constexpr auto kShapeByOpcode = [] {
  std::array<const CollectiveShape*, kLastCollectiveOpcode + 1> by{};
  for (const CollectiveShape& s : kCollectiveShapes) by[static_cast<uint32_t>(s.opcode)] = &s;
  return by;
}();
constexpr const CollectiveShape* shape_of(uint32_t opcode) {
  return opcode < kShapeByOpcode.size() ? kShapeByOpcode[opcode] : nullptr;
}
constexpr const CollectiveShape* shape_of(Opcode opcode) {
  return shape_of(static_cast<uint32_t>(opcode));
}

constexpr std::string_view opcode_name(Opcode opcode) {
  if (opcode == Opcode::kNop) return "nop";
  if (opcode == Opcode::kSend) return "send";
  if (opcode == Opcode::kRecv) return "recv";
  const CollectiveShape* s = shape_of(opcode);
  return s != nullptr ? s->name : "unknown";
}

// Bytes of one side's range for fixed-size collectives: 0 where the side names nothing,
// nullopt when nranks blocks overflow 64 bits. (kPerPeerCounts ranges come from the counts.)
constexpr std::optional<uint64_t> range_bytes(Side side, uint32_t nranks, uint64_t bytes) {
  switch (side.extent) {
    case Extent::kNone:
    case Extent::kPerPeerCounts:
      return 0;
    case Extent::kBlock:
      return bytes;
    case Extent::kBlockPerRank:
      return checked_mul(bytes, nranks);
  }
  return std::nullopt;
}

// The block rank `src` sends to rank `dst` in a fixed-size collective: offsets from the start of
// src's send range and of dst's receive range. nullopt when the pair moves nothing.
struct PairBlock {
  uint64_t send_offset;
  uint64_t recv_offset;
  uint64_t bytes;
};
constexpr std::optional<PairBlock> pair_block(const CollectiveShape& shape, uint32_t src,
                                              uint32_t dst, uint32_t root, uint64_t bytes) {
  if (!shape.send.significant(src, root) || !shape.recv.significant(dst, root)) return std::nullopt;
  if (shape.one_buffer && src == dst) return std::nullopt;  // the data is already there
  if (shape.send.extent == Extent::kPerPeerCounts || bytes == 0) return std::nullopt;
  const uint64_t from = shape.send.extent == Extent::kBlockPerRank ? uint64_t{dst} * bytes : 0;
  const uint64_t to = shape.recv.extent == Extent::kBlockPerRank ? uint64_t{src} * bytes : 0;
  return PairBlock{from, to, bytes};
}

// Every row's pair rule, checked at compile time against the collectives' definitions
// (docs/ARCHITECTURE.md, "Collectives").
namespace shape_checks {
constexpr bool moves(Opcode op, uint32_t src, uint32_t dst, uint32_t root, uint64_t from,
                     uint64_t to) {
  const auto b = pair_block(*shape_of(op), src, dst, root, 8);
  return b && b->send_offset == from && b->recv_offset == to && b->bytes == 8;
}
constexpr bool idle(Opcode op, uint32_t src, uint32_t dst, uint32_t root) {
  return !pair_block(*shape_of(op), src, dst, root, 8);
}
static_assert(moves(Opcode::kAllGather, 2, 1, 0, 0, 16));  // src's block at recv + src*b
static_assert(moves(Opcode::kAllToAll, 2, 1, 0, 8, 16));   // block dst of send, block src
static_assert(moves(Opcode::kBroadcast, 1, 3, 1, 0, 0) && idle(Opcode::kBroadcast, 1, 1, 1) &&
              idle(Opcode::kBroadcast, 2, 3, 1));
static_assert(moves(Opcode::kGather, 2, 1, 1, 0, 16) && idle(Opcode::kGather, 2, 3, 1));
static_assert(moves(Opcode::kScatter, 1, 2, 1, 16, 0) && idle(Opcode::kScatter, 2, 1, 1));
static_assert(idle(Opcode::kBarrier, 0, 1, 0) && !shape_of(Opcode::kNop));
static_assert(moves(Opcode::kSendRecv, kSenderInPair, kReceiverInPair, kSenderInPair, 0, 0) &&
              idle(Opcode::kSendRecv, kReceiverInPair, kSenderInPair, kSenderInPair) &&
              idle(Opcode::kSendRecv, kSenderInPair, kSenderInPair, kSenderInPair));
constexpr bool rows_have_counter_slots() {
  for (const CollectiveShape& s : kCollectiveShapes)
    if (static_cast<uint32_t>(s.opcode) > kLastCollectiveOpcode) return false;
  return true;
}
static_assert(rows_have_counter_slots(), "raise kLastCollectiveOpcode with a new opcode");
}  // namespace shape_checks

}  // namespace iris::shm
