// Lock-free single-producer single-consumer ring living in shared memory.
//
// The control block holds only the two indices, each on its own cache line; entries follow it.
// Indices are free-running 64-bit counters (never wrap in practice), slot = index & mask. Each
// side keeps a process-local copy of the peer's index and reloads it only when the cached value
// says the ring is full (producer) or empty (consumer), as io_uring and the LMAX Disruptor do.
// The consumer never trusts the producer: a tail that runs more than `depth` ahead of the head is
// reported as corruption instead of being followed.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace iris::shm {

inline constexpr std::size_t kCacheLine = 64;

struct RingControl {
  alignas(kCacheLine) std::atomic<uint64_t> head;  // next index the consumer reads
  alignas(kCacheLine) std::atomic<uint64_t> tail;  // next index the producer writes
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(RingControl) == 2 * kCacheLine);

constexpr bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

template <typename Entry>
class RingProducer {
  static_assert(std::is_trivially_copyable_v<Entry>);

 public:
  RingProducer() = default;
  RingProducer(RingControl* control, Entry* entries, uint32_t depth)
      : control_(control),
        entries_(entries),
        mask_(depth - 1),
        depth_(depth),
        tail_(control->tail.load(std::memory_order_relaxed)),
        cached_head_(control->head.load(std::memory_order_acquire)) {}

  // Returns false when the ring is full; the entry is not written then.
  bool try_push(const Entry& entry) {
    if (tail_ - cached_head_ >= depth_) {
      cached_head_ = control_->head.load(std::memory_order_acquire);
      if (tail_ - cached_head_ >= depth_) return false;
    }
    std::memcpy(&entries_[tail_ & mask_], &entry, sizeof(Entry));
    ++tail_;
    control_->tail.store(tail_, std::memory_order_release);
    return true;
  }

  uint32_t depth() const { return depth_; }

 private:
  RingControl* control_ = nullptr;
  Entry* entries_ = nullptr;
  uint64_t mask_ = 0;
  uint64_t depth_ = 0;
  uint64_t tail_ = 0;
  uint64_t cached_head_ = 0;
};

enum class PopResult { kEntry, kEmpty, kCorrupt };

template <typename Entry>
class RingConsumer {
  static_assert(std::is_trivially_copyable_v<Entry>);

 public:
  RingConsumer() = default;
  RingConsumer(RingControl* control, Entry* entries, uint32_t depth)
      : control_(control),
        entries_(entries),
        mask_(depth - 1),
        depth_(depth),
        head_(control->head.load(std::memory_order_relaxed)),
        cached_tail_(head_) {}

  // Whether the producer has published entries not yet popped (no side effects).
  bool has_entries() const { return control_->tail.load(std::memory_order_acquire) != head_; }

  // Whether a pop since the last call found every entry taken (the producer had to wait).
  bool take_found_full() { return std::exchange(found_full_, false); }

  // Copies the entry out of shared memory before returning it, so that a producer rewriting the
  // slot afterwards cannot change what the consumer validated.
  PopResult try_pop(Entry& out) {
    if (cached_tail_ == head_) {
      cached_tail_ = control_->tail.load(std::memory_order_acquire);
      if (cached_tail_ == head_) return PopResult::kEmpty;
      if (cached_tail_ - head_ > depth_) return PopResult::kCorrupt;
      if (cached_tail_ - head_ == depth_) found_full_ = true;
    }
    std::memcpy(&out, &entries_[head_ & mask_], sizeof(Entry));
    ++head_;
    control_->head.store(head_, std::memory_order_release);
    return PopResult::kEntry;
  }

 private:
  RingControl* control_ = nullptr;
  Entry* entries_ = nullptr;
  uint64_t mask_ = 0;
  uint64_t depth_ = 0;
  uint64_t head_ = 0;
  uint64_t cached_tail_ = 0;
  bool found_full_ = false;
};

}  // namespace iris::shm
