// The meeting point: a TCP port of irisd (`--meeting-address`, off by default) where the ranks of
// a job spread over nodes learn every rank's node, so that a job whose ranks hold nothing but a
// shared id (NCCL's ncclUniqueId carries this address) makes one communicator across nodes, with
// no MPI and no other service. The protocol is meeting_wire.hpp's; the rules are MeetingGroups'.
//
// Anyone on the network may connect, so a connection costs a descriptor and a few kilobytes,
// never a thread (SocketAcceptor): its hello must be complete within the handshake timeout and
// at most 8 KiB, the oldest connection without one is closed to make room, a job waits at most
// kWait for its ranks, at most kMaxGroups jobs wait at once, and an answer not taken within
// kAnswerTimeout is dropped. What it hands out (nodes' scale-out addresses) reaches only ranks
// that know the job's 32-byte secret.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "daemon/answered_connection.hpp"
#include "daemon/front/meeting_groups.hpp"
#include "daemon/socket_acceptor.hpp"

namespace iris::daemon {

class MeetingPoint : SocketAcceptor::Handler {
 public:
  // Listens on `address` (HOST:PORT, [V6]:PORT; port 0: any free one) from a thread of its own
  // until destroyed. Throws std::runtime_error naming the address.
  MeetingPoint(const std::string& address, std::chrono::milliseconds hello_timeout);
  ~MeetingPoint() override;
  MeetingPoint(const MeetingPoint&) = delete;
  MeetingPoint& operator=(const MeetingPoint&) = delete;

  // Where the other nodes reach it: HOST:PORT with the bound port.
  const std::string& address() const { return address_; }

  static constexpr std::size_t kMaxPending = 1024;
  static constexpr std::size_t kMaxOpen = 16384;
  static constexpr std::size_t kMaxGroups = 1024;
  static constexpr std::chrono::milliseconds kWait{300'000};
  static constexpr std::chrono::milliseconds kAnswerTimeout{10'000};

 private:
  using Clock = std::chrono::steady_clock;
  struct Connection : AnsweredConnection {
    bool waiting = false;  // its hello is in, its group is not complete
  };

  bool on_accept(net::Fd& fd) override;
  void on_event(int fd, uint32_t events) override;
  void on_close(int fd, SocketAcceptor::CloseReason why) override;

  // Reads the hello; false when the connection must close now.
  bool read_hello(Connection& c);
  // Queues each reply and starts sending it.
  void send(std::vector<MeetingGroups::Reply> replies);
  void expire_groups();

  std::chrono::milliseconds hello_timeout_;
  uint16_t port_ = 0;
  std::string address_;
  MeetingGroups groups_{{kMaxGroups, kWait}};
  std::map<int, Connection> connections_;
  SocketAcceptor acceptor_;  // last: its thread calls back into the members above
};

}  // namespace iris::daemon
