#include "iris/shared/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace iris::shm {

namespace {
long futex(std::atomic<uint32_t>& word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), op, value, timeout, nullptr, 0);
}
}  // namespace

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  futex(word, FUTEX_WAIT, expected, &ts);
}

void futex_wake_all(std::atomic<uint32_t>& word) { futex(word, FUTEX_WAKE, INT_MAX, nullptr); }

}  // namespace iris::shm
