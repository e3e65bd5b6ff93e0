// What travels through a session's shared-memory segment: submissions (client -> daemon) and
// completion slots (daemon -> client). Plain integers only: the segment maps at different
// addresses in each process, so buffers are named by id and offset, never by pointer.
#pragma once

#include <atomic>
#include <cstdint>

#include "iris/error_code.hpp"

namespace iris::shm {

enum class Opcode : uint32_t {
  kNop = 1,        // completes at once; measures the ring round trip
  kAllGather = 2,  // send[send_offset, +bytes) of every rank lands at recv + rank*bytes
  // The same, ordered on the client's GPU stream: irisd starts it once flags[slot].ready
  // reaches the generation, and writes the slot's done flag in GPU memory when the rank is
  // complete.
  kAllGatherStreamOrdered = 3,
};

// Wrapping comparison of 32-bit generation counters: a >= b.
constexpr bool generation_reached(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) >= 0;
}

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
  uint64_t bytes;  // per rank
};
static_assert(sizeof(SubmitEntry) == 72);

// SubmitEntry::flags.
enum SubmitFlags : uint32_t {
  // Stream-ordered all-gather: the client's stream copied this rank's own block into its receive
  // buffer before writing the ready flag, so irisd must not copy it. (A same-GPU copy issued by
  // irisd runs on SMs in irisd's context, and the GPU would switch contexts for it.)
  kOwnBlockCopiedByClient = 1u << 0,
};
inline constexpr uint32_t kKnownSubmitFlags = kOwnBlockCopiedByClient;

constexpr SubmitEntry all_gather_entry(Opcode opcode, uint64_t comm_id, uint64_t seq,
                                       uint64_t send_buffer, uint64_t send_offset,
                                       uint64_t recv_buffer, uint64_t recv_offset, uint64_t bytes) {
  return SubmitEntry{static_cast<uint32_t>(opcode),
                     0,
                     0,
                     0,
                     comm_id,
                     seq,
                     send_buffer,
                     send_offset,
                     recv_buffer,
                     recv_offset,
                     bytes};
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
