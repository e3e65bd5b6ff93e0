// Reads and writes of a request-and-answer connection (answered_connection.hpp).
#include "daemon/answered_connection.hpp"

#include <sys/socket.h>

#include <cerrno>

namespace iris::daemon {

bool AnsweredConnection::read_available(std::size_t max) {
  char buf[4096];
  while (in.size() <= max) {
    const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    in.append(buf, static_cast<std::size_t>(n));
  }
  return true;
}

bool AnsweredConnection::write_answer() {
  while (sent < out.size()) {
    const ssize_t n = ::send(fd.get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;  // the rest when the socket drains
    }
    sent += static_cast<std::size_t>(n);
  }
  return false;  // all sent: close
}

}  // namespace iris::daemon
