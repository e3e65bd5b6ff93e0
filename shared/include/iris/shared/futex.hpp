// Cross-process sleep/wake on a 32-bit word in shared memory, through the raw futex syscall
// without FUTEX_PRIVATE_FLAG (std::atomic::wait in GCC 12 uses private futexes, which cannot wake
// another process).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace iris::shm {

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

// Sleeps while *word == expected, at most `timeout`. Returns early on wake, on a changed value,
// or on a signal; the caller re-checks its condition.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout);

// Wakes every waiter on the word.
void futex_wake_all(std::atomic<uint32_t>& word);

}  // namespace iris::shm
