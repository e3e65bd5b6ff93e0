// Prometheus's /metrics over HTTP/1.1, on one event-driven thread of irisd's own. It replaced
// prometheus-cpp's Exposer (civetweb), whose worker threads each serve one connection at a time:
// three connections sending their headers slowly held the two workers and a fresh scrape waited
// 2 s, ten made it time out, and more workers only raise the number of slow connections it
// takes. Here a slow, silent or garbage-sending connection costs a descriptor and a few
// kilobytes, never a thread: every read is non-blocking, a request must be complete within 2 s
// and its answer taken within 10 s, and at most 1024 connections are kept (the oldest without
// a complete request is closed for a new one). A scrape is answered as soon as its request is
// in; each connection carries one request (Connection: close).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "daemon/answered_connection.hpp"
#include "daemon/socket_acceptor.hpp"

namespace iris::daemon {

class MetricsServer : SocketAcceptor::Handler {
 public:
  using Render = std::function<std::string()>;  // the text exposition format, whole

  // Listens on `address`, HOST:PORT ([V6]:PORT; port 0 takes any free one) and serves from a
  // thread of its own until destroyed. Throws std::runtime_error naming the address.
  MetricsServer(const std::string& address, Render render);
  ~MetricsServer() override;
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  uint16_t port() const { return port_; }

  static constexpr std::size_t kMaxConnections = 1024;
  static constexpr std::size_t kMaxRequestBytes = 8192;
  static constexpr std::chrono::milliseconds kRequestTimeout{2000};
  static constexpr std::chrono::milliseconds kResponseTimeout{10000};

 private:
  using Clock = std::chrono::steady_clock;
  struct Connection : AnsweredConnection {
    bool answering = false;  // the request is in; `out` is its answer
  };

  // SocketAcceptor::Handler: a connection is pending (closed first to make room) until its
  // request is in, then has its answer's deadline.
  bool on_accept(net::Fd& fd) override;
  void on_event(int fd, uint32_t events) override;
  void on_close(int fd, SocketAcceptor::CloseReason) override;

  // Answers once the request is complete; false when the connection must close now.
  bool read_request(Connection& c);
  std::string answer(const std::string& request);

  Render render_;
  uint16_t port_ = 0;  // before acceptor_: listening sets it
  std::map<int, Connection> connections_;
  SocketAcceptor acceptor_;  // last: its thread calls back into the members above
};

}  // namespace iris::daemon
