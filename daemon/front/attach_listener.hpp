// The attach socket: a plain Unix socket where a client says hello and the kernel says who it is
// (SO_PEERCRED), since gRPC 1.51 cannot tell a server its peer's pid or uid. Each accepted
// connection stays open for the session's life; its EOF is how the daemon learns, at once, that
// the client died, and the session is then torn down. After the handshake it also carries the
// requests that pass file descriptors (VMM buffer registration), which gRPC cannot.
#pragma once

#include <map>
#include <optional>
#include <thread>

#include "daemon/config.hpp"
#include "daemon/progress_loop.hpp"
#include "daemon/runtime.hpp"
#include "iris/v1/control.pb.h"

namespace iris::daemon {

// File descriptors one session request may carry: VMM allocations behind one registered range.
inline constexpr std::size_t kMaxSessionRequestFds = 256;

class AttachListener {
 public:
  AttachListener(const Config& config, Runtime& runtime, ProgressLoop& loop);
  ~AttachListener();

  void start();
  void stop();

 private:
  struct Connection {
    net::Fd fd;
    std::optional<uint64_t> session_id;
  };

  void run();
  void accept_all();
  void on_readable(int fd);
  void handshake(Connection& conn);
  v1::SessionResponse handle_session_request(uint64_t session_id, const net::Frame& frame);
  void close_connection(int fd);

  const Config& config_;
  Runtime& runtime_;
  ProgressLoop& loop_;
  net::Fd listen_fd_;
  net::Fd epoll_fd_;
  net::Fd stop_fd_;
  std::map<int, Connection> connections_;
  std::thread thread_;
};

}  // namespace iris::daemon
