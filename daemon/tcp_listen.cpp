// Listening TCP sockets (tcp_listen.hpp).
#include "daemon/tcp_listen.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace iris::daemon {

namespace {

// HOST:PORT or [HOST]:PORT into its parts.
std::pair<std::string, std::string> split_address(const std::string& what,
                                                  const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size())
    throw std::runtime_error(what + " address '" + address + "' is not HOST:PORT");
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return {host, address.substr(colon + 1)};
}

}  // namespace

net::Fd listen_tcp(const std::string& what, const std::string& address, uint16_t& port) {
  const auto [host, service] = split_address(what, address);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int r =
          ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      r != 0)
    throw std::runtime_error(what + " address '" + address + "': " + ::gai_strerror(r));
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
  throw std::runtime_error("cannot serve " + what + " on " + address + ": " + why);
}

std::string with_port(const std::string& address, uint16_t port) {
  return address.substr(0, address.rfind(':')) + ":" + std::to_string(port);
}

}  // namespace iris::daemon
