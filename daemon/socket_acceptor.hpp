// One listening socket served by one thread with epoll: the accept loop, per-connection deadlines
// and the "close the oldest" rule that the attach listener and the metrics server both need,
// written once. A peer that is slow, silent or opens connections by the thousand costs a
// descriptor each, never a thread: a connection still owing its request (pending) has a deadline
// and may be closed to make room, oldest first, when too many are pending or the process is out
// of descriptors; when nothing can be closed, accepting pauses briefly instead of spinning on a
// listening socket that level-triggered epoll keeps reporting.
//
// The handler owns its connections' state and descriptors; the acceptor tells it when a
// connection came, had an event, or must go (on_close: the handler drops it, closing the
// descriptor). Everything runs on the acceptor's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "iris/shared/unix_socket.hpp"

namespace iris::daemon {

class SocketAcceptor {
 public:
  using Clock = std::chrono::steady_clock;
  enum class CloseReason {
    kByHandler,  // the handler asked (close())
    kExpired,    // its deadline passed
    kEvicted,    // the oldest pending connection, closed to make room for a new one
  };
  struct Handler {
    virtual ~Handler() = default;
    // A new connection, non-blocking and close-on-exec, already watched for input: true when the
    // handler took `fd` (moved from it, usually setting a deadline), false to refuse it.
    virtual bool on_accept(net::Fd& fd) = 0;
    virtual void on_event(int fd, uint32_t events) = 0;
    // Drop the connection's state (closing its descriptor); `why` for the handler's log.
    virtual void on_close(int fd, CloseReason why) = 0;
  };
  struct Limits {
    std::size_t max_pending;  // pending connections kept; past it the oldest closes
    std::size_t max_open;     // connections kept in all; at it, accepting waits for room
    // Appended to the warning when accepting pauses, to say what the operator can raise.
    std::string out_of_descriptors_hint;
  };

  // `name` prefixes its log lines. Listens on `listen_fd` once start() runs.
  SocketAcceptor(std::string name, net::Fd listen_fd, Limits limits, Handler& handler);
  ~SocketAcceptor();
  SocketAcceptor(const SocketAcceptor&) = delete;
  SocketAcceptor& operator=(const SocketAcceptor&) = delete;

  void start();
  void stop();  // idempotent; joins the thread

  // On the acceptor's thread (from the handler's callbacks):
  // `fd` must be done by `deadline`; `pending` marks it as one that may be closed to make room.
  void set_deadline(int fd, Clock::time_point deadline, bool pending);
  void clear_deadline(int fd);  // no deadline, not pending (an attached session)
  // epoll's events for `fd` from now on (EPOLLIN | EPOLLRDHUP when accepted).
  void watch(int fd, uint32_t events);
  // Closes `fd` through the handler (on_close with kByHandler).
  void close(int fd) { close(fd, CloseReason::kByHandler); }
  std::size_t open_connections() const { return open_.size(); }

  static constexpr auto kAcceptPause = std::chrono::milliseconds(200);
  static constexpr auto kAcceptWarningInterval = std::chrono::seconds(10);

 private:
  void run();
  void accept_all();
  void close(int fd, CloseReason why);
  bool close_oldest_pending();
  void close_expired();
  void pause_accepting(const std::string& why);
  int next_timeout_ms() const;

  std::string name_;
  net::Fd listen_fd_;
  Limits limits_;
  Handler& handler_;
  net::Fd epoll_fd_;
  net::Fd stop_fd_;
  std::set<int> open_;
  struct Deadline {
    Clock::time_point at;
    bool pending;
  };
  std::map<int, Deadline> deadline_of_;
  std::set<std::pair<Clock::time_point, int>> by_deadline_;  // soonest first
  std::set<std::pair<Clock::time_point, int>> pending_;      // oldest first
  std::optional<Clock::time_point> accept_paused_until_;
  Clock::time_point last_accept_warning_{};
  uint64_t accept_failures_since_warning_ = 0;
  std::thread thread_;
};

}  // namespace iris::daemon
