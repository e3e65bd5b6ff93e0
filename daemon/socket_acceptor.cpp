#include "daemon/socket_acceptor.hpp"

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
void epoll_set(int epoll_fd, int op, int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_fd, op, fd, &ev) != 0)
    throw std::runtime_error(std::string("epoll_ctl: ") + std::strerror(errno));
}
}  // namespace

SocketAcceptor::SocketAcceptor(std::string name, net::Fd listen_fd, Limits limits, Handler& handler)
    : name_(std::move(name)),
      listen_fd_(std::move(listen_fd)),
      limits_(std::move(limits)),
      handler_(handler),
      epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)),
      stop_fd_(::eventfd(0, EFD_CLOEXEC)) {
  if (!epoll_fd_ || !stop_fd_) throw std::runtime_error(name_ + ": " + std::strerror(errno));
  epoll_set(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), EPOLLIN);
  epoll_set(epoll_fd_.get(), EPOLL_CTL_ADD, stop_fd_.get(), EPOLLIN);
}

SocketAcceptor::~SocketAcceptor() { stop(); }

void SocketAcceptor::start() {
  thread_ = std::thread([this] { run(); });
}

void SocketAcceptor::stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(stop_fd_.get(), &one, sizeof(one));
  thread_.join();
}

void SocketAcceptor::set_deadline(int fd, Clock::time_point deadline, bool pending) {
  clear_deadline(fd);
  deadline_of_[fd] = {deadline, pending};
  by_deadline_.emplace(deadline, fd);
  if (pending) pending_.emplace(deadline, fd);
}

void SocketAcceptor::clear_deadline(int fd) {
  const auto it = deadline_of_.find(fd);
  if (it == deadline_of_.end()) return;
  by_deadline_.erase({it->second.at, fd});
  pending_.erase({it->second.at, fd});
  deadline_of_.erase(it);
}

void SocketAcceptor::watch(int fd, uint32_t events) {
  epoll_set(epoll_fd_.get(), EPOLL_CTL_MOD, fd, events);
}

int SocketAcceptor::next_timeout_ms() const {
  std::optional<Clock::time_point> next = accept_paused_until_;
  if (!by_deadline_.empty() && (!next || by_deadline_.begin()->first < *next))
    next = by_deadline_.begin()->first;
  if (!next) return -1;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000));
}

void SocketAcceptor::run() {
  epoll_event events[64];
  for (;;) {
    const int n = ::epoll_wait(epoll_fd_.get(), events, 64, next_timeout_ms());
    if (n < 0 && errno != EINTR) {
      spdlog::error("{}: epoll_wait: {}; no longer served", name_, std::strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_fd_.get()) return;
      if (fd == listen_fd_.get()) {
        accept_all();
      } else if (open_.contains(fd)) {
        handler_.on_event(fd, events[i].events);
      }
    }
    close_expired();
    if (accept_paused_until_ && Clock::now() >= *accept_paused_until_) {
      accept_paused_until_.reset();
      epoll_set(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), EPOLLIN);
    }
  }
}

void SocketAcceptor::accept_all() {
  for (;;) {
    if (pending_.size() >= limits_.max_pending) close_oldest_pending();
    if (open_.size() >= limits_.max_open && !close_oldest_pending()) {
      pause_accepting("at its limit of " + std::to_string(limits_.max_open) + " connections");
      return;
    }
    const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        const int error = errno;
        if (close_oldest_pending()) continue;  // its descriptor is free now
        pause_accepting(std::strerror(error));
      }
      return;
    }
    net::Fd conn(fd);
    try {
      epoll_set(epoll_fd_.get(), EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLRDHUP);
    } catch (const std::exception& e) {
      pause_accepting(e.what());
      return;  // `conn` closes it
    }
    open_.insert(fd);
    if (!handler_.on_accept(conn)) {  // refused: `conn` closes it
      clear_deadline(fd);
      open_.erase(fd);
      ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
    }
  }
}

bool SocketAcceptor::close_oldest_pending() {
  if (pending_.empty()) return false;
  close(pending_.begin()->second, CloseReason::kEvicted);
  return true;
}

void SocketAcceptor::close_expired() {
  const auto now = Clock::now();
  while (!by_deadline_.empty() && by_deadline_.begin()->first <= now)
    close(by_deadline_.begin()->second, CloseReason::kExpired);
}

void SocketAcceptor::close(int fd, CloseReason why) {
  clear_deadline(fd);
  if (open_.erase(fd) == 0) return;
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  handler_.on_close(fd, why);
}

void SocketAcceptor::pause_accepting(const std::string& why) {
  // Level-triggered epoll would report the pending connection again at once: take the listening
  // socket out for a while instead of spinning on accept().
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, listen_fd_.get(), nullptr);
  accept_paused_until_ = Clock::now() + kAcceptPause;
  ++accept_failures_since_warning_;
  if (Clock::now() - last_accept_warning_ >= kAcceptWarningInterval) {
    spdlog::warn(
        "{}: cannot accept ({}; {} connections open, {} failures in the last {} s): pausing "
        "accepts for {} ms; {}",
        name_, why, open_.size(), accept_failures_since_warning_,
        std::chrono::duration_cast<std::chrono::seconds>(kAcceptWarningInterval).count(),
        kAcceptPause.count(), limits_.out_of_descriptors_hint);
    last_accept_warning_ = Clock::now();
    accept_failures_since_warning_ = 0;
  }
}

}  // namespace iris::daemon
