// The daemon's progress thread. It owns all data-path state (through the LoopWork it drives):
// other threads never touch that state directly but run closures on the loop with call()/post(),
// so the rings, the scheduler and the registry need no locks.
//
// The loop polls while there is work, keeps polling for `spin` after the last work (a new
// submission is then picked up within a microsecond), and then sleeps in epoll on the sessions'
// wake eventfds, the engine's completion fd and its own command fd.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "iris/error.hpp"
#include "iris/shared/cpu_relax.hpp"
#include "iris/shared/unix_socket.hpp"

namespace iris::daemon {

class LoopWork {
 public:
  virtual ~LoopWork() = default;
  // One pass over rings and engine completions; true when it did anything.
  virtual bool poll_once() = 0;
  // Before sleeping (true) and after waking (false): the clients' need-wakeup flags.
  virtual void set_sleeping(bool sleeping) = 0;
  // Checked after set_sleeping(true) so that a submission racing with it is not slept through;
  // also true while work waits on something no fd signals (GPU copies, streams' flags).
  virtual bool has_ready_work() = 0;
};

class ProgressLoop {
 public:
  explicit ProgressLoop(std::chrono::microseconds spin);
  ~ProgressLoop();

  // Calls `beat` on the loop thread about every `period` while the loop turns (and at least
  // once a second while it sleeps): a beat that stops coming means the data path is wedged,
  // which is what systemd's watchdog and the health check are told. Set before start().
  void set_heartbeat(std::chrono::milliseconds period, std::function<void()> beat);

  void start(LoopWork& work);
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

  std::chrono::microseconds spin_;
  std::chrono::milliseconds beat_period_{1000};
  std::function<void()> beat_;
  net::Fd epoll_fd_;
  net::Fd command_fd_;
  LoopWork* work_ = nullptr;
  std::thread thread_;
  std::atomic<bool> stop_requested_{false};

  std::mutex commands_mutex_;
  std::deque<std::function<void()>> commands_;
  bool accepting_ = true;
  std::atomic<bool> commands_pending_{false};
};

}  // namespace iris::daemon
