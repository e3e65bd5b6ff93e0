// What travels through a session's shared-memory segment: submissions (client -> daemon) and
// completion slots (daemon -> client). Plain integers only: the segment maps at different
// addresses in each process, so buffers are named by id and offset, never by pointer.
#pragma once

#include <atomic>
#include <cstdint>

#include "iris/error_code.hpp"

namespace iris::shm {

// What a ring entry asks for. Collectives follow NCCL's and MPI's semantics (docs/ARCHITECTURE.md,
// "Collectives"); `bytes` is the size of one block.
enum class Opcode : uint32_t {
  kNop = 1,        // completes at once; measures the ring round trip
  kAllGather = 2,  // send[bytes] of rank r lands at recv + r*bytes on every rank
  kAllToAll = 3,   // block j of rank r's send lands as block r of rank j's recv
  kAllToAllV = 4,  // the same with per-peer counts and displacements (the entry's args area)
  kBroadcast = 5,  // root's send[bytes] lands in every other rank's recv (== send: one buffer)
  kGather = 6,     // send[bytes] of rank r lands at root's recv + r*bytes
  kScatter = 7,    // root's send + r*bytes lands in rank r's recv[bytes]
  kBarrier = 8,    // moves nothing, names no buffer: completes once every rank has arrived
  // Point to point, `root` naming the peer: send[bytes] lands in the peer's matching receive,
  // matched in order per (communicator, source, destination) as NCCL and MPI match them. irisd
  // runs each matched pair as a kSendRecv of a two-rank pair (sender rank 0, receiver rank 1).
  kSend = 9,
  kRecv = 10,
  kSendRecv = 11,  // never in a ring: the matched pair, as the scheduler runs it
};
// The highest opcode: per-opcode counters have this many slots, plus one.
inline constexpr uint32_t kLastCollectiveOpcode = 11;

// Wrapping comparison of 32-bit generation counters: a >= b.
constexpr bool generation_reached(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) >= 0;
}

// Buffer id that names no buffer: an argument insignificant on this rank (a non-root's receive
// buffer of gather, for example).
inline constexpr uint64_t kNoBuffer = 0;

struct SubmitEntry {
  uint32_t opcode;
  uint32_t slot;        // completion slot index, < ring depth
  uint32_t generation;  // echoed into the slot so a stale completion is never mistaken
  uint32_t flags;       // SubmitFlags bits
  uint64_t comm_id;
  uint64_t seq;  // per communicator, 1, 2, 3, ...
  uint64_t send_buffer;
  uint64_t send_offset;
  uint64_t recv_buffer;
  uint64_t recv_offset;
  uint64_t bytes;  // per block
  uint32_t root;   // broadcast, gather, scatter; the peer of a send or receive
  uint32_t reserved;
  // all-to-all-v: a registered host buffer of the session holding four uint64 arrays of nranks
  // each (send counts, send displacements, receive counts, receive displacements, in bytes
  // relative to send and receive). irisd copies them out when it pops the entry, so the client
  // may reuse the area once the request has completed.
  uint64_t args_buffer;
  uint64_t args_offset;
};
static_assert(sizeof(SubmitEntry) == 96);

// SubmitEntry::flags.
enum SubmitFlags : uint32_t {
  // The client's stream copied this rank's block to itself (the copy whose source and
  // destination rank are both this rank) before writing the ready flag, so irisd must not copy
  // it. (A same-GPU copy issued by irisd runs on SMs in irisd's context, and the GPU would
  // switch contexts for it.) Only with kStreamOrdered.
  kOwnBlockCopiedByClient = 1u << 0,
  // Ordered on the client's GPU stream: irisd starts the rank's copies once flags[slot].ready
  // reaches the generation, and writes the slot's done flag in GPU memory when the rank is
  // complete.
  kStreamOrdered = 1u << 1,
  // Submitted again after irisd restarted (its first run had not completed): counted only.
  kResubmitted = 1u << 2,
};
inline constexpr uint32_t kKnownSubmitFlags = kOwnBlockCopiedByClient | kStreamOrdered | kResubmitted;

// Arguments of one collective as a ring entry carries them (seq, slot and generation are the
// submitting path's).
struct CollectiveArgs {
  Opcode opcode;
  uint64_t comm_id;
  uint64_t send_buffer;
  uint64_t send_offset;
  uint64_t recv_buffer;
  uint64_t recv_offset;
  uint64_t bytes;
  uint32_t root = 0;
  uint64_t args_buffer = kNoBuffer;
  uint64_t args_offset = 0;
};

constexpr SubmitEntry collective_entry(const CollectiveArgs& a) {
  SubmitEntry e{};
  e.opcode = static_cast<uint32_t>(a.opcode);
  e.comm_id = a.comm_id;
  e.send_buffer = a.send_buffer;
  e.send_offset = a.send_offset;
  e.recv_buffer = a.recv_buffer;
  e.recv_offset = a.recv_offset;
  e.bytes = a.bytes;
  e.root = a.root;
  e.args_buffer = a.args_buffer;
  e.args_offset = a.args_offset;
  return e;
}

// One per in-flight request. The daemon stores (generation << 32) | (code << 1) | 1.
struct CompletionSlot {
  std::atomic<uint64_t> word;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

constexpr uint64_t pack_completion(uint32_t generation, ErrorCode code) {
  return (uint64_t{generation} << 32) | (uint64_t{static_cast<uint32_t>(code)} << 1) | 1u;
}
constexpr bool completion_matches(uint64_t word, uint32_t generation) {
  return (word & 1u) != 0 && static_cast<uint32_t>(word >> 32) == generation;
}
constexpr ErrorCode completion_code(uint64_t word) {
  return static_cast<ErrorCode>(static_cast<uint32_t>(word) >> 1);
}

}  // namespace iris::shm
