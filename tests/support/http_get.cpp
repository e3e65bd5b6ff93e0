#include "tests/support/http_get.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include "iris/shared/unix_socket.hpp"

namespace iris::testing {

HttpResponse http_get(const std::string& address, const std::string& target) {
  const auto colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(address.c_str() + colon + 1)));
  if (::inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1)
    throw std::runtime_error("not an IPv4 HOST:PORT: " + address);
  net::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  timeval timeout{10, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return {};
  const std::string request =
      "GET " + target + " HTTP/1.0\r\nHost: " + address + "\r\nConnection: close\r\n\r\n";
  if (::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size()))
    return {};
  std::string raw;
  char buf[8192];
  ssize_t n;
  while ((n = ::recv(fd.get(), buf, sizeof(buf), 0)) > 0) raw.append(buf, n);
  const auto header_end = raw.find("\r\n\r\n");
  const auto space = raw.find(' ');
  if (header_end == std::string::npos || space == std::string::npos) return {};
  return {std::atoi(raw.c_str() + space + 1), raw.substr(header_end + 4)};
}

int free_loopback_port() {
  net::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error("no free loopback port");
  return ntohs(addr.sin_port);
}

}  // namespace iris::testing
