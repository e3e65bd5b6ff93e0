#include "client/src/process_id.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

namespace iris {

namespace {
std::atomic<pid_t> cached{0};
void refresh() { cached.store(::getpid(), std::memory_order_relaxed); }
}  // namespace

pid_t current_pid() {
  const pid_t pid = cached.load(std::memory_order_relaxed);
  if (pid != 0) return pid;
  [[maybe_unused]] static const int registered = pthread_atfork(nullptr, nullptr, refresh);
  refresh();
  return cached.load(std::memory_order_relaxed);
}

}  // namespace iris
