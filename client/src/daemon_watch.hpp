// Notices that irisd went away while nobody calls libiris. A thread sleeps in poll() on the attach
// connection's hang-up (never its data, which session calls read); when irisd dies or closes the
// connection it runs `on_gone` once, and libiris lets the GPU streams that wait on irisd go on and
// wakes the threads sleeping for completions; then `while_gone` every few milliseconds until
// stop() (CUDA graphs wait on their done flags again at each replay). So every path learns it
// within milliseconds (a host wait, a test() loop, a stream-ordered wait on the GPU), however irisd
// went: killed, OOM killed, stopped, its machine's watchdog.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "iris/shared/unix_socket.hpp"

namespace iris {

class DaemonWatch {
 public:
  // Watches `connection` (not owned; it must outlive stop()). Throws iris::Error when the thread
  // cannot start.
  DaemonWatch(int connection, std::function<void()> on_gone, std::function<void()> while_gone);
  static constexpr int kWhileGoneEveryMs = 5;
  ~DaemonWatch();
  DaemonWatch(const DaemonWatch&) = delete;
  DaemonWatch& operator=(const DaemonWatch&) = delete;

  // Ends the watch (before the connection closes). In a forked child, which has no such thread,
  // it only lets go of it.
  void stop();
  // True once the connection hung up.
  bool gone() const { return gone_.load(std::memory_order_acquire); }

 private:
  void run(int connection);

  std::function<void()> on_gone_;
  std::function<void()> while_gone_;
  net::Fd stop_fd_;
  std::atomic<bool> gone_{false};
  pid_t owner_;
  std::unique_ptr<std::thread> thread_;
};

}  // namespace iris
