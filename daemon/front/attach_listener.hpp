// The attach socket: a plain Unix socket where the kernel tells irisd who each peer is
// (SO_PEERCRED), since gRPC 1.51 cannot. A client attaches (or iris-ctl asks for an operator
// token), and the connection then carries every call of that session (buffers, communicators,
// detach), each answered on it, with file descriptors beside the frames where needed (VMM
// allocations in, sealed memfds out). A call can only name the session of its own connection.
// The connection's EOF is how irisd learns, at once, that a client died.
//
// One thread serves every connection, event-driven: reads never block (frames are reassembled
// as bytes arrive) and each handshake has a deadline. Connections still in their handshake may
// hold at most a quarter of the process's descriptors; past that, or when accept() finds none
// left, the oldest of them is closed to make room, so an honest attach gets in at once however
// many silent connections a tenant opens (accepting pauses only when every descriptor belongs to
// a session). A slow, silent or flooding peer holds up neither other attaches nor the death
// notices of sessions, and what it makes irisd log is limited per uid (TenantLog).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "daemon/config.hpp"
#include "daemon/front/attach_rate.hpp"
#include "daemon/front/caller_tokens.hpp"
#include "daemon/progress_loop.hpp"
#include "daemon/runtime.hpp"
#include "daemon/socket_acceptor.hpp"
#include "iris/v1/attach.pb.h"

namespace iris::daemon {

// File descriptors one session request may carry: VMM allocations behind one registered range.
inline constexpr std::size_t kMaxSessionRequestFds = 256;

class AttachListener : SocketAcceptor::Handler {
 public:
  AttachListener(const Config& config, Runtime& runtime, ProgressLoop& loop, CallerTokens& tokens);
  ~AttachListener() override;

  void start();
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  struct Connection {
    net::Fd fd;
    net::PeerCredentials peer{};  // from the kernel at accept, before anything is read
    net::FrameReader reader{kMaxSessionRequestFds};
    bool attached = false;
    std::optional<uint64_t> session_id;  // none for an operator-only attach
    std::string token;
  };

  // SocketAcceptor::Handler: a connection has its handshake's deadline and is pending (closed
  // first to make room) until it attached. Closing it ends its session, if it still has one
  // (as lost).
  bool on_accept(net::Fd& fd) override;
  void on_event(int fd, uint32_t) override { on_readable(fd); }
  void on_close(int fd, SocketAcceptor::CloseReason why) override;

  void on_readable(int fd);
  // Handles one frame; false when the connection must close.
  bool on_frame(Connection& conn, net::Frame& frame);
  bool handshake(Connection& conn, const net::Frame& frame);
  bool serve(Connection& conn, net::Frame& frame);

  const Config& config_;
  Runtime& runtime_;
  ProgressLoop& loop_;
  CallerTokens& tokens_;
  std::map<int, Connection> connections_;
  uint64_t handshakes_evicted_ = 0;
  AttachRate attach_rate_;
  SocketAcceptor acceptor_;  // last: its thread calls back into the members above
};

}  // namespace iris::daemon
