#include "daemon/operations/metrics_server.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace iris::daemon {

namespace {

void watch(int epoll_fd, int fd, uint32_t events, int op = EPOLL_CTL_ADD) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_fd, op, fd, &ev) != 0)
    throw std::runtime_error(std::string("metrics: epoll_ctl: ") + std::strerror(errno));
}

// HOST:PORT or [HOST]:PORT into its parts.
std::pair<std::string, std::string> split_address(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size())
    throw std::runtime_error("metrics address '" + address + "' is not HOST:PORT");
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return {host, address.substr(colon + 1)};
}

net::Fd listen_tcp(const std::string& address, uint16_t& port) {
  const auto [host, service] = split_address(address);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int r =
          ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      r != 0)
    throw std::runtime_error("metrics address '" + address + "': " + ::gai_strerror(r));
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    net::Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) continue;
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 128) != 0) {
      why = std::strerror(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    ::freeaddrinfo(found);
    return fd;
  }
  ::freeaddrinfo(found);
  throw std::runtime_error("cannot serve metrics on " + address + ": " + why);
}

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
      listen_fd_(listen_tcp(address, port_)),
      epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)),
      stop_fd_(::eventfd(0, EFD_CLOEXEC)) {
  if (!epoll_fd_ || !stop_fd_)
    throw std::runtime_error(std::string("metrics: ") + std::strerror(errno));
  watch(epoll_fd_.get(), listen_fd_.get(), EPOLLIN);
  watch(epoll_fd_.get(), stop_fd_.get(), EPOLLIN);
  thread_ = std::thread([this] { run(); });
}

MetricsServer::~MetricsServer() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(stop_fd_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

int MetricsServer::next_timeout_ms() const {
  if (connections_.empty()) return -1;
  auto next = connections_.begin()->second.deadline;
  for (const auto& [fd, c] : connections_) next = std::min(next, c.deadline);
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000));
}

void MetricsServer::run() {
  epoll_event events[64];
  for (;;) {
    const int n = ::epoll_wait(epoll_fd_.get(), events, 64, next_timeout_ms());
    if (n < 0 && errno != EINTR) {
      spdlog::error("metrics: epoll_wait: {}; /metrics is no longer served", std::strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_fd_.get()) return;
      if (fd == listen_fd_.get()) {
        accept_all();
      } else {
        on_event(fd, events[i].events);
      }
    }
    const auto now = Clock::now();
    std::vector<int> expired;
    for (const auto& [fd, c] : connections_)
      if (now >= c.deadline) expired.push_back(fd);
    for (int fd : expired) close_connection(fd);
  }
}

bool MetricsServer::close_oldest_unanswered() {
  auto oldest = connections_.end();
  for (auto it = connections_.begin(); it != connections_.end(); ++it)
    if (!it->second.answering &&
        (oldest == connections_.end() || it->second.deadline < oldest->second.deadline))
      oldest = it;
  if (oldest == connections_.end()) return false;
  close_connection(oldest->first);
  return true;
}

void MetricsServer::accept_all() {
  for (;;) {
    if (connections_.size() >= kMaxConnections && !close_oldest_unanswered()) return;
    const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // Out of descriptors: make room from the oldest unanswered connection and try again.
      if ((errno == EMFILE || errno == ENFILE) && close_oldest_unanswered()) continue;
      return;
    }
    Connection c;
    c.fd = net::Fd(fd);
    c.deadline = Clock::now() + kRequestTimeout;
    try {
      watch(epoll_fd_.get(), fd, EPOLLIN | EPOLLRDHUP);
    } catch (const std::exception& e) {
      spdlog::debug("{}", e.what());
      continue;  // c closes the descriptor
    }
    connections_.emplace(fd, std::move(c));
  }
}

void MetricsServer::on_event(int fd, uint32_t events) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  bool keep;
  if (!c.answering) {
    keep = read_request(c);
  } else {
    keep = (events & (EPOLLHUP | EPOLLERR)) == 0 && ((events & EPOLLOUT) == 0 || write_answer(c));
  }
  if (!keep) close_connection(fd);
}

bool MetricsServer::read_request(Connection& c) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), 0);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return false;
    }
    c.in.append(buf, static_cast<std::size_t>(n));
    if (c.in.size() > kMaxRequestBytes) {
      c.out = http_response("431 Request Header Fields Too Large", "text/plain",
                            "request over 8192 bytes\n");
      break;
    }
  }
  if (c.out.empty()) {
    const auto end = c.in.find("\r\n\r\n");
    if (end == std::string::npos && c.in.find("\n\n") == std::string::npos)
      return true;  // not all of it yet
    c.out = answer(c.in);
  }
  c.answering = true;
  c.in.clear();
  c.deadline = Clock::now() + kResponseTimeout;
  // Only writability from here: a peer that half-closes must not wake this thread over and over.
  watch(epoll_fd_.get(), c.fd.get(), EPOLLOUT, EPOLL_CTL_MOD);
  return write_answer(c);
}

bool MetricsServer::write_answer(Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n =
        ::send(c.fd.get(), c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;  // the rest when the socket drains
    }
    c.sent += static_cast<std::size_t>(n);
  }
  return false;  // all sent: close
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

void MetricsServer::close_connection(int fd) {
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  connections_.erase(fd);
}

}  // namespace iris::daemon
