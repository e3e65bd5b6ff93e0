// Layout of a session segment: header, submission ring, completion slots. Created by irisd as a
// sealed memfd (it cannot be shrunk or grown) and passed to the client over the attach
// connection (SCM_RIGHTS): no file name, nothing another process can open. Every section starts
// on a cache line.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "iris/shared/descriptor.hpp"
#include "iris/shared/spsc_ring.hpp"

namespace iris::shm {

// kStopped: irisd is stopping (its clients may resume with the next one); kSessionEnded: irisd
// ended this session itself (the client must not try to resume it).
enum class DaemonState : uint32_t { kRunning = 1, kStopped = 2, kSessionEnded = 3 };

struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t ring_depth;
  uint64_t total_bytes;
  uint64_t session_id;
  // Written by the daemon. kStopped plus a wake tells waiting clients the daemon is gone.
  alignas(kCacheLine) std::atomic<uint32_t> daemon_state;
  // Set by the daemon before it sleeps; a client that sees it rings the session's eventfd
  // (io_uring's SQ_NEED_WAKEUP).
  alignas(kCacheLine) std::atomic<uint32_t> daemon_needs_wakeup;
  // Bumped by the daemon after it fills completion slots; clients futex-wait on it.
  alignas(kCacheLine) std::atomic<uint32_t> completion_epoch;
  std::atomic<uint32_t> client_waiters;  // the daemon skips the wake syscall while this is 0
  // Written by the client: requests libiris refused before they reached the ring (a pointer
  // outside every buffer, say), so that `iris-ctl sessions` shows them. Only a count to show.
  alignas(kCacheLine) std::atomic<uint64_t> client_rejections;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Stream-ordered requests: the client's GPU stream writes ready = generation when it reaches
// the call (its send is produced, its receive buffer free); irisd polls it. (The done flags the
// stream waits on live in GPU memory the client registers; see StreamFlagsMapping.) Compared as
// wrapping 32-bit counters.
struct StreamFlags {
  alignas(8) std::atomic<uint32_t> ready;
};

// Why a request failed, in the daemon's words ("rank 1 passed 200 bytes, rank 0 100"): written
// into the slot's record before the completion word (release), read by the client after it
// (acquire), NUL-terminated and cut to fit.
inline constexpr std::size_t kFailureTextBytes = 256;
struct FailureText {
  char text[kFailureTextBytes];
};

// Collectives captured into CUDA graphs (persistent plans) a session may hold at once. Each has a
// slot after the ring's: its ready flag (the graph writes 1, irisd resets it to 0 as the replay completes), its
// completion word (the replay count and the last replay's outcome, for the host to check), its
// failure text, and a done flag in the client's GPU memory (irisd writes 1, the graph waits for it
// and resets it to 0). Plan slot p is index ring_depth + p of those arrays.
inline constexpr uint32_t kGraphPlanSlots = 256;

struct SegmentLayout {
  uint32_t ring_depth;
  std::size_t ring_control_offset;
  std::size_t ring_entries_offset;
  std::size_t slots_offset;
  std::size_t flags_offset;
  std::size_t failures_offset;
  std::size_t total_bytes;  // a multiple of the page size (the client pins it for its GPU)

  // nullopt when depth is not a power of two in [2, 65536].
  static std::optional<SegmentLayout> for_depth(uint32_t depth);
  // Entries of the slot, flag and failure arrays: the ring's, then the graph plans'.
  uint32_t slot_count() const { return ring_depth + kGraphPlanSlots; }
};

// Typed view of a mapped segment.
struct SegmentView {
  SegmentHeader* header = nullptr;
  RingControl* ring_control = nullptr;
  SubmitEntry* ring_entries = nullptr;
  CompletionSlot* slots = nullptr;
  StreamFlags* flags = nullptr;
  FailureText* failures = nullptr;
  uint32_t ring_depth = 0;
  uint32_t slot_count() const { return ring_depth + kGraphPlanSlots; }

  static SegmentView at(void* base, const SegmentLayout& layout);
};

// Lays out a fresh segment (daemon side). `base` must be zeroed memory of layout.total_bytes.
void initialize_segment(void* base, const SegmentLayout& layout, uint64_t session_id);

// irisd, resuming a session: takes over a segment a client of the previous irisd sent back.
// Checks it as validate_segment does and that its ring depth is `layout`'s, then resets what irisd
// owns in the header (state, wake-up flag, session id); the rest (ring indices, slots, flags) is the
// client's to have left as it likes, and is distrusted as ever. nullopt when it does not fit.
std::optional<SegmentView> adopt_segment(void* base, std::size_t mapped_bytes,
                                         const SegmentLayout& layout, uint64_t session_id);

// Checks the header of a segment mapped by a client; nullopt when it is not a valid segment of
// this version.
std::optional<SegmentView> validate_segment(void* base, std::size_t mapped_bytes);

}  // namespace iris::shm
