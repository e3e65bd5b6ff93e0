#include "daemon/operations/metrics_server.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "daemon/tcp_listen.hpp"

namespace iris::daemon {

namespace {

std::string http_response(const char* status, const std::string& type, const std::string& body,
                          bool with_body = true) {
  std::string r = std::string("HTTP/1.1 ") + status + "\r\nContent-Type: " + type +
                  "\r\nContent-Length: " + std::to_string(body.size()) +
                  "\r\nConnection: close\r\n\r\n";
  if (with_body) r += body;
  return r;
}

}  // namespace

MetricsServer::MetricsServer(const std::string& address, Render render)
    : render_(std::move(render)),
      acceptor_("metrics", listen_tcp("metrics", address, port_),
                {kMaxConnections, kMaxConnections, "raise LimitNOFILE"}, *this) {
  acceptor_.start();
}

MetricsServer::~MetricsServer() { acceptor_.stop(); }

bool MetricsServer::on_accept(net::Fd& fd) {
  const int raw = fd.get();
  acceptor_.set_deadline(raw, Clock::now() + kRequestTimeout, true);
  Connection c;
  c.fd = std::move(fd);
  connections_.emplace(raw, std::move(c));
  return true;
}

void MetricsServer::on_event(int fd, uint32_t events) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  bool keep;
  if (!c.answering) {
    keep = read_request(c);
  } else {
    keep = (events & (EPOLLHUP | EPOLLERR)) == 0 && ((events & EPOLLOUT) == 0 || c.write_answer());
  }
  if (!keep) acceptor_.close(fd);
}

bool MetricsServer::read_request(Connection& c) {
  if (!c.read_available(kMaxRequestBytes)) return false;
  if (c.in.size() > kMaxRequestBytes)
    c.out = http_response("431 Request Header Fields Too Large", "text/plain",
                          "request over 8192 bytes\n");
  if (c.out.empty()) {
    const auto end = c.in.find("\r\n\r\n");
    if (end == std::string::npos && c.in.find("\n\n") == std::string::npos)
      return true;  // not all of it yet
    c.out = answer(c.in);
  }
  c.answering = true;
  c.in.clear();
  acceptor_.set_deadline(c.fd.get(), Clock::now() + kResponseTimeout, false);
  // Only writability from here: a peer that half-closes must not wake this thread over and over.
  acceptor_.watch(c.fd.get(), EPOLLOUT);
  return c.write_answer();
}

std::string MetricsServer::answer(const std::string& request) {
  const auto line_end = request.find_first_of("\r\n");
  const std::string line = request.substr(0, line_end);
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0)
    return http_response("400 Bad Request", "text/plain", "not an HTTP request\n");
  const std::string method = line.substr(0, sp1);
  std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD")
    return http_response("405 Method Not Allowed", "text/plain", "GET /metrics only\n");
  if (path != "/metrics")
    return http_response("404 Not Found", "text/plain", "irisd serves /metrics only\n",
                         method == "GET");
  std::string body;
  try {
    body = render_();
  } catch (const std::exception& e) {
    spdlog::error("metrics: rendering failed: {}", e.what());
    return http_response("500 Internal Server Error", "text/plain", "rendering failed\n");
  }
  return http_response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body, method == "GET");
}

void MetricsServer::on_close(int fd, SocketAcceptor::CloseReason) { connections_.erase(fd); }

}  // namespace iris::daemon
