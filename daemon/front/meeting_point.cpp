// The meeting point's connections (meeting_point.hpp).
#include "daemon/front/meeting_point.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>

#include <spdlog/spdlog.h>

#include "daemon/tcp_listen.hpp"

namespace iris::daemon {

MeetingPoint::MeetingPoint(const std::string& address, std::chrono::milliseconds hello_timeout)
    : hello_timeout_(hello_timeout),
      acceptor_("meeting point", listen_tcp("meeting point", address, port_),
                {kMaxPending, kMaxOpen, "raise LimitNOFILE"}, *this) {
  address_ = with_port(address, port_);
  acceptor_.start();
}

MeetingPoint::~MeetingPoint() { acceptor_.stop(); }

bool MeetingPoint::on_accept(net::Fd& fd) {
  const int raw = fd.get();
  acceptor_.set_deadline(raw, Clock::now() + hello_timeout_, true);
  Connection c;
  c.fd = std::move(fd);
  connections_.emplace(raw, std::move(c));
  return true;
}

void MeetingPoint::on_event(int fd, uint32_t events) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  bool keep;
  if (!c.out.empty()) {
    keep = (events & (EPOLLHUP | EPOLLERR)) == 0 && ((events & EPOLLOUT) == 0 || c.write_answer());
  } else if (c.waiting) {
    // A waiting rank sends nothing more: whatever comes is its leaving (or garbage).
    char byte;
    keep = ::recv(fd, &byte, 1, MSG_PEEK) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  } else {
    keep = read_hello(c);
  }
  if (!keep) acceptor_.close(fd);
}

bool MeetingPoint::read_hello(Connection& c) {
  if (!c.read_available(meeting::kMaxHelloBytes + 4)) return false;
  meeting::Hello hello;
  std::size_t used = 0;
  std::string why;
  switch (meeting::decode(c.in, hello, used, why)) {
    case meeting::Take::kNeedMore:
      return true;
    case meeting::Take::kBad: {
      spdlog::debug("meeting point: connection {} refused: {}", c.fd.get(), why);
      meeting::Answer refusal;
      refusal.error = ErrorCode::kInvalidArgument;
      refusal.message = "the meeting point refused the hello: " + why;
      send({{c.fd.get(), meeting::encode(refusal)}});
      return true;
    }
    case meeting::Take::kDone:
      break;
  }
  if (used != c.in.size()) return false;  // a rank sends one hello and waits
  c.in.clear();
  c.waiting = true;
  const int fd = c.fd.get();
  auto replies = groups_.arrive(fd, hello, Clock::now());
  if (const auto deadline = groups_.deadline(fd)) acceptor_.set_deadline(fd, *deadline, false);
  send(std::move(replies));
  return true;
}

void MeetingPoint::send(std::vector<MeetingGroups::Reply> replies) {
  std::vector<int> done;
  for (MeetingGroups::Reply& r : replies) {
    auto it = connections_.find(r.connection);
    if (it == connections_.end()) continue;
    Connection& c = it->second;
    c.waiting = false;
    c.out = std::move(r.bytes);
    acceptor_.set_deadline(r.connection, Clock::now() + kAnswerTimeout, false);
    // Only writability from here: a peer that half-closes must not wake this thread again.
    acceptor_.watch(r.connection, EPOLLOUT);
    if (!c.write_answer()) done.push_back(r.connection);
  }
  for (int fd : done) acceptor_.close(fd);
}

void MeetingPoint::on_close(int fd, SocketAcceptor::CloseReason why) {
  // A waiting rank's deadline is its group's: tell the group's ranks (whose deadlines are the
  // same, so they close in this pass) why, in one try each; the answer is a few hundred bytes,
  // which an empty socket buffer takes.
  if (why == SocketAcceptor::CloseReason::kExpired && groups_.deadline(fd)) {
    for (const MeetingGroups::Reply& r : groups_.expire(Clock::now())) {
      const auto c = connections_.find(r.connection);
      if (c == connections_.end()) continue;
      ::send(r.connection, r.bytes.data(), r.bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      c->second.waiting = false;
    }
  }
  groups_.leave(fd);
  connections_.erase(fd);
}

}  // namespace iris::daemon
