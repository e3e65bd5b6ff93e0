// Notices that irisd went away while nobody calls libiris. A thread sleeps in poll() on the attach
// connection's hang-up (never its data, which session calls read); when irisd dies or closes the
// connection it runs `on_hangup`, which resumes the session with the next irisd (and returns the
// new connection, watched from then on) or gives up: then libiris has let the GPU streams that
// wait on irisd go on and woken the threads sleeping for completions, and the watch runs
// `while_gone` every few milliseconds until stop() (CUDA graphs wait on their done flags again at
// each replay). So every path learns it within milliseconds (a host wait, a test() loop, a
// stream-ordered wait on the GPU), however irisd went: killed, OOM killed, stopped, its machine's
// watchdog.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "iris/shared/unix_socket.hpp"

namespace iris {

class DaemonWatch {
 public:
  // The connection hung up: the next connection to watch, or -1 when irisd is gone for good.
  using OnHangup = std::function<int(DaemonWatch&)>;
  // Watches `connection` (not owned; it must outlive stop()). Throws iris::Error when the thread
  // cannot start.
  // `tend` runs every kWhileGoneEveryMs while connected and tending() is set (graph plans the
  // restarted irisd refused: their replays' waits are released as while irisd is gone).
  DaemonWatch(int connection, OnHangup on_hangup, std::function<void()> while_gone,
              std::function<void()> tend);
  static constexpr int kWhileGoneEveryMs = 5;
  ~DaemonWatch();
  DaemonWatch(const DaemonWatch&) = delete;
  DaemonWatch& operator=(const DaemonWatch&) = delete;

  // Ends the watch (before the connection closes), and a resume in progress. In a forked child,
  // which has no such thread, it only lets go of it.
  void stop();
  // For `on_hangup`, between attempts: sleeps `duration`; false when stop() came meanwhile.
  bool pause(std::chrono::milliseconds duration);
  // Whether `tend` runs while connected. Set only on the watch's own thread (by `on_hangup` or
  // `tend`), so the watch sees it before it sleeps again.
  void set_tending(bool on) { tending_.store(on, std::memory_order_release); }

 private:
  void run(int connection);

  OnHangup on_hangup_;
  std::function<void()> while_gone_;
  std::function<void()> tend_;
  std::atomic<bool> tending_{false};
  net::Fd stop_fd_;
  pid_t owner_;
  std::unique_ptr<std::thread> thread_;
};

}  // namespace iris
