// meet_nodes (communicator.hpp): one hello to the meeting point over TCP and one answer back,
// every wait bounded by the caller's timeout and ended by its stop flag, the answer read as hostile
// (meeting_wire.hpp).
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "iris/client.hpp"
#include "iris/communicator.hpp"
#include "iris/error.hpp"
#include "iris/shared/meeting_wire.hpp"
#include "iris/shared/unix_socket.hpp"

namespace iris {

namespace {

using Clock = std::chrono::steady_clock;

static_assert(kMeetingSecretBytes == meeting::kGroupBytes);

[[noreturn]] void unreachable(const std::string& point, const std::string& why) {
  throw Error(ErrorCode::kUnavailable,
              "the meeting point " + point + " " + why +
                  ": is irisd there started with --meeting-address, and is the address "
                  "reachable from this node?");
}

// The caller's deadline and stop flag (meet_nodes' `stop`), looked at every kStopPoll.
struct Until {
  Clock::time_point deadline;
  const std::atomic<bool>* stop;
  const std::string& point;
  static constexpr int64_t kStopPoll = 10;  // ms
};

// Waits for `events` on `fd` until the deadline; false when it passed. Throws kCancelled once
// the stop flag is set.
bool wait_for(int fd, short events, const Until& until) {
  for (;;) {
    if (until.stop != nullptr && until.stop->load())
      throw Error(ErrorCode::kCancelled,
                  "the wait at the meeting point " + until.point + " was stopped by its caller");
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until.deadline - Clock::now())
            .count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int64_t slice = until.stop != nullptr ? Until::kStopPoll : 1000;
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, slice)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // the next call says what went wrong
  }
}

net::Fd connect_to(const Until& until) {
  const std::string& point = until.point;
  const auto colon = point.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == point.size())
    throw Error(ErrorCode::kInvalidArgument,
                "meeting point '" + point +
                    "' is not HOST:PORT (Client::meeting_point() of the "
                    "node whose irisd has --meeting-address)");
  std::string host = point.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  if (const int r = ::getaddrinfo(host.c_str(), point.c_str() + colon + 1, &hints, &list); r != 0)
    unreachable(point, std::string("cannot be resolved: ") + ::gai_strerror(r));
  // Freed however this returns: a stopped wait throws from inside the loop.
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> found(list, &::freeaddrinfo);
  std::string why = "has no address";
  for (addrinfo* a = found.get(); a != nullptr; a = a->ai_next) {
    net::Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) continue;
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      why = std::string("refused the connection: ") + std::strerror(errno);
      continue;
    }
    if (!wait_for(fd.get(), POLLOUT, until)) {
      why = "did not accept the connection in time";
      continue;
    }
    int error = 0;
    socklen_t len = sizeof(error);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len);
    if (error != 0) {
      why = std::string("refused the connection: ") + std::strerror(error);
      continue;
    }
    return fd;
  }
  unreachable(point, why);
}

}  // namespace

NodeSet meet_nodes(Client& client, const std::string& meeting_point, const std::string& secret,
                   uint32_t nranks, uint32_t rank, std::chrono::milliseconds timeout,
                   const std::atomic<bool>* stop) {
  if (secret.size() != kMeetingSecretBytes)
    throw Error(ErrorCode::kInvalidArgument,
                "a meeting secret is " + std::to_string(kMeetingSecretBytes) +
                    " random bytes, the same on every rank; got " + std::to_string(secret.size()));
  if (nranks < 1 || nranks > meeting::kMaxRanks || rank >= nranks)
    throw Error(ErrorCode::kInvalidArgument,
                "rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ": 1 to " +
                    std::to_string(meeting::kMaxRanks) + " ranks, rank below nranks");
  meeting::Hello hello;
  std::memcpy(hello.group.data(), secret.data(), secret.size());
  hello.nranks = nranks;
  hello.rank = rank;
  hello.node_address = client.node_address();
  const Until until{Clock::now() + timeout, stop, meeting_point};
  const net::Fd fd = connect_to(until);

  const std::string out = meeting::encode(hello);
  for (std::size_t sent = 0; sent < out.size();) {
    const ssize_t n = ::send(fd.get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      unreachable(meeting_point, std::string("hung up: ") + std::strerror(errno));
    } else if (!wait_for(fd.get(), POLLOUT, until)) {
      throw Error(ErrorCode::kTimeout, "the meeting point " + meeting_point +
                                           " did not take this rank's hello within " +
                                           std::to_string(timeout.count()) + " ms");
    }
  }

  std::string in;
  meeting::Answer answer;
  for (;;) {
    std::size_t used = 0;
    std::string why;
    const meeting::Take t =
        meeting::decode(in, answer, used, why, meeting::max_answer_bytes(nranks));
    if (t == meeting::Take::kBad) unreachable(meeting_point, "answered garbage (" + why + ")");
    if (t == meeting::Take::kDone) break;
    if (!wait_for(fd.get(), POLLIN, until))
      throw Error(ErrorCode::kTimeout,
                  "rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " waited " +
                      std::to_string(timeout.count()) + " ms at the meeting point " +
                      meeting_point +
                      " for the other ranks: did every rank get the same id, and did they all "
                      "start?");
    char buf[16384];
    const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n == 0) unreachable(meeting_point, "hung up before answering");
    if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
      unreachable(meeting_point, std::string("hung up: ") + std::strerror(errno));
    if (n > 0) in.append(buf, static_cast<std::size_t>(n));
  }
  if (answer.error != ErrorCode::kOk)
    throw Error(answer.error, "the meeting point " + meeting_point + ": " + answer.message);
  if (answer.node_of_rank.size() != nranks)
    unreachable(meeting_point, "answered for " + std::to_string(answer.node_of_rank.size()) +
                                   " ranks, not " + std::to_string(nranks));
  NodeSet nodes;
  nodes.addresses = std::move(answer.addresses);
  nodes.node_of_rank = std::move(answer.node_of_rank);
  nodes.secret = secret;
  return nodes;
}

}  // namespace iris
