// The daemon's progress thread. It owns all data-path state (through the pollers registered with
// it): other threads never touch that state directly but run closures on the loop with
// call()/post(), so the rings, the scheduler and the registries need no locks.
//
// Each pass runs every poller in registration order (seastar's pollers). The loop polls while
// any did work, keeps polling for `spin` after the last work (a new submission is then picked up
// within a microsecond), and then sleeps in epoll on the sessions' wake eventfds, the engine's
// completion fd and its own command fd, once every poller agreed to it.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "iris/error.hpp"
#include "iris/shared/cpu_relax.hpp"
#include "iris/shared/unix_socket.hpp"

namespace iris::daemon {

// One source of work on the loop. Every poller answers the same questions, so a new one cannot
// forget to say whether the loop may sleep.
class Poller {
 public:
  virtual ~Poller() = default;
  // Does the work ready now; true when it did any (the loop then keeps spinning).
  virtual bool poll() = 0;
  // Before the loop sleeps: arm what announces new work through an fd (clients' need-wakeup
  // flags), then say whether sleeping is safe. False while work waits on something no fd
  // announces (GPU copies, streams' flags, armed graph plans) or arrived meanwhile. No default:
  // a poller that forgot it would sleep through its work.
  virtual bool try_enter_sleep() = 0;
  // After the sleep, or after any poller refused it: disarm.
  virtual void exit_sleep() {}
};

class ProgressLoop {
 public:
  explicit ProgressLoop(std::chrono::microseconds spin);
  ~ProgressLoop();

  // Calls `beat` on the loop thread about every `period` while the loop turns (and at least
  // once a second while it sleeps): a beat that stops coming means the data path is wedged,
  // which is what systemd's watchdog and the health check are told. Set before start().
  void set_heartbeat(std::chrono::milliseconds period, std::function<void()> beat);

  // Pollers run in the order they were added, every pass. Add them before start().
  void add_poller(Poller& poller);
  // One pass of every poller on the calling thread; true when any did work. The loop's own
  // thread runs it; tests drive a loop they never start with it.
  bool poll_once();
  void start();
  // Runs the queued closures, then stops and joins the thread.
  void stop();

  // Adds an eventfd to the sleep set; the loop drains it when it fires. Thread-safe.
  void watch(int fd);
  void unwatch(int fd);

  // Runs `f` on the loop thread and returns its result (or rethrows its exception). Throws
  // iris::Error kUnavailable when the loop has stopped. Never call from the loop thread.
  template <typename F>
  auto call(F&& f) -> std::invoke_result_t<F> {
    std::packaged_task<std::invoke_result_t<F>()> task(std::forward<F>(f));
    auto result = task.get_future();
    if (!post([&task] { task(); })) throw Error(ErrorCode::kUnavailable, "irisd is shutting down");
    return result.get();
  }

  // Queues `f` for the loop thread; false when the loop has stopped.
  bool post(std::function<void()> f);

 private:
  void run();
  void run_commands();
  // Asks every poller; true when all agreed to sleep.
  bool enter_sleep();
  void exit_sleep();

  std::chrono::microseconds spin_;
  std::chrono::milliseconds beat_period_{1000};
  std::function<void()> beat_;
  net::Fd epoll_fd_;
  net::Fd command_fd_;
  std::vector<Poller*> pollers_;
  std::thread thread_;
  std::atomic<bool> stop_requested_{false};

  std::mutex commands_mutex_;
  std::deque<std::function<void()>> commands_;
  bool accepting_ = true;
  std::atomic<bool> commands_pending_{false};
};

}  // namespace iris::daemon
