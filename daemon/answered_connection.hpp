// A connection of a server that reads one request and writes one answer over SocketAcceptor
// (the metrics, the meeting point): the non-blocking reads and writes both need, written once.
#pragma once

#include <cstddef>
#include <string>

#include "iris/shared/unix_socket.hpp"

namespace iris::daemon {

struct AnsweredConnection {
  net::Fd fd;
  std::string in;   // the request so far
  std::string out;  // the answer, once there is one
  std::size_t sent = 0;

  // Appends what has arrived, stopping past `max` bytes; false when the peer closed or failed.
  bool read_available(std::size_t max);
  // Sends what is left of `out`: true while some remains (wait for writability), false once all
  // is sent or the peer failed (close it then).
  bool write_answer();
};

}  // namespace iris::daemon
